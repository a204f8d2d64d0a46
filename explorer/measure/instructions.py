"""The instructions a family's peak kernel and its kernels issue (one row per instruction set:
``amx``, ``avx512bf16``, ``vnni``, ...): the table :mod:`explorer.measure.dot_peaks` times and
:mod:`explorer.measure.families` and :mod:`explorer.measure.calibration` name figures by. No
imports from the rest of :mod:`explorer.measure`: the modules above read it."""

from __future__ import annotations

from dataclasses import dataclass

FAMILIES = ("bf16", "int8")
VECTOR_CHAINS = 12  # vdpbf16ps / vpdpbusd accumulators: 2 ports x 5-6 cycles, within 32 registers
# vdpbf16ps with 16: on Zen 5 (2 cores, 2 threads, 5 repeats each) 12 chains 878-929 GFLOPS, 16 952-989,
# 20 and more 384-678 (the registers spill), and a direct convolution's 28-sum tile ran at 952: 12 under-read
BF16_VECTOR_CHAINS = 16


@dataclass(frozen=True)
class Instruction:
    """One row of the table: a family's instruction set as the schedules name it (``isa``), what the
    kernel issues, the ops one accumulator chain does per iteration, and how many chains."""

    family: str
    isa: str
    instruction: str
    ops_per_step: int
    chains: int
    label: str  # short, for peaks lines: "bf16 AMX"


INSTRUCTIONS = (
    Instruction("bf16", "amx", "tdpbf16ps", 2 * 16 * 16 * 32, 4, "bf16 AMX"),
    Instruction("bf16", "avx512bf16", "vdpbf16ps", 2 * 16 * 2, BF16_VECTOR_CHAINS, "bf16 AVX512-BF16"),
    Instruction("int8", "amx", "tdpbusd", 2 * 16 * 16 * 64, 4, "int8 AMX"),
    Instruction("int8", "vnni", "vpdpbusd", 2 * 16 * 4, VECTOR_CHAINS, "int8 VNNI"),
    Instruction("int8", "avx512bw", "vpmaddubsw", 2 * 64, 8, "int8 AVX512BW"),
    Instruction("int8", "avx2", "vpmaddubsw", 2 * 32, 4, "int8 AVX2"),
)


__all__ = ["FAMILIES", "INSTRUCTIONS", "VECTOR_CHAINS", "Instruction"]
