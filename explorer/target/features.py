"""Instruction-set features: LLVM's names for them and the names Linux gives the same features in
``/proc/cpuinfo``, per architecture (the tables are each :class:`explorer.target.arches.CpuArch`'s
``flags``). No TVM.

Only features LLVM may use when it generates code for a kernel are listed (vector units, FMA,
dot products, bit manipulation, crypto). A feature LLVM enables for a CPU name but the machine
does not report is switched off in the host target: a VM may hide AVX-512 from a Zen 4 that LLVM
still calls ``znver4`` (code using it dies with SIGILL).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from explorer.target.arches import CPU_ARCHES, arch_of


class _FlagTables(Mapping):
    """Each registered architecture's ``flags`` table, read live (a registered one shows at once)."""

    def __getitem__(self, arch: str) -> dict[str, tuple[str, ...]]:
        return CPU_ARCHES[arch].flags

    def __iter__(self) -> Iterator[str]:
        return iter(CPU_ARCHES)

    def __len__(self) -> int:
        return len(CPU_ARCHES)


BY_ARCH: Mapping[str, dict[str, tuple[str, ...]]] = _FlagTables()


def missing(llvm_features: set[str], cpu_flags: set[str], arch: str) -> list[str]:
    """The ISA features in ``llvm_features`` that a machine reporting ``cpu_flags`` lacks."""
    table = BY_ARCH.get(arch, {})
    return sorted(f for f in llvm_features if f in table and not any(flag in cpu_flags for flag in table[f]))


def extra(llvm_features: set[str], cpu_flags: set[str], arch: str) -> list[str]:
    """The ISA features a machine reporting ``cpu_flags`` has that ``llvm_features`` (LLVM's set for
    the CPU name it gave the machine) lack: a hypervisor that reports an older CPU model (an
    Emerald Rapids seen as ``rocketlake``) still lists AVX512-BF16 and AMX among its flags."""
    table = BY_ARCH.get(arch, {})
    return sorted(f for f, shown in table.items() if f not in llvm_features and any(flag in cpu_flags for flag in shown))


def vector_width(features: set[str], arch: str) -> int | None:
    """Bits of the widest vector register ``features`` allow (None: not known for ``arch``)."""
    known = CPU_ARCHES.get(arch)
    return next((bits for feature, bits in known.widths if feature in features), None) if known else None


def isa_word(features: set[str], arch: str) -> str:
    """A short word for the widest vector ISA: avx512, avx2, avx, sse, sve, neon (else the architecture)."""
    known = CPU_ARCHES.get(arch)
    word = next((w for feature, w in known.isa_words if feature in features), None) if known else None
    return word or arch or "generic"


__all__ = ["BY_ARCH", "arch_of", "extra", "isa_word", "missing", "vector_width"]
