"""The CPU kind: this machine's CPU and named CPUs of every registered architecture
(:data:`explorer.target.arches.CPU_ARCHES`), cross-compiled where the architecture is not this
machine's. Its spellings (``cpu``, ``cpu:MCPU``, ``cpu:MCPU+feat,-feat``, ``aarch64[:MCPU]``,
``{"kind": "llvm", ...}``) are parsed here, checked against what LLVM knows, and become a
:class:`explorer.target.CpuTarget`; registered in :mod:`explorer.target.kinds`."""

from __future__ import annotations

import functools
import re
from dataclasses import replace

from explorer.target import features as isa
from explorer.target.arches import CPU_ARCHES, cpu_intrinsics, host_arch
from explorer.target.host import HostCPU, host_cpu, llvm_features
from explorer.target.kind import TargetKind
from explorer.target.model import CpuTarget, Target, TargetError

# Cores of a device schedx cannot see (MetaSchedule needs a number; JSON targets may give theirs).
CROSS_CORES = 4
HOST_WORDS = ("cpu", "host", "llvm")


@functools.lru_cache(maxsize=8)
def known_cpus(triple: str) -> tuple[str, ...]:
    """The CPU names LLVM knows for ``triple``."""
    import tvm
    from tvm.target import codegen

    return tuple(str(c) for c in codegen.llvm_get_cpu_archlist(tvm.target.Target({"kind": "llvm", "mtriple": triple})))


@functools.lru_cache(maxsize=8)
def known_features(triple: str) -> frozenset[str]:
    """Every feature some CPU of ``triple`` has in LLVM, plus the ISA features schedx maps."""
    out = set(isa.BY_ARCH.get(isa.arch_of(triple), {}))
    for cpu in known_cpus(triple):
        out |= llvm_features({"kind": "llvm", "mtriple": triple, "mcpu": cpu})
    return frozenset(out)


def _cpu_list_hint(triple: str, bad: str) -> str:
    import difflib

    cpus = known_cpus(triple)
    arch = isa.arch_of(triple)
    close = difflib.get_close_matches(bad, cpus, n=4, cutoff=0.6)
    shown = ", ".join(close or [c for c in (CPU_ARCHES[arch].example_cpus if arch in CPU_ARCHES else ()) if c in cpus] or cpus[:8])
    here = host_cpu()
    mine = f"; this machine is {here.llvm_cpu}" if here.llvm_cpu and here.arch == arch else ""
    named = sum(c != "generic" for c in cpus)  # as `schedx targets` counts them
    return (f"{'did you mean' if close else 'valid names include'} {shown}{mine} "
            f"(`schedx targets` lists all {named} {arch} CPUs LLVM knows by name)")


def _split_cpu_arg(arg: str) -> tuple[str, list[str]]:
    """``znver4+avx512f,-avx2`` -> ``("znver4", ["+avx512f", "-avx2"])``; ``-avx512f`` -> ``("", [...])``."""
    parts = [p.strip() for p in arg.split(",")]
    head, changes = parts[0], []
    if head.startswith(("+", "-")):
        changes.append(head)
        head = ""
    elif "+" in head:
        head, *adds = head.split("+")
        changes += [f"+{a}" for a in adds]
    for p in parts[1:]:
        if not p.startswith(("+", "-")) or len(p) < 2:
            raise TargetError(f"cannot read {p!r} in {arg!r}: features are +NAME or -NAME, e.g. cpu:znver4,-avx512f")
        changes.append(p)
    return head, changes


def _check_features(changes: list[str], triple: str) -> None:
    known = known_features(triple)
    for c in changes:
        name = c[1:]
        if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name) or name not in known:
            sample = ", ".join(sorted(f for f in isa.BY_ARCH.get(isa.arch_of(triple), {}))[:14])
            raise TargetError(f"LLVM knows no feature {name!r} for {isa.arch_of(triple)}; features look like {sample}")


def _merge_mattr(base: list[str], changes: list[str]) -> list[str]:
    """``base`` with each ``+f``/``-f`` of ``changes`` replacing any earlier setting of ``f``."""
    out: dict[str, str] = {}
    for c in list(base) + list(changes):
        out[c[1:]] = c[0]
    return [f"{sign}{name}" for name, sign in sorted(out.items())]


def _cpu_config(triple: str, mcpu: str, mattr: list[str], cores: int, *, host_triple: str) -> dict:
    config: dict = {"kind": "llvm"}
    if triple != host_triple:
        config["mtriple"] = triple
    if mcpu:
        config["mcpu"] = mcpu
    if mattr:
        config["mattr"] = mattr
    config["num-cores"] = int(cores)
    width = isa.vector_width(llvm_features({**config, "mtriple": triple}), isa.arch_of(triple))
    if width and width != _tvm_vector_width({**config, "mtriple": triple}):
        config["vector-width"] = width  # TVM would guess another width than the features give
    return config


def _tvm_vector_width(config: dict) -> int:
    import tvm
    from tvm.target import codegen

    return int(codegen.llvm_get_vector_width(tvm.target.Target(config)))


def host_target(cores: int | None = None) -> Target:
    """This machine's CPU: LLVM's name for it, minus the features the machine hides."""
    return _host_target(cores, host_cpu())


@functools.lru_cache(maxsize=16)
def _host_target(cores: int | None, host: HostCPU) -> Target:
    mattr = [f"-{f}" for f in host.missing] + [f"+{f}" for f in host.extra]
    config = _cpu_config(host.triple, host.llvm_cpu, mattr, cores or host.cores, host_triple=host.triple)
    notes = (f"this CPU hides {', '.join(host.missing)} from LLVM's {host.llvm_cpu}: switched off",) if host.missing else ()
    if host.extra:
        notes += (f"this CPU has {', '.join(host.extra)} beyond LLVM's {host.llvm_cpu}: switched on",)
    return CpuTarget("cpu", host.arch, config, is_host=True, notes=notes)


