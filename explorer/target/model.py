"""The one target model: every spelling a user types becomes a :class:`Target`, and a target knows
how it builds, how it names itself in records, and whether this machine can run its code.

Spellings (:func:`parse_target`):

- ``cpu`` (also ``host``, ``llvm``): this machine's CPU, from its real features (see
  :mod:`explorer.target.host`);
- ``cpu:MCPU``: a CPU LLVM knows (``cpu:znver3``, ``cpu:skylake-avx512``, ``cpu:x86-64-v3``);
- ``cpu:MCPU+feat,-feat``: with features added or removed (``cpu:znver4,-avx512f``;
  ``cpu:-avx512f`` is this machine without AVX-512);
- ``aarch64`` / ``aarch64:MCPU`` (and ``x86_64:MCPU`` on an ARM host): a CPU of another
  architecture, cross-compiled (``aarch64:cortex-a76``);
- ``cuda`` / ``cuda:sm_XX`` (``cuda:90`` too): an NVIDIA GPU, with a generic host CPU half;
- a JSON object as TVM takes it (``{"kind": "llvm", "mcpu": "znver3", "num-cores": 4}``).

Unknown CPUs, features, architectures and malformed JSON raise :class:`TargetError` naming what
is valid. TVM's own target object is built only on demand (:meth:`Target.tvm`).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from explorer.errors import ExplorerError
from explorer.target import features as isa
from explorer.target.host import HostCPU, host_cpu, llvm_features

DEFAULT_CUDA_ARCH = "sm_80"
# Architectures NVIDIA compilers know (CUDA 11-13); nvcc 13 itself builds sm_75 and newer.
CUDA_ARCHES = ("sm_50", "sm_52", "sm_53", "sm_60", "sm_61", "sm_62", "sm_70", "sm_72", "sm_75", "sm_80", "sm_86",
               "sm_87", "sm_88", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_101", "sm_103", "sm_110",
               "sm_120", "sm_121")
CROSS_TRIPLES = {"aarch64": "aarch64-linux-gnu", "x86_64": "x86_64-linux-gnu"}
CROSS_COMPILERS = {"aarch64": "aarch64-linux-gnu-g++", "x86_64": "x86_64-linux-gnu-g++"}
# Cores of a device schedx cannot see (MetaSchedule needs a number; JSON targets may give theirs).
CROSS_CORES = 4
SPEC_HELP = ("cpu, cpu:MCPU (an LLVM CPU name such as znver3), cpu:MCPU+feat,-feat, aarch64[:MCPU], "
             "cuda, cuda:sm_XX, or a JSON target")


class TargetError(ExplorerError):
    """A target spelling schedx cannot use, or a target this machine cannot run."""


@dataclass(frozen=True)
class Target:
    """A parsed target. ``config`` (and ``host`` for GPUs) is what ``tvm.target.Target`` takes.

    ``kind`` is ``cpu`` or ``cuda``; ``arch`` the CPU architecture (``x86_64``, ``aarch64``) or the
    GPU's ``sm_XX``; ``is_host`` marks this machine's own CPU target (its records are this
    machine's measurements)."""

    spec: str
    kind: str
    arch: str
    config: dict
    host: dict | None = None
    is_host: bool = False
    notes: tuple[str, ...] = field(default=())

    # what it is
    @property
    def device(self) -> str:
        """The TVM runtime device its code runs on: ``cpu`` or ``cuda``."""
        return self.kind

    @property
    def cpu_name(self) -> str:
        return str(self.config.get("mcpu") or "generic")

    @property
    def cross(self) -> bool:
        """Code for a CPU of another architecture than this machine's."""
        return self.kind == "cpu" and self.arch != host_cpu().arch

    @property
    def label(self) -> str:
        """A few words for tables: ``llvm znver4 2c``, ``llvm znver4 -avx512f 2c``, ``cuda sm_90``."""
        if self.kind == "cuda":
            return f"cuda {self.arch}"
        attrs = " ".join(self.config.get("mattr", ()))
        cores = self.config.get("num-cores")
        cross = f"{self.arch} " if self.cross else ""
        return f"llvm {cross}{self.cpu_name}" + (f" {attrs}" if attrs else "") + (f" {cores}c" if cores else "")

    @property
    def key(self) -> str:
        """The canonical text records carry (see :func:`canonical_target`)."""
        return canonical_target(self.config)

    @property
    def features(self) -> frozenset[str]:
        """The ISA features its code may use (CPU targets; empty for GPUs)."""
        if self.kind != "cpu":
            return frozenset()
        table = isa.BY_ARCH.get(self.arch, {})
        return frozenset(f for f in llvm_features(self.config) if f in table)

    @property
    def vector_width(self) -> int | None:
        if self.kind != "cpu":
            return None
        return int(self.config.get("vector-width") or 0) or isa.vector_width(set(self.features), self.arch)

    def accepts(self, record_target: str) -> bool:
        """Whether a record measured for ``record_target`` (its canonical text) schedules this
        target: the same config for CPUs; the same architecture for GPUs (whatever else a GPU
        target's text holds)."""
        try:
            config = json.loads(record_target)
        except (TypeError, ValueError):
            return False
        if self.kind == "cuda":
            return isinstance(config, dict) and config.get("kind") == "cuda" and config.get("arch") == self.arch
        return canonical_target(config) == self.key

    # can it run here
    def why_not_here(self) -> str:
        """Why this machine cannot run the target's code ("" when it can)."""
        if self.kind == "cuda":
            import tvm

            return "" if tvm.cuda(0).exist else "this machine has no CUDA GPU"
        host = host_cpu()
        if self.arch != host.arch:
            return f"it is {self.arch} code and this machine is {host.arch}"
        lacking = sorted(self.features - host.features)
        if lacking:
            return f"it uses {', '.join(lacking)}, which this CPU does not have (it has {host.isa})"
        return ""

    @property
    def runs_here(self) -> bool:
        return not self.why_not_here()

    def require_runnable(self, action: str = "run") -> None:
        """Raise :class:`TargetError` before code that would crash (SIGILL) is run here."""
        why = self.why_not_here()
        if why:
            fix = ("use --target cuda on a machine with a GPU" if self.kind == "cuda" else
                   "use --target cpu (this machine's own features), or measure on a device that has them "
                   "through TVM RPC (--rpc-tracker)")
            raise TargetError(f"cannot {action} code for {self.label} on this machine: {why}; {fix}")

    # how it builds
    def tvm(self):
        """TVM's target object."""
        import tvm

        try:
            if self.host is not None:
                return tvm.target.Target(self.config, host=self.host)
            return tvm.target.Target(self.config)
        except Exception as err:  # noqa: BLE001 - TVM's own message says which key is wrong
            from explorer.errors import short_tvm_message

            raise TargetError(f"TVM refuses the target {self.spec}: {short_tvm_message(err, 300)}") from err

    @property
    def triple(self) -> str | None:
        return self.config.get("mtriple") if self.kind == "cpu" else (self.host or {}).get("mtriple")

    @property
    def compiler(self) -> str | None:
        """The C++ compiler ``export_library`` links with (None: the default one, for this machine)."""
        return CROSS_COMPILERS.get(self.arch) if self.cross else None

    @property
    def intrinsics(self) -> tuple[str, str | None]:
        """``(kind, triple)`` for :func:`explorer.tvm_fast.light_tensor_intrin`."""
        return ("llvm" if self.kind == "cpu" else self.kind), self.triple

    def lowering_passes(self, tvm_target) -> list:
        """Relax lowering and finalisation passes of this target's backend (after scheduling)."""
        if self.kind == "cuda":
            from tvm.relax.backend.cuda import pipeline
        else:
            from tvm.relax.backend.cpu_generic import pipeline
        return list(pipeline.dataflow_lower_passes(tvm_target)) + list(pipeline.finalize_passes(tvm_target))

    def apply_default_schedules(self, mod, tvm_target) -> tuple:
        """``(mod, notes)``: ``mod`` with the target's default schedule on every PrimFunc not
        scheduled yet (GPUs: dlight's rules, which bind threads, kernel by kernel, see
        :mod:`explorer.schedule.gpu_defaults`; CPUs: schedx's rules, tiled, parallel and vectorized
        for this target's vector width, registers and cores, see :mod:`explorer.schedule.defaults`),
        and notes on kernels where a rule failed."""
        if self.kind != "cuda":
            from explorer.schedule.defaults import apply_default_schedules

            return apply_default_schedules(mod, self.cpu_spec())[0], []
        from explorer.schedule.gpu_defaults import apply_gpu_defaults

        return apply_gpu_defaults(mod, tvm_target)

    def cpu_spec(self):
        """What the default CPU rules size their tiles from (:class:`explorer.schedule.defaults.CpuSpec`):
        this target's vector width, registers, cores and int8 instructions, from its real features."""
        from explorer.schedule.defaults import CpuSpec

        return CpuSpec.of(vector_width=self.vector_width, features=self.features, arch=self.arch,
                          cores=self.config.get("num-cores"))

    @property
    def default_schedule(self) -> str:
        """What a kernel without a record gets on this target, in words."""
        return ("dlight's default GPU schedules" if self.kind == "cuda" else
                "schedx's default CPU schedules (tiled, parallel, vectorized; no search)")

    @property
    def searchable(self) -> bool:
        """Whether MetaSchedule's CPU search applies (GPUs use dlight's schedules in schedx)."""
        return self.kind == "cpu"

    def with_cores(self, cores: int) -> Target:
        """The same target with ``num-cores`` set (MetaSchedule needs it; records key on it)."""
        if self.kind != "cpu":
            return self
        return Target(self.spec, self.kind, self.arch, {**self.config, "num-cores": int(cores)}, self.host,
                      self.is_host, self.notes)

    def to_dict(self) -> dict:
        return {"spec": self.spec, "kind": self.kind, "device": self.device, "arch": self.arch, "config": self.config,
                "host": self.host,
                "label": self.label, "key": self.key, "is_host": self.is_host, "cross": self.cross,
                "vector_width": self.vector_width, "runs_here": self.runs_here, "why_not_here": self.why_not_here(),
                "notes": list(self.notes)}


_ISA_RANK = {"x86_64": ("sse", "avx", "avx2", "avx512"), "aarch64": ("neon", "sve")}


def record_mismatch(target_text: str, hardware: str) -> str:
    """Why a record's target cannot have run on the machine its fingerprint names ("" when it
    can): AVX-512 code measured on a machine whose fingerprint says avx2, or another
    architecture. Fingerprints look like ``x86_64/AMD EPYC/avx2/2c``; RPC devices are not judged."""
    parts = hardware.split("/")
    if hardware.startswith("rpc:") or len(parts) < 4:
        return ""
    arch, machine_isa = parts[0], parts[-2]
    try:
        target = parse_target(target_text)
    except (TargetError, ValueError):
        return ""
    if target.kind != "cpu":
        return ""
    if target.arch != arch:
        return f"{target.arch} code, {arch} machine"
    ranks = _ISA_RANK.get(arch, ())
    needs = isa.isa_word(set(target.features), arch)
    if needs in ranks and machine_isa in ranks and ranks.index(needs) > ranks.index(machine_isa):
        return f"the target uses {needs}, the machine has {machine_isa}"
    return ""


# ---------------------------------------------------------------- canonical text of a target


_ALWAYS_KEPT = ("kind", "mcpu", "arch")  # identify the hardware even when equal to a default


@functools.lru_cache(maxsize=64)
def _kind_defaults(kind: str) -> dict:
    import tvm

    from explorer.plain import to_plain

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
    import tvm

    from explorer.plain import to_plain

    config = to_plain(tvm.target.Target(json.loads(config_text)).export())
    return json.dumps(_strip_defaults(config), sort_keys=True)


def canonical_target(target: object) -> str:
    """The text records carry for a target: its config as sorted JSON, without the values every
    target of its kind has (``tag``, default ``keys``, the default triple):
    ``{"kind": "llvm", "mcpu": "znver4", "num-cores": 2}``. Equal targets give equal text, however
    they were written (a :class:`Target`, TVM's object, a dict or JSON text)."""
    from explorer.plain import to_plain

    if isinstance(target, Target):
        config = target.config
    elif isinstance(target, Mapping):
        config = to_plain(target)
    elif isinstance(target, str):
        config = json.loads(target) if target.lstrip().startswith("{") else {"kind": target}
    else:  # tvm.target.Target
        config = to_plain(target.export())
    return _canonical_text(json.dumps(config, sort_keys=True))


# ---------------------------------------------------------------- parsing


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


_EXAMPLE_CPUS = {"x86_64": ("x86-64-v3", "x86-64-v4", "haswell", "skylake-avx512", "icelake-server", "sapphirerapids",
                             "znver3", "znver4"),
                  "aarch64": ("generic", "cortex-a55", "cortex-a76", "neoverse-n1", "neoverse-v1", "apple-m1")}


def _cpu_list_hint(triple: str, bad: str) -> str:
    import difflib

    cpus = known_cpus(triple)
    arch = isa.arch_of(triple)
    close = difflib.get_close_matches(bad, cpus, n=4, cutoff=0.6)
    shown = ", ".join(close or [c for c in _EXAMPLE_CPUS.get(arch, ()) if c in cpus] or cpus[:8])
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
    mattr = [f"-{f}" for f in host.missing]
    config = _cpu_config(host.triple, host.llvm_cpu, mattr, cores or host.cores, host_triple=host.triple)
    notes = (f"this CPU hides {', '.join(host.missing)} from LLVM's {host.llvm_cpu}: switched off",) if host.missing else ()
    return Target("cpu", "cpu", host.arch, config, is_host=True, notes=notes)


def _cpu_target(spec: str, arch: str, arg: str, cores: int | None) -> Target:
    host = host_cpu()
    triple = host.triple if arch == host.arch else CROSS_TRIPLES.get(arch)
    if triple is None:
        raise TargetError(f"schedx cannot build for {arch!r}; use one of: {', '.join(sorted(CROSS_TRIPLES))}")
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
        return Target(spec, "cpu", arch, config, notes=base.notes)
    config = _cpu_config(triple, mcpu, _merge_mattr([], changes), cores or (host.cores if native else CROSS_CORES),
                         host_triple=host.triple)
    target = Target(spec, "cpu", arch, config)
    if not native:
        note = (f"cross-compiled for {arch} ({CROSS_COMPILERS[arch]}); it runs on such a device, for instance "
                f"through TVM RPC, not here")
        return Target(spec, "cpu", arch, config, notes=(note,))
    why = target.why_not_here()
    if why:
        return Target(spec, "cpu", arch, config, notes=(f"built for CPU {mcpu or 'generic'}; it does not run here: {why}",))
    return target


def _cuda_target(spec: str, arg: str) -> Target:
    arch = (arg or DEFAULT_CUDA_ARCH).strip().lower()
    if re.fullmatch(r"\d+a?", arch):
        arch = f"sm_{arch}"
    if arch not in CUDA_ARCHES:
        raise TargetError(f"unknown CUDA architecture {arg!r}; use one of {', '.join(CUDA_ARCHES)} "
                          f"(sm_80 = A100, sm_86 = RTX 30xx, sm_89 = L4/RTX 40xx, sm_90 = H100)")
    # a generic host half (no mcpu): it runs on whatever machine holds the GPU
    return Target(spec, "cuda", arch, {"kind": "cuda", "arch": arch}, host={"kind": "llvm"})


_JSON_TYPES = {"kind": str, "mcpu": str, "mtriple": str, "arch": str, "num-cores": int, "vector-width": int,
               "mattr": list, "keys": list, "libs": list, "max_num_threads": int, "thread_warp_size": int,
               "host": (dict, str), "tag": str}


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
    if kind == "cuda":
        target = _cuda_target(text, str(config.get("arch", "")).strip())
        extra = {k: v for k, v in config.items() if k not in ("kind", "arch", "host")}
        return Target(text, "cuda", target.arch, {**target.config, **extra}, target.host)
    if kind != "llvm":
        raise TargetError(f"unknown target kind {kind!r}: schedx builds for llvm (CPUs) and cuda")
    if any(not isinstance(a, str) or not a[:1] in "+-" for a in config.get("mattr", [])):
        raise TargetError("mattr entries are +FEATURE or -FEATURE strings")
    host = host_cpu()
    triple = config.get("mtriple") or host.triple
    arch = isa.arch_of(triple)
    if arch not in CROSS_TRIPLES and arch != host.arch:
        raise TargetError(f"schedx cannot build for the triple {triple!r}; use an x86_64 or aarch64 triple")
    mcpu = config.get("mcpu", "")
    if mcpu and mcpu not in known_cpus(triple):
        raise TargetError(f"LLVM does not know the CPU {mcpu!r}; {_cpu_list_hint(triple, mcpu)}")
    _check_features(list(config.get("mattr", [])), triple)
    config = dict(config)
    config.setdefault("num-cores", cores or (host.cores if arch == host.arch else CROSS_CORES))
    return Target(text, "cpu", arch, config)


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
    head, _, arg = text.partition(":")
    head = head.strip().lower()
    arg = arg.strip()
    if head in ("cpu", "host", "llvm"):
        return _cpu_target(text, host_cpu().arch, arg, cores)
    if head in ("aarch64", "arm64", "x86_64", "x86-64"):
        arch = "aarch64" if head in ("aarch64", "arm64") else "x86_64"
        return _cpu_target(text, arch, arg, cores)
    if head == "cuda":
        return _cuda_target(text, arg)
    raise TargetError(f"unknown target {spec!r}: use {SPEC_HELP}")


__all__ = ["CUDA_ARCHES", "DEFAULT_CUDA_ARCH", "SPEC_HELP", "Target", "TargetError", "canonical_target",
           "host_target", "known_cpus", "known_features", "parse_target", "record_mismatch"]
