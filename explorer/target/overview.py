"""What ``schedx targets`` shows: the host target, the CPUs LLVM knows, cross targets (every
registered CPU architecture but this machine's) and every registered device kind's rows, each
with whether this machine can run its code."""

from __future__ import annotations

from explorer.target.arches import CPU_ARCHES
from explorer.target.cpu import host_target, known_cpus
from explorer.target.host import host_cpu
from explorer.target.kinds import spec_help, target_kinds
from explorer.target.model import TargetError
from explorer.target.parse import parse_target


def _cpu_row(spec: str) -> dict:
    try:
        t = parse_target(spec)
    except TargetError as err:  # a CPU LLVM lists but cannot build for: shown, not fatal
        return {"spec": spec, "error": str(err)}
    return {"spec": spec, "cpu": t.cpu_name, "vector_width": t.vector_width, "runs_here": t.runs_here,
            "why_not_here": t.why_not_here()}


def targets_overview() -> dict:
    """Plain data: ``host`` (target, CPU name, features used and left out), ``cpus`` (named CPUs
    of this architecture), ``cross`` (other architectures), ``devices`` (each device kind: its
    ``kind``, ``title`` and ``rows``; the rows also under the kind's name, e.g. ``cuda``) and
    ``spellings`` (what ``--target`` takes)."""
    import shutil

    host = host_cpu()
    target = host_target()
    cpus = [_cpu_row(f"cpu:{name}") for name in known_cpus(host.triple) if name != "generic"]
    cross = []
    for arch, spec in sorted(CPU_ARCHES.items()):
        if arch == host.arch:
            continue
        triple, compiler = spec.triple, spec.cross_compiler
        cross.append({"spec": arch, "triple": triple, "compiler": compiler,
                      "compiler_installed": shutil.which(compiler) is not None,
                      "cpus": [c for c in known_cpus(triple) if c != "generic"], "runs_here": False,
                      "why_not_here": f"it is {arch} code and this machine is {host.arch}"})
    devices = [{"kind": k.name, "title": k.title, "rows": k.listing()} for k in target_kinds() if k.name != "cpu"]
    return {"host": {**target.to_dict(), "cpu": host.to_dict()}, "cpus": cpus, "cross": cross, "devices": devices,
            **{d["kind"]: d["rows"] for d in devices}, "spellings": spec_help()}
