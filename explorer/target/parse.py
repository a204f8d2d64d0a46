"""The one parser of target spellings: every spelling a user types becomes a
:class:`explorer.target.Target` of its kind.

Spellings (:func:`parse_target`):

- ``cpu`` (also ``host``, ``llvm``): this machine's CPU, from its real features (see
  :mod:`explorer.target.host`);
- ``cpu:MCPU``: a CPU LLVM knows (``cpu:znver3``, ``cpu:skylake-avx512``, ``cpu:x86-64-v3``);
- ``cpu:MCPU+feat,-feat``: with features added or removed (``cpu:znver4,-avx512f``;
  ``cpu:-avx512f`` is this machine without AVX-512);
- ``aarch64`` / ``aarch64:MCPU`` (and ``x86_64:MCPU`` on an ARM host): a CPU of another
  architecture (:data:`explorer.target.model.CPU_ARCHES`), cross-compiled (``aarch64:cortex-a76``);
- ``cuda`` / ``cuda:sm_XX`` (``cuda:90`` too): an NVIDIA GPU, with a generic host CPU half;
- a JSON object as TVM takes it (``{"kind": "llvm", "mcpu": "znver3", "num-cores": 4}``).

Unknown CPUs, features, architectures and malformed JSON raise :class:`TargetError` naming what
is valid. TVM's own target object is built only on demand (:meth:`Target.tvm`);
:func:`intrinsics_of` reads the little a worker pool needs without importing TVM at all.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import replace

from explorer.target import features as isa
from explorer.target.arches import CPU_ARCHES, cpu_intrinsics, host_arch
from explorer.target.host import HostCPU, host_cpu, llvm_features
from explorer.target.model import (CUDA_ARCHES, CUDA_INTRINSICS, DEFAULT_CUDA_ARCH, CpuTarget, CudaTarget, Target,
                                   TargetError)

# Cores of a device schedx cannot see (MetaSchedule needs a number; JSON targets may give theirs).
CROSS_CORES = 4
SPEC_HELP = ("cpu, cpu:MCPU (an LLVM CPU name such as znver3), cpu:MCPU+feat,-feat, "
             + ", ".join(f"{name}[:MCPU]" for name in CPU_ARCHES) + ", cuda, cuda:sm_XX, or a JSON target")
_HOST_WORDS = ("cpu", "host", "llvm")
_ARCH_OF_WORD = {word: arch.name for arch in CPU_ARCHES.values() for word in arch.spellings}


def _head(text: str) -> tuple[str, str]:
    """``aarch64:cortex-a76`` -> ``("aarch64", "cortex-a76")``."""
    head, _, arg = text.partition(":")
    return head.strip().lower(), arg.strip()


def intrinsics_of(text: str) -> tuple[str, ...]:
    """:attr:`Target.intrinsics` of a target spelling, read without importing TVM (a worker pool
    starts on it before the parent loads TVM). A spelling :func:`parse_target` would refuse gives
    this machine's; parsing it later says why."""
    text = (text or "cpu").strip()
    if text.startswith("{"):
        try:
            config = json.loads(text)
            kind, triple = str(config.get("kind", "llvm")), config.get("mtriple")
        except (ValueError, AttributeError):
            kind, triple = "llvm", None
        if kind == "cuda":
            return CUDA_INTRINSICS
        return cpu_intrinsics(isa.arch_of(triple) if triple else host_arch())
    head, _ = _head(text)
    if head == "cuda":
        return CUDA_INTRINSICS
    return cpu_intrinsics(_ARCH_OF_WORD.get(head, host_arch()))


def record_mismatch(target_text: str, hardware: str) -> str:
    """Why a record's target cannot have run on the machine its fingerprint names ("" when it
    can): AVX-512 code measured on a machine whose fingerprint says avx2, or another
    architecture. RPC devices and malformed fingerprints are not judged."""
    from explorer.environment import read_fingerprint

    machine = read_fingerprint(hardware)
    if machine is None:
        return ""
    try:
        target = parse_target(target_text)
    except (TargetError, ValueError):
        return ""
    return target.mismatch(machine.arch, machine.isa)


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


