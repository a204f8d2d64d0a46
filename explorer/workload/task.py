"""A task: one TensorIR kernel to tune and to schedule in an export, keyed as MetaSchedule keys
its workloads. A model's tasks are its fused kernels after the tuning pipeline; PrimFuncs that
are structurally equal (ResNet's repeated blocks) are one task, weighted by how often the model
calls them, so a search tunes each once and an export applies its schedule to all of them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import tvm

from explorer.kernels.kernel import MODEL_SOURCE
from explorer.workload.keys import module_hash, owned_task_module


@dataclass(frozen=True)
class Task:
    """One kernel to tune: ``name`` (``model/func`` or the kernel's name), workload ``key``,
    ``mod`` (the normalised one-function module MetaSchedule tunes), ``calls`` per run of the
    workload, FLOPs of one call, ``funcs``: the PrimFuncs of the fused module it stands for, and
    ``model``: the model it was fused from ("" for a kernel on its own)."""

    name: str
    key: str
    mod: tvm.IRModule = field(compare=False, repr=False)
    calls: int = 1
    flops: int = 0
    funcs: tuple[str, ...] = ()
    model: str = ""

    @property
    def kind(self) -> str:
        """The kind of workload the store files it under: ``model_task`` or ``kernel``."""
        return "model_task" if self.model else "kernel"

    @property
    def hand_written(self) -> bool:
        """Written whole by schedx: a recurrent layer's sequence kernel (a build writes it again for its
        target) or a kernel a graph pass writes scheduled (``tirx.is_scheduled``: a TopK's selection,
        :mod:`explorer.passes.topk_select`). No search space: a search skips it, an export keeps it."""
        from explorer.ir.tir_walk import is_scheduled
        from explorer.schedule.defaults.recurrence_spec import spec_of

        func = self.mod["main"]
        return spec_of(func) is not None or is_scheduled(func)

    @property
    def weight(self) -> float:
        """How much the search favours it: calls per run (MetaSchedule's task weight)."""
        return float(max(1, self.calls))

    @property
    def work(self) -> int:
        """FLOPs of all its calls in one run."""
        return self.flops * max(1, self.calls)

    def to_dict(self) -> dict:
        return {"name": self.name, "key": self.key, "calls": self.calls, "flops": self.flops, "funcs": list(self.funcs),
                "model": self.model}


def _flops(mod: tvm.IRModule) -> int:
    from tvm.s_tir.analysis import estimate_tir_flops

    from explorer.schedule.defaults.recurrence_spec import spec_of

    spec = spec_of(mod["main"])
    if spec is not None:  # a recurrent layer's: its matrix-vector products (TVM's estimate counts every exp's polynomial)
        return 2 * spec.macs()
    try:
        return int(estimate_tir_flops(mod))
    except Exception:  # noqa: BLE001 - opaque bodies: no FLOPs estimate
        return 0


def call_counts(mod: tvm.IRModule) -> Counter:
    """How many times ``main`` calls each PrimFunc."""
    from tvm import relax

    from explorer.ir.relax_walk import callee_name, iter_bindings

    counts: Counter = Counter()
    if "main" not in [g.name_hint for g in mod.get_global_vars()]:
        return counts
    for b in iter_bindings(mod["main"]):
        if isinstance(b.value, relax.Call):
            counts[callee_name(b.value)] += 1
    return counts


def module_tasks(mod: tvm.IRModule, prefix: str = "") -> list[Task]:
    """The tasks of a fused module (the PrimFuncs ``main`` calls, equal ones merged), most work
    first. Task names are ``prefix/func`` with the first such PrimFunc's name."""
    from explorer.ir.relax_walk import prim_funcs

    calls = call_counts(mod)
    groups: dict[str, dict] = {}
    for name, func in prim_funcs(mod).items():
        task_mod = owned_task_module(func)  # the task's own copy: a search schedules it
        key = module_hash(task_mod)
        group = groups.setdefault(key, {"name": name, "mod": task_mod, "calls": 0, "funcs": []})
        group["calls"] += int(calls.get(name, 0)) if calls else 1
        group["funcs"].append(name)
    tasks = [Task(name=f"{prefix}/{g['name']}" if prefix else g["name"], key=key, mod=g["mod"],
                  calls=max(1, g["calls"]), flops=_flops(g["mod"]), funcs=tuple(g["funcs"]), model=prefix)
             for key, g in groups.items()]
    tasks.sort(key=lambda t: (-t.work, t.name))
    return tasks


def relax_name(kernel_name: str) -> str:
    """The name a kernel's PrimFunc gets in the Relax module that wraps it (an identifier)."""
    name = kernel_name.split("/")[-1]
    return "".join(ch if ch.isalnum() else "_" for ch in name).strip("_") or "kernel"


def kernel_task(kernel) -> Task:
    """The one task of a kernel (an :class:`explorer.kernels.Kernel`), named as the kernel; its
    function is the one :func:`explorer.workload.kernel_module` wraps."""
    mod = owned_task_module(kernel.func)
    model = kernel.info.source.removeprefix(MODEL_SOURCE) if kernel.info.workload_kind == "model_task" else ""
    return Task(name=kernel.info.name, key=module_hash(mod), mod=mod, calls=1, flops=int(kernel.info.flops),
                funcs=(relax_name(kernel.info.name),), model=model)


__all__ = ["Task", "call_counts", "kernel_task", "module_tasks", "relax_name"]