def _cpu_target(spec: str, arch: str, arg: str, cores: int | None) -> Target:
    host = host_cpu()
    triple = host.triple if arch == host.arch else (CPU_ARCHES[arch].triple if arch in CPU_ARCHES else None)
    if triple is None:
        raise TargetError(f"schedx cannot build for {arch!r}; use one of: {', '.join(sorted(CPU_ARCHES))}")
    mcpu, changes = _split_cpu_arg(arg) if arg else ("", [])
    native = arch == host.arch
    if mcpu and not re.fullmatch(r"[A-Za-z0-9_.\-]+", mcpu):
        raise TargetError(f"{mcpu!r} is not a CPU name; {_cpu_list_hint(triple, mcpu)}")
    if mcpu and mcpu not in known_cpus(triple):
        raise TargetError(f"LLVM does not know the CPU {mcpu!r}; {_cpu_list_hint(triple, mcpu)}")
    _check_features(changes, triple)
    # naming this machine's CPU means this machine, unless the machine hides some of that CPU's
    # features: then the name means the full instruction set (for deployment elsewhere)
    if native and (not mcpu or (mcpu == host.llvm_cpu and not host.missing)):
        base = host_target(cores)
        if not changes:
            return base
        mattr = _merge_mattr(list(base.config.get("mattr", ())), changes)
        config = _cpu_config(triple, host.llvm_cpu, mattr, cores or host.cores, host_triple=host.triple)
        return CpuTarget(spec, arch, config, notes=base.notes)
    config = _cpu_config(triple, mcpu, _merge_mattr([], changes), cores or (host.cores if native else CROSS_CORES),
                         host_triple=host.triple)
    target = CpuTarget(spec, arch, config)
    if not native:
        note = (f"cross-compiled for {arch} ({CPU_ARCHES[arch].cross_compiler}); it runs on such a device, for "
                f"instance through TVM RPC, not here")
        return replace(target, notes=(note,))
    why = target.why_not_here()
    if why:
        return replace(target, notes=(f"built for CPU {mcpu or 'generic'}; it does not run here: {why}",))
    return target


def _json_cpu_target(text: str, config: dict, cores: int | None) -> Target:
    if any(not isinstance(a, str) or not a[:1] in "+-" for a in config.get("mattr", [])):
        raise TargetError("mattr entries are +FEATURE or -FEATURE strings")
    host = host_cpu()
    triple = config.get("mtriple") or host.triple
    arch = isa.arch_of(triple)
    if arch not in CPU_ARCHES and arch != host.arch:
        raise TargetError(f"schedx cannot build for the triple {triple!r}; use a triple of "
                          f"{' or '.join(CPU_ARCHES)}")
    mcpu = config.get("mcpu", "")
    if mcpu and mcpu not in known_cpus(triple):
        raise TargetError(f"LLVM does not know the CPU {mcpu!r}; {_cpu_list_hint(triple, mcpu)}")
    _check_features(list(config.get("mattr", [])), triple)
    config = dict(config)
    config.setdefault("num-cores", cores or (host.cores if arch == host.arch else CROSS_CORES))
    return CpuTarget(text, arch, config)


def _arch_of_word(word: str) -> str | None:
    if word in HOST_WORDS:
        return host_arch()
    return next((a.name for a in CPU_ARCHES.values() if word in a.spellings), None)


class CpuKind(TargetKind):
    """CPUs: the words are this machine's (``cpu``, ``host``, ``llvm``) and every registered
    architecture's spellings, read anew each time (a registered architecture is parsed at once)."""

    name = "cpu"
    target_class = CpuTarget
    json_kinds = ("llvm",)
    tvm_keys = ("cpu",)  # every CPU target's last key (aarch64's are arm_cpu, cpu)
    title = "CPUs"
    help_here = "cpu (this machine, the default), cpu:MCPU, cpu:MCPU+feat,-feat"

    @property
    def words(self) -> tuple[str, ...]:
        return (*HOST_WORDS, *(w for a in CPU_ARCHES.values() for w in a.spellings))

    @property
    def help(self) -> str:
        return ("cpu (this machine, from its real features), cpu:MCPU (an LLVM CPU name such as znver3), "
                "cpu:MCPU+feat,-feat, " + ", ".join(f"{name}[:MCPU]" for name in CPU_ARCHES))

    @property
    def choices(self) -> tuple[str, ...]:
        """The CPU each architecture offers (:attr:`CpuArch.offered_cpu`), this machine's as ``cpu:``."""
        here = host_arch()
        return tuple(f"{'cpu' if a.name == here else a.name}:{a.offered_cpu}" for a in CPU_ARCHES.values()
                     if a.offered_cpu)

    def parse(self, text: str, head: str, arg: str, *, cores: int | None) -> Target:
        arch = host_cpu().arch if head in HOST_WORDS else _arch_of_word(head)
        return _cpu_target(text, arch, arg, cores)

    def parse_json(self, text: str, config: dict, *, cores: int | None) -> Target:
        return _json_cpu_target(text, config, cores)

    def intrinsics(self, head: str, config: dict | None) -> tuple[str, ...]:
        triple = (config or {}).get("mtriple")
        arch = isa.arch_of(triple) if triple else (_arch_of_word(head) or host_arch())
        return cpu_intrinsics(arch)


CPU = CpuKind()

__all__ = ["CPU", "CROSS_CORES", "CpuKind", "HOST_WORDS", "host_target", "known_cpus", "known_features"]