def _cuda_target(spec: str, arg: str) -> Target:
    arch = (arg or DEFAULT_CUDA_ARCH).strip().lower()
    if re.fullmatch(r"\d+a?", arch):
        arch = f"sm_{arch}"
    if arch not in CUDA_ARCHES:
        raise TargetError(f"unknown CUDA architecture {arg!r}; use one of {', '.join(CUDA_ARCHES)} "
                          f"(sm_80 = A100, sm_86 = RTX 30xx, sm_89 = L4/RTX 40xx, sm_90 = H100)")
    # a generic host half (no mcpu): it runs on whatever machine holds the GPU
    return CudaTarget(spec, arch, {"kind": "cuda", "arch": arch}, host={"kind": "llvm"})


_JSON_TYPES = {"kind": str, "mcpu": str, "mtriple": str, "arch": str, "num-cores": int, "vector-width": int,
               "mattr": list, "keys": list, "libs": list, "max_num_threads": int, "thread_warp_size": int,
               "host": (dict, str), "tag": str}


@functools.lru_cache(maxsize=4)
def kind_keys(kind: str) -> tuple[str, ...]:
    """The keys TVM's target kind ``kind`` (llvm, cuda) takes in a JSON target."""
    from tvm.target import TargetKind

    return tuple(str(k) for k in TargetKind.options_from_name(kind))


def _check_keys(config: dict, kind: str) -> None:
    """Refuse a key TVM's ``kind`` does not take, naming the valid ones (TVM's own error, from deep
    inside the first build, read as a bug in schedx)."""
    import difflib

    known = kind_keys(kind)
    unknown = [k for k in config if k not in known and not str(k).startswith("feature.")]  # (TVM takes feature.*)
    if unknown:
        close = difflib.get_close_matches(unknown[0], known, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        named = (f"key {unknown[0]!r} is" if len(unknown) == 1 else
                 f"keys {', '.join(map(repr, unknown))} are")
        raise TargetError(f"target {named} unknown to TVM's {kind} kind; {hint}its keys are {', '.join(known)}")


def _json_target(text: str, cores: int | None) -> Target:
    try:
        config = json.loads(text)
    except ValueError as err:
        raise TargetError(f"the target is not valid JSON ({err.msg} at character {err.pos}); e.g. "
                          '\'{"kind": "llvm", "mcpu": "znver3", "num-cores": 4}\'') from None
    if not isinstance(config, dict):
        raise TargetError("a JSON target must be an object such as {\"kind\": \"llvm\", \"mcpu\": \"znver3\"}")
    for key, value in config.items():
        want = _JSON_TYPES.get(key)
        if want is not None and (not isinstance(value, want) or isinstance(value, bool)):
            names = " or ".join(t.__name__ for t in (want if isinstance(want, tuple) else (want,)))
            raise TargetError(f"target key {key!r} must be a {names}, got {value!r}")
        if key in ("num-cores", "vector-width") and value <= 0:
            raise TargetError(f"target key {key!r} must be positive, got {value}")
    kind = config.get("kind")
    if kind in ("cuda", "llvm"):
        _check_keys(config, kind)
    if kind == "cuda":
        target = _cuda_target(text, str(config.get("arch", "")).strip())
        extra = {k: v for k, v in config.items() if k not in ("kind", "arch", "host")}
        return replace(target, config={**target.config, **extra})
    if kind != "llvm":
        raise TargetError(f"unknown target kind {kind!r}: schedx builds for llvm (CPUs) and cuda")
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


def parse_target(spec: str | Target | None, *, cores: int | None = None) -> Target:
    """Parse a target spelling (see the module docstring); raise :class:`TargetError` naming what
    is wrong. ``cores`` sets ``num-cores`` of CPU targets (default: this machine's usable cores)."""
    if isinstance(spec, Target):
        return spec
    text = "cpu" if spec is None else str(spec).strip()
    if not text:  # `--target ''`: a slip, not a choice of this machine
        raise TargetError(f"an empty target: use {SPEC_HELP}")
    if text.startswith("{"):
        return _json_target(text, cores)
    head, arg = _head(text)
    if head in _HOST_WORDS:
        return _cpu_target(text, host_cpu().arch, arg, cores)
    arch = _ARCH_OF_WORD.get(head)
    if arch is not None:
        return _cpu_target(text, arch, arg, cores)
    if head == "cuda":
        return _cuda_target(text, arg)
    raise TargetError(f"unknown target {spec!r}: use {SPEC_HELP}")


__all__ = ["CROSS_CORES", "SPEC_HELP", "host_target", "intrinsics_of", "kind_keys", "known_cpus", "known_features",
           "parse_target", "record_mismatch"]
