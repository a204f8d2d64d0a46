"""The CPU a graph pass compiles for, for passes whose rewrite pays on some CPUs and not others
(int8 kernels need dot-product instructions; padded channels pay where the vectors are wide).

Pipelines run under a TVM target (:func:`explorer.workload.fusion.pipeline_target`: the build
target's own where it is another CPU than this machine's, else a generic ``llvm`` one, whose triple
TVM fills in with this machine's): a target that names a CPU (``mcpu``) or another architecture is
that CPU; a generic one of this architecture, a device target (its host half) or none at all is this
machine. The decision follows the target built for, never the build host: ``schedx export --target
cpu:znver3`` on an AVX-512 machine pads to AVX2's 8 lanes."""

from __future__ import annotations

import json

import tvm


def pass_cpu_target():
    """The :class:`explorer.target.Target` of the CPU the running pass compiles for (see the module
    docstring); None when the current TVM target is one schedx cannot read."""
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
    if not target.cpu_rules or (target.cpu_name == "generic" and not target.cross):
        return host_target()
    return target


__all__ = ["pass_cpu_target"]
