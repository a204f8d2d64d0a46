"""What a default schedule needs to know about the CPU it is for: vector width, vector registers
and cores, taken from a target's real features (never assumed).

Plain data, no TVM: the rules read lanes per dtype and a register budget from here."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from explorer.target.arches import CPU_ARCHES
from store.values import DictValue

# Registers a micro-kernel leaves to loads and broadcasts besides its accumulators.
SPARE_REGISTERS = 4


@dataclass(frozen=True)
class CpuSpec(DictValue):
    """The CPU a default schedule is built for: ``vector_bits`` of its widest vector unit,
    ``registers`` (vector registers), ``cores`` (threads a parallel loop is split over),
    ``int8_dot`` (its int8 dot-product instructions), ``bf16_dot`` (its bf16 ones)."""

    vector_bits: int = 128
    registers: int = 16
    cores: int = 1
    arch: str = ""
    int8_dot: str = ""  # the int8 dot-product instruction set (explorer.schedule.int8_dot), "" if none
    bf16_dot: str = ""  # the bf16 product instructions (explorer.schedule.bf16_dot: amx, avx512bf16), "" if none
    int8_amx: bool = False  # AMX-INT8 tiles for the int8 kernels that fill them (explorer.schedule.amx_int8)

    def lanes(self, dtype: str) -> int:
        """Vector lanes of ``dtype`` (float32 on AVX-512: 16); 1 for types wider than a vector."""
        return max(1, self.vector_bits // dtype_bits(dtype))

    @property
    def broadcast_costs(self) -> bool:
        """Whether broadcasting a scalar to a vector is an instruction of its own before the FMA:
        x86 without AVX-512 (``vbroadcastss``); AVX-512 FMAs take a broadcast memory operand and
        NEON's a lane of a register. Such broadcasts slow a register tile down by more than their
        loads suggest (docs/notes/measurements.md). (The architecture's
        :attr:`explorer.target.arches.CpuArch.broadcast_below_bits`.)"""
        known = CPU_ARCHES.get(self.arch)
        return known is not None and self.vector_bits < known.broadcast_below_bits

    @property
    def accumulators(self) -> int:
        """Vector registers a register tile may hold as accumulators."""
        return max(2, self.registers - SPARE_REGISTERS)

    @classmethod
    def of(cls, *, vector_width: int | None, features: Iterable[str], arch: str, cores: int | None) -> CpuSpec:
        """The spec of a CPU target from what :class:`explorer.target.Target` knows about it."""
        feats = set(features)
        known = CPU_ARCHES.get(arch)
        registers = 16 if known is None else next((n for f, n in known.more_registers if f in feats), known.registers)
        from explorer.schedule.amx_int8 import available as amx_int8
        from explorer.schedule.bf16_dot import isa_from as bf16_isa
        from explorer.schedule.int8_dot import isa_from

        return cls(vector_bits=int(vector_width or 128), registers=registers, cores=max(1, int(cores or 1)), arch=arch,
                   int8_dot=isa_from(feats, arch) or "", bf16_dot=bf16_isa(feats, arch),
                   int8_amx=amx_int8(feats))


def dtype_bits(dtype: str) -> int:
    """Bits of one element of ``dtype`` (``float32`` -> 32, ``bool`` -> 8)."""
    text = str(dtype)
    if text == "bool":
        return 8
    found = re.findall(r"\d+", text.split("x")[0])
    return int(found[0]) if found else 32


__all__ = ["SPARE_REGISTERS", "CpuSpec", "dtype_bits"]
