"""This machine's CPU as LLVM sees it, corrected by what the CPU really reports.

LLVM names the host CPU from its model number (``znver4``, ``skylake-avx512``) and enables every
feature that CPU model has. A virtual machine may hide some of them: a Zen 4 under a hypervisor
that hides AVX-512 is still ``znver4`` to LLVM, and code built for it dies with SIGILL. So the
host target is LLVM's CPU name **minus** every ISA feature ``/proc/cpuinfo`` does not list
(``mattr: ["-avx512f", ...]``), **plus** every one it lists that LLVM's name lacks (a hypervisor
reporting an older model: an Emerald Rapids seen as ``rocketlake`` keeps its AVX512-BF16 and
AMX), with the vector width those features allow. ``SCHEDX_CPU_FLAGS``
replaces the flags read from ``/proc/cpuinfo``: tests use it to play a machine without AVX-512
(or without AVX2) on one that has them.
"""

from __future__ import annotations

import functools
import os
from dataclasses import asdict, dataclass

from explorer.target.environment import cpu_flags, cpu_info
from explorer.target import features as isa


@dataclass(frozen=True)
class HostCPU:
    """What schedx knows of this machine's CPU: LLVM's triple and CPU name, the features LLVM
    enables for that name, those the machine lacks (switched off), and the usable cores."""

    triple: str
    arch: str  # x86_64, aarch64, ...
    llvm_cpu: str  # "" when LLVM could not name it (generic)
    llvm_features: tuple[str, ...]  # what LLVM enables for llvm_cpu
    missing: tuple[str, ...]  # of those, the ISA features this machine does not report
    cores: int
    flags_overridden: bool = False
    extra: tuple[str, ...] = ()  # ISA features this machine reports that LLVM's CPU name lacks (switched on)

    @property
    def features(self) -> frozenset[str]:
        """The features the host target may use."""
        return (frozenset(self.llvm_features) - frozenset(self.missing)) | frozenset(self.extra)

    @property
    def vector_width(self) -> int | None:
        return isa.vector_width(set(self.features), self.arch)

    @property
    def isa(self) -> str:
        return isa.isa_word(set(self.features), self.arch)

    def to_dict(self) -> dict:
        d = asdict(self)
        table = isa.BY_ARCH.get(self.arch, {})
        d.update(features=sorted(self.features), isa_features=sorted(f for f in self.features if f in table),
                 vector_width=self.vector_width, isa=self.isa)
        return d


def _llvm_cpu_and_triple() -> tuple[str, str]:
    from tvm.target import codegen

    triple = str(codegen.llvm_get_system_triple())
    try:
        cpu = str(codegen.llvm_get_system_cpu())
        if not cpu or cpu == "generic" or not codegen.llvm_is_valid_cpu(cpu, triple):
            cpu = ""
    except Exception:  # noqa: BLE001 - an LLVM without the query: a generic CPU still works
        cpu = ""
    return cpu, triple


def llvm_features(config: dict) -> set[str]:
    """The features LLVM enables for a TVM LLVM target config (its triple, CPU and ``mattr``)."""
    import tvm
    from tvm.target import codegen

    return set(codegen.llvm_get_cpu_features(tvm.target.Target(config)))


def detect_host(flags: set[str] | None = None, *, llvm_cpu: str | None = None) -> HostCPU:
    """The host CPU for ``flags`` (default: what Linux reports, or ``SCHEDX_CPU_FLAGS``) and
    ``llvm_cpu`` (default: LLVM's name for this CPU). Uncached: :func:`host_cpu` caches."""
    cpu, triple = _llvm_cpu_and_triple()
    cpu = cpu if llvm_cpu is None else llvm_cpu
    arch = isa.arch_of(triple)
    overridden = flags is not None or os.environ.get("SCHEDX_CPU_FLAGS") is not None
    flags = cpu_flags() if flags is None else set(flags)
    config = {"kind": "llvm", "mtriple": triple, **({"mcpu": cpu} if cpu else {})}
    enabled = llvm_features(config)
    if not flags and not os.path.exists("/proc/cpuinfo"):  # nothing to check against (not Linux)
        lacking: list[str] = []
        added: list[str] = []
    else:
        lacking = isa.missing(enabled, flags, arch)
        added = [f for f in (isa.extra(enabled, flags, arch) if cpu else [])
                 if not set(lacking) & llvm_features({**config, "mattr": [f"-{m}" for m in lacking] + [f"+{f}"]})]
        # (a feature LLVM makes imply one the machine lacks stays off: +avxvnni would bring AVX2 back)
    return HostCPU(triple=triple, arch=arch, llvm_cpu=cpu, llvm_features=tuple(sorted(enabled)),
                   missing=tuple(lacking), cores=int(cpu_info()["usable_cores"]), flags_overridden=overridden,
                   extra=tuple(added))


@functools.lru_cache(maxsize=8)
def _host_cpu(flags_key: str | None) -> HostCPU:
    return detect_host()


def host_cpu() -> HostCPU:
    """This machine's CPU (cached per value of ``SCHEDX_CPU_FLAGS``)."""
    return _host_cpu(os.environ.get("SCHEDX_CPU_FLAGS"))


__all__ = ["HostCPU", "detect_host", "host_cpu", "llvm_features"]
