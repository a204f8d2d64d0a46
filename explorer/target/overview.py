"""What ``schedx targets`` shows: the host target, the CPUs LLVM knows, CUDA architectures and
cross targets, each with whether this machine can run its code."""

from __future__ import annotations

from explorer.target.host import host_cpu
from explorer.target.arches import CPU_ARCHES
from explorer.target.model import CUDA_ARCHES, TargetError
from explorer.target.parse import host_target, known_cpus, parse_target


def _cpu_row(spec: str) -> dict:
    try:
        t = parse_target(spec)
    except TargetError as err:  # a CPU LLVM lists but cannot build for: shown, not fatal
        return {"spec": spec, "error": str(err)}
    return {"spec": spec, "cpu": t.cpu_name, "vector_width": t.vector_width, "runs_here": t.runs_here,
            "why_not_here": t.why_not_here()}


def targets_overview() -> dict:
    """Plain data: ``host`` (target, CPU name, features used and left out), ``cpus`` (named CPUs
    of this architecture), ``cuda`` (architectures), ``cross`` (other architectures)."""
    import shutil

    import tvm

    host = host_cpu()
    target = host_target()
    cpus = [_cpu_row(f"cpu:{name}") for name in known_cpus(host.triple) if name != "generic"]
    gpu = bool(tvm.cuda(0).exist)
    cross = []
    for arch, spec in sorted(CPU_ARCHES.items()):
        if arch == host.arch:
            continue
        triple, compiler = spec.triple, spec.cross_compiler
        cross.append({"spec": arch, "triple": triple, "compiler": compiler,
                      "compiler_installed": shutil.which(compiler) is not None,
                      "cpus": [c for c in known_cpus(triple) if c != "generic"], "runs_here": False,
                      "why_not_here": f"it is {arch} code and this machine is {host.arch}"})
    return {"host": {**target.to_dict(), "cpu": host.to_dict()},
            "cpus": cpus,
            "cuda": [{"spec": f"cuda:{a}", "runs_here": gpu,
                      "why_not_here": "" if gpu else "this machine has no CUDA GPU"} for a in CUDA_ARCHES],
            "cross": cross}
