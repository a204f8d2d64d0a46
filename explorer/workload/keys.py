"""How a TensorIR task is known: MetaSchedule's structural hash of its normalised module.

The same key joins a search's records, the leaderboard and an export: a PrimFunc is first
normalised as ``tune_tir`` does (``main`` with ``global_symbol`` and ``tirx.noalias``), then
hashed; the decimal text is what ``database_workload.json`` holds.
"""

from __future__ import annotations

import re

import tvm_ffi
from tvm.ir import IRModule
from tvm.tirx import PrimFunc

from explorer.ir.plain import to_plain

# A search tags each task's PrimFunc with its workload key, so that the builder and runner can
# tell which task a candidate belongs to (scheduling keeps function attributes). Hashes ignore it.
TASK_ATTR = "schedx.task"


def as_task_module(mod: IRModule | PrimFunc) -> IRModule:
    """``mod`` as MetaSchedule sees a task: a PrimFunc becomes ``{"main": func}`` with the
    ``global_symbol`` and ``tirx.noalias`` attributes ``tune_tir`` adds (they change the hash).

    The result shares the function's body: scheduling it (``s_tir.Schedule(module)``) rewrites
    that body in place. Use :func:`owned_task_module` for a module to schedule or keep."""
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    return _normalize_mod(mod)


def owned_task_module(func: PrimFunc) -> IRModule:
    """:func:`as_task_module` of a deep copy of ``func``: scheduling it never touches ``func``
    (TVM's ScheduleState edits nodes that only the module holds, and a task module built from a
    shared PrimFunc holds its body that way)."""
    import tvm

    return as_task_module(tvm.ir.load_json(tvm.ir.save_json(func)))


def tag_task(mod: IRModule, key: str) -> IRModule:
    """``mod`` (a one-function task module) with its ``main`` tagged as task ``key``: a copy of
    its own, so that what schedules it (MetaSchedule) never edits ``mod`` in place."""
    import tvm

    return IRModule({"main": tvm.ir.load_json(tvm.ir.save_json(mod["main"])).with_attr(TASK_ATTR, key)})


def task_tag(mod: IRModule) -> str | None:
    attrs = mod["main"].attrs
    return str(attrs[TASK_ATTR]) if attrs is not None and TASK_ATTR in attrs else None


def untagged(mod: IRModule) -> IRModule:
    """``mod`` without the task tag (what hashes and records see)."""
    if len(mod.functions) != 1 or task_tag(mod) is None:
        return mod
    return IRModule({"main": mod["main"].without_attr(TASK_ATTR)})


def module_hash(mod: IRModule) -> str:
    """MetaSchedule's structural hash of ``mod`` (task tag ignored) as decimal text: workload keys
    and search candidates alike."""
    return str(tvm_ffi.structural_hash(untagged(mod)) % (1 << 64))


def workload_key(mod: IRModule | PrimFunc) -> str:
    """The workload key of a task (a PrimFunc is first normalised as ``tune_tir`` does; a module
    is hashed as given)."""
    return module_hash(as_task_module(mod) if isinstance(mod, PrimFunc) else mod)


def module_to_b64(mod: IRModule) -> tuple[str, str]:
    """``(key, base64 module)`` exactly as MetaSchedule writes a line of database_workload.json."""
    from tvm.s_tir.meta_schedule.database import Workload

    key, b64 = to_plain(Workload(mod).as_json())
    return str(key), str(b64)


def module_from_b64(key: str, mod_b64: str) -> IRModule:
    """The module a database_workload.json line (or a store workload) holds."""
    from tvm.s_tir.meta_schedule.database import Workload

    return Workload.from_json([key, mod_b64]).mod


def _dtype_bytes(dtype: str) -> float:
    bits = re.findall(r"\d+", dtype)
    lanes = int(dtype.split("x")[-1]) if re.search(r"x\d+$", dtype) else 1
    return (int(bits[0]) if bits else 8) * lanes / 8


def _arguments(mod: IRModule) -> list[dict]:
    """Shape and dtype of each argument of a one-function TIR module's entry (empty where it has none)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    try:
        args = [a.as_json() for a in ArgInfo.from_entry_func(mod, remove_preproc=True)]
        return [{"shape": [int(d) for d in a[2]], "dtype": str(a[1])} for a in to_plain(args)]
    except Exception:  # noqa: BLE001 - a module without one entry function: describe what we can
        return []


def _bytes_of(args: list[dict]) -> int:
    import math

    return int(sum(_dtype_bytes(a["dtype"]) * math.prod(int(x) for x in a["shape"]) for a in args))


def argument_bytes(mod: IRModule) -> int:
    """Bytes of a one-function TIR module's arguments, each read or written once: the compulsory
    traffic of its roofline (:func:`describe_module`'s ``shapes["bytes"]``, without counting FLOPs)."""
    return _bytes_of(_arguments(mod))


def describe_module(mod: IRModule) -> dict:
    """Name, argument shapes (with total bytes) and FLOPs of a one-function TIR module; where its
    FLOP count is largely element-wise work beside its products, ``shapes["beside_products"]``
    (:func:`explorer.workload.product_flops.beside_products`: its GFLOPS may read above the FMA peak)."""
    from tvm.s_tir.analysis import estimate_tir_flops

    from explorer.workload.product_flops import beside_products

    func_name = mod.get_global_vars()[0].name_hint if len(mod.get_global_vars()) == 1 else "module"
    args = _arguments(mod)
    try:
        flops = int(estimate_tir_flops(mod))
    except Exception:  # noqa: BLE001
        flops = 0
    nbytes = _bytes_of(args)
    sig = "_".join("x".join(map(str, a["shape"])) or "scalar" for a in args)
    name = f"{func_name}_{sig}_{args[0]['dtype']}" if args else func_name
    shapes = {"args": args, "bytes": int(nbytes), **({"beside_products": True} if flops and beside_products(mod) else {})}
    return {"name": name[:120], "shapes": shapes, "flops": flops}


__all__ = ["TASK_ATTR", "argument_bytes", "as_task_module", "owned_task_module", "describe_module", "module_from_b64", "module_hash", "module_to_b64",
           "tag_task", "task_tag", "untagged", "workload_key"]
