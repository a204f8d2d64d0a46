"""The CPU a graph pass compiles for, for passes whose rewrite pays on some CPUs and not others
(int8 kernels need dot-product instructions; padded channels pay where the vectors are wide).

Pipelines run under a TVM target (:func:`explorer.workload.fusion.pipeline_target`: the build
target's own where it is another CPU than this machine's or a device, else a generic ``llvm`` one,
whose triple TVM fills in with this machine's): a target that names a CPU (``mcpu``) or another
architecture is that CPU; a generic one of this architecture, or none at all, is this machine; a
device target (CUDA) is no CPU. The decision follows the target built for, never the build host:
``schedx export --target cpu:znver3`` on an AVX-512 machine pads to AVX2's 8 lanes, and a CUDA build
on it gets no CPU's rewrite at all.

The passes that rewrite the graph for a CPU's vectors or caches (padded channels, Winograd products,
weights scaled by a gate, an expansion computed by bands, int8 kernels) are :func:`cpu_rewrite` passes:
where no CPU is built for, they leave the module as it is (a GPU's kernels are dlight's, which the
plain operators suit; a CPU's tile or cache size means nothing there)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

import tvm


def pass_cpu_target():
    """The :class:`explorer.target.Target` of the CPU the running pass compiles for (see the module
    docstring); None for a device target, or when the current TVM target is one schedx cannot read."""
    from explorer.target import TargetError, host_target, parse_target

    current = tvm.target.Target.current(allow_none=True)
    if current is None:
        return host_target()
    config = {k: v for k, v in dict(current.export()).items()
              if isinstance(v, (str, int, float, bool, list)) and k != "tag"}
    try:
        target = parse_target(json.dumps(config))
    except (TargetError, TypeError, ValueError):
        return None
    if not target.cpu_rules:  # a device's kernels run on no CPU
        return None
    if target.cpu_name == "generic" and not target.cross:
        return host_target()
    return target


PassFunction = Callable[[tvm.IRModule, tvm.transform.PassContext], tvm.IRModule]


def cpu_rewrite(rewrite: Callable[[tvm.IRModule, object], tvm.IRModule]) -> PassFunction:
    """A module pass function from ``rewrite(mod, target)``, which rewrites for the CPU ``target``
    (:func:`pass_cpu_target`, read once), run only where there is one: ``mod`` unchanged for a device
    target or one schedx cannot read (module docstring). Goes under ``tvm.transform.module_pass``."""
    @functools.wraps(rewrite)
    def run(mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        target = pass_cpu_target()
        return mod if target is None else rewrite(mod, target)
    return run


__all__ = ["cpu_rewrite", "pass_cpu_target"]
