"""The target object: one class per kind of target (:class:`CpuTarget` here, for every CPU
architecture, each described by a :class:`CpuArch`; each device kind in a module of its own, such
as :mod:`explorer.target.cuda`), made by the one parser (:mod:`explorer.target.parse`) through the
registry of kinds (:mod:`explorer.target.kinds`). A target knows how it names itself in records,
its vector width and instructions, the default rules' parameters, how it builds and lowers, which
files its bundle carries and what checks them, whether this machine can run its code and what
stands in where it cannot. Callers ask it; nothing outside this package branches on a target's
kind.

Adding a target: a :class:`explorer.target.arches.CpuArch` for another CPU architecture; a
:class:`Target` subclass with its :class:`explorer.target.kinds.TargetKind` (spellings, parse,
listing) in one module for another kind of device, registered in :mod:`explorer.target.kinds`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import ClassVar

from explorer.errors import ExplorerError
from explorer.target.arches import CPU_ARCHES, CpuArch, cpu_intrinsics
from explorer.target.asm import ANY_ASM, AsmSyntax
from explorer.target import features as isa
from explorer.target.canonical import canonical_target
from explorer.target.host import host_cpu, llvm_features


class TargetError(ExplorerError):
    """A target spelling schedx cannot use, or a target this machine cannot run."""


@dataclass(frozen=True)
class DeviceCode:
    """What a device kind's own checks found in a build (``check``: ``ok``, ``summary()``,
    ``to_dict()``), named ``title`` in a verdict, and the files its bundle carries beside the
    library (name -> (manifest kind, bytes))."""

    title: str
    check: object
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)


@dataclass(frozen=True)
class Target:
    """A parsed target. ``config`` (and ``host`` for GPUs) is what ``tvm.target.Target`` takes;
    ``arch`` the CPU architecture (``x86_64``, ``aarch64``) or the GPU's ``sm_XX``; ``is_host``
    marks this machine's own CPU target (its records are this machine's measurements).

    Class attributes say what a kind of target is and can do: ``kind`` (``cpu``, ``cuda``: what
    records and JSON say), ``device`` (the TVM runtime device), ``searchable`` (schedx's search,
    MetaSchedule's CPU rules with the default rules' own choices, applies), ``cpu_rules`` (its code
    runs on a CPU sized by :meth:`cpu_spec`: the default CPU rules, micro-kernels and dot-product
    kernels apply), ``default_schedule`` (what a kernel without a record gets, in words)."""

    spec: str
    arch: str
    config: dict
    host: dict | None = None
    is_host: bool = False
    notes: tuple[str, ...] = field(default=())

    kind: ClassVar[str] = ""
    device: ClassVar[str] = ""
    searchable: ClassVar[bool] = False
    cpu_rules: ClassVar[bool] = False
    default_schedule: ClassVar[str] = ""
    runnable_fix: ClassVar[str] = ""  # what to do when this machine cannot run the code
    run_elsewhere: ClassVar[str] = ""  # where a bundle for it runs instead
    bundle_note: ClassVar[str] = ""  # what a bundle's README says of this kind of target
    bundle_files: ClassVar[tuple[str, ...]] = ()  # the files (glob patterns) its bundle carries beside every bundle's

    # what it is
    @property
    def cpu_name(self) -> str:
        return str(self.config.get("mcpu") or "generic")

    @property
    def key(self) -> str:
        """The canonical text records carry (see :func:`canonical_target`)."""
        return canonical_target(self.config)

    @property
    def cross(self) -> bool:
        """Code for a CPU of another architecture than this machine's."""
        return False

    @property
    def label(self) -> str:
        raise NotImplementedError

    @property
    def features(self) -> frozenset[str]:
        """The ISA features its code may use (empty where schedx does not size code by them)."""
        return frozenset()

    @property
    def vector_width(self) -> int | None:
        return None

    @property
    def asm(self) -> AsmSyntax:
        """How its assembly listing reads (see :mod:`explorer.target.asm`)."""
        return ANY_ASM

    @property
    def maps_lines(self) -> bool:
        """Whether its listing maps back to TVMScript lines (:mod:`explorer.schedule.line_map`)."""
        return False

    def accepts(self, record_target: str) -> bool:
        """Whether a record measured for ``record_target`` (its canonical text) schedules this target."""
        return _canonical_or_none(record_target) == self.key

    @property
    def record_targets(self) -> tuple[str, ...]:
        """The target texts to look records up by (each then checked with :meth:`accepts`)."""
        return (self.key,)

    def mismatch(self, machine_arch: str, machine_isa: str) -> str:
        """Why a machine of ``machine_arch`` whose widest vector ISA is ``machine_isa`` cannot
        have run this target's code ("" when it can, or when this kind is not judged so)."""
        return ""

    # can it run here
    def why_not_here(self) -> str:
        """Why this machine cannot run the target's code ("" when it can)."""
        raise NotImplementedError

    @property
    def runs_here(self) -> bool:
        return not self.why_not_here()

    def require_runnable(self, action: str = "run") -> None:
        """Raise :class:`TargetError` before code that would crash (SIGILL) is run here."""
        why = self.why_not_here()
        if why:
            raise TargetError(f"cannot {action} code for {self.label} on this machine: {why}; {self.runnable_fix}")

    @property
    def stand_in(self) -> str:
        """What checks a bundle here when this machine cannot run it."""
        raise NotImplementedError

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
        return None

    @property
    def compiler(self) -> str | None:
        """The C++ compiler ``export_library`` links with (None: the default one, for this machine)."""
        return None

    @property
    def intrinsics(self) -> tuple[str, ...]:
        """The submodules of ``tvm.s_tir.tensor_intrin`` its code may use (registering only those
        is what :func:`explorer.tvm_fast.light_tensor_intrin` makes cheap)."""
        return ()

    def lowering_passes(self, tvm_target) -> list:
        """Relax lowering and finalisation passes of this target's backend (after scheduling)."""
        raise NotImplementedError

    def apply_default_schedules(self, mod, tvm_target, safe: frozenset[str] = frozenset(), *,
                                task_names: Mapping[str, str] = {}, tune_commands: Mapping[str, str] = {}) -> tuple:
        """``(mod, notes, untiled)``: ``mod`` with the target's default schedule on every PrimFunc not
        scheduled yet, notes on kernels where a rule failed, and the functions whose rule fell back
        or whose dot-product tile declined them, with why (not those in ``safe``); the functions named in ``safe``
        (whose first schedule did not compile) get the target's simplest rule, where it has one.
        A note names a kernel by its task (``task_names``: function name -> task name; else by its
        function) and says how to search it (``tune_commands``: task name -> a ``schedx tune`` command)."""
        raise NotImplementedError

    @property
    def rescues_kernels(self) -> bool:
        """Whether a kernel whose schedule does not compile can be built again with a simpler rule."""
        return False

    # its bundle
    def device_code(self, lowered, executable, *, compile: bool = True) -> DeviceCode | None:
        """The checks of a build's device code that need no device, and the files they add to the
        bundle (None: a kind whose whole code is the library, checked by running it or by
        :mod:`export.elf_check`). ``compile``: run the device compiler where the kind has one."""
        return None

    def cpu_spec(self):
        """What the default CPU rules size their tiles from (:class:`explorer.schedule.defaults.CpuSpec`)."""
        raise TargetError(f"{self.label} has no CPU schedule parameters: {self.default_schedule} apply")

    def with_cores(self, cores: int) -> Target:
        """The same target with ``num-cores`` set where its kind has cores MetaSchedule counts."""
        return self

    def to_dict(self) -> dict:
        return {"spec": self.spec, "kind": self.kind, "device": self.device, "arch": self.arch, "config": self.config,
                "host": self.host,
                "label": self.label, "key": self.key, "is_host": self.is_host, "cross": self.cross,
                "vector_width": self.vector_width, "runs_here": self.runs_here, "why_not_here": self.why_not_here(),
                "notes": list(self.notes), "bundle_note": self.bundle_note}


