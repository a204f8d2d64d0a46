"""The host CPU as a TVM target: LLVM's name for this CPU and the cores to use."""

from __future__ import annotations

import functools
import json

import tvm

from explorer.environment import cpu_info


@functools.lru_cache(maxsize=4)
def host_target(num_cores: int | None = None) -> dict:
    """``{"kind": "llvm", "mcpu": <this CPU>, "num-cores": N}`` (MetaSchedule needs num-cores)."""
    from tvm.target import codegen

    target: dict = {"kind": "llvm", "num-cores": int(num_cores or cpu_info()["usable_cores"])}
    try:
        cpu = codegen.llvm_get_system_cpu()
        triple = codegen.llvm_get_system_triple() if hasattr(codegen, "llvm_get_system_triple") else "x86_64-unknown-linux-gnu"
        if cpu and cpu != "generic" and codegen.llvm_is_valid_cpu(cpu, triple):
            target["mcpu"] = cpu
    except Exception:  # an LLVM without the query: a generic target still works
        pass
    return target


def target_key(target: dict | tvm.target.Target) -> str:
    """A canonical JSON string for a target, used to key records."""
    if isinstance(target, tvm.target.Target):
        exported = dict(target.export())
        target = {k: v for k, v in exported.items() if k in ("kind", "mcpu", "num-cores", "arch", "mattr", "keys")}
        target.pop("keys", None)
    return json.dumps(target, sort_keys=True)
