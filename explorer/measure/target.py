"""The host CPU as a TVM target: LLVM's name for this CPU and the cores to use."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping

import tvm

from explorer.environment import cpu_info
from explorer.plain import to_plain


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


_ALWAYS_KEPT = ("kind", "mcpu", "arch")  # identify the hardware even when equal to a default


@functools.lru_cache(maxsize=64)
def _kind_defaults(kind: str) -> dict:
    return to_plain(tvm.target.Target({"kind": kind}).export())


def _strip_defaults(config: dict) -> dict:
    base = _kind_defaults(config["kind"])
    out = {}
    for key, value in config.items():
        if key == "host" and isinstance(value, dict):
            out[key] = _strip_defaults(value)
        elif key in _ALWAYS_KEPT or key not in base or base[key] != value:
            if not (key == "tag" and value == ""):
                out[key] = value
    return out


@functools.lru_cache(maxsize=256)
def _canonical_text(config_text: str) -> str:
    config = to_plain(tvm.target.Target(json.loads(config_text)).export())
    return json.dumps(_strip_defaults(config), sort_keys=True)


def canonical_target(target: tvm.target.Target | Mapping | str) -> str:
    """The text records carry for a target (the Schedule page's and the search's alike): its
    config as sorted JSON, without the values every target of its kind has (``tag``, default
    ``keys``, ...): ``{"kind": "llvm", "mcpu": "znver4", "num-cores": 2}``. Equal targets give
    equal text, however they were written."""
    if isinstance(target, tvm.target.Target):
        config = to_plain(target.export())
    elif isinstance(target, str):
        config = json.loads(target) if target.lstrip().startswith("{") else {"kind": target}
    else:
        config = to_plain(target)
    return _canonical_text(json.dumps(config, sort_keys=True))