def _canonical_or_none(record_target: str) -> str | None:
    try:
        config = json.loads(record_target)
    except (TypeError, ValueError):
        return None
    return canonical_target(config) if isinstance(config, dict) and "kind" in config else None


@dataclass(frozen=True)
class CpuTarget(Target):
    """A CPU (``config["kind"] == "llvm"``): this machine's, another CPU of its architecture, or
    one of another architecture (:data:`CPU_ARCHES`), cross-compiled."""

    kind: ClassVar[str] = "cpu"
    device: ClassVar[str] = "cpu"
    searchable: ClassVar[bool] = True
    cpu_rules: ClassVar[bool] = True
    default_schedule: ClassVar[str] = "schedx's default CPU schedules (tiled, parallel, vectorized; no search)"
    runnable_fix: ClassVar[str] = ("use --target cpu (this machine's own features), or measure on a device that has "
                                   "them through TVM RPC (--rpc-tracker)")
    run_elsewhere: ClassVar[str] = "with `python run.py` on a machine with that CPU"

    @property
    def cross(self) -> bool:
        return self.arch != host_cpu().arch

    @property
    def label(self) -> str:
        """A few words for tables: ``llvm znver4 2c``, ``llvm znver4 -avx512f 2c``, ``llvm aarch64 cortex-a76 4c``."""
        attrs = " ".join(self.config.get("mattr", ()))
        cores = self.config.get("num-cores")
        cross = f"{self.arch} " if self.cross else ""
        return f"llvm {cross}{self.cpu_name}" + (f" {attrs}" if attrs else "") + (f" {cores}c" if cores else "")

    @property
    def features(self) -> frozenset[str]:
        table = isa.BY_ARCH.get(self.arch, {})
        return frozenset(f for f in llvm_features(self.config) if f in table)

    @property
    def vector_width(self) -> int | None:
        return int(self.config.get("vector-width") or 0) or isa.vector_width(set(self.features), self.arch)

    @property
    def asm(self) -> AsmSyntax:
        known = CPU_ARCHES.get(self.arch)
        return known.asm if known is not None else ANY_ASM

    @property
    def maps_lines(self) -> bool:
        return True

    @property
    def isa(self) -> str:
        """The widest vector ISA its code may use, as a word (``avx512``, ``avx2``, ``neon``)."""
        return isa.isa_word(set(self.features), self.arch)

    def mismatch(self, machine_arch: str, machine_isa: str) -> str:
        ranks = CPU_ARCHES[self.arch].isa_ranks if self.arch in CPU_ARCHES else ()
        if self.arch != machine_arch:
            return f"{self.arch} code, {machine_arch} machine"
        if self.isa in ranks and machine_isa in ranks and ranks.index(self.isa) > ranks.index(machine_isa):
            return f"the target uses {self.isa}, the machine has {machine_isa}"
        return ""

    def why_not_here(self) -> str:
        host = host_cpu()
        if self.arch != host.arch:
            return f"it is {self.arch} code and this machine is {host.arch}"
        lacking = sorted(self.features - host.features)
        if lacking:
            return f"it uses {', '.join(lacking)}, which this CPU does not have (it has {host.isa})"
        return ""

    @property
    def neighbours(self) -> tuple[str, ...]:
        """Target spellings worth comparing its code with: the same CPU without its widest
        vector unit (when it has one), and CPUs of other kinds (:attr:`CpuArch.compare_with`)."""
        known = CPU_ARCHES.get(self.arch)
        if known is None:
            return ()
        return (*(spelling for feature, spelling in known.narrower if feature in self.features), *known.compare_with)

    @property
    def stand_in(self) -> str:
        return ("the library check stands in; run `python run.py` on such a device" if self.cross else
                "run `python run.py` on a machine with that CPU")

    @property
    def triple(self) -> str | None:
        return self.config.get("mtriple")

    @property
    def compiler(self) -> str | None:
        return CPU_ARCHES[self.arch].cross_compiler if self.cross else None

    @property
    def intrinsics(self) -> tuple[str, ...]:
        return cpu_intrinsics(self.arch)

    def lowering_passes(self, tvm_target) -> list:
        from tvm.relax.backend.cpu_generic import pipeline

        from explorer.models.loop_tir import loops_as_tir_pass  # a kept loop of kernels: one PrimFunc

        return [loops_as_tir_pass(), *pipeline.dataflow_lower_passes(tvm_target), *pipeline.finalize_passes(tvm_target)]

    def apply_default_schedules(self, mod, tvm_target, safe: frozenset[str] = frozenset(), *,
                                task_names: Mapping[str, str] = {}, tune_commands: Mapping[str, str] = {}) -> tuple:
        """schedx's rules, tiled, parallel and vectorized for this target's vector width,
        registers and cores (see :mod:`explorer.schedule.defaults`), and a note per kernel whose
        rule failed and fell to a simpler one, or whose bf16/int8 product ran without its dot-product
        tile (:mod:`explorer.schedule.defaults.fallbacks`; not those in ``safe``: the build says why
        it rebuilt them)."""
        from explorer.schedule.defaults import apply_default_schedules, fallback_notes, untiled_kernels

        scheduled, choices = apply_default_schedules(mod, self.cpu_spec(), safe)
        return (scheduled, fallback_notes(choices, skip=safe, task_names=task_names, tune_commands=tune_commands),
                untiled_kernels(choices, skip=safe))

    @property
    def rescues_kernels(self) -> bool:
        """Whether a kernel whose schedule does not compile can be built again with a simpler rule."""
        return True

    def cpu_spec(self):
        """This target's vector width, registers, cores and int8 instructions, from its real features."""
        from explorer.schedule.defaults import CpuSpec

        return CpuSpec.of(vector_width=self.vector_width, features=self.features, arch=self.arch,
                          cores=self.config.get("num-cores"))

    def with_cores(self, cores: int) -> Target:
        return replace(self, config={**self.config, "num-cores": int(cores)})


__all__ = ["CPU_ARCHES", "CpuArch", "CpuTarget", "DeviceCode", "Target", "TargetError"]
