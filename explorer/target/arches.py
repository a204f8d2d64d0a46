"""What schedx knows of each CPU architecture it builds for, as data: one :class:`CpuArch` per
architecture in :data:`CPU_ARCHES`. The target objects, the default schedule rules and the
micro-kernels read their architecture's facts from here instead of testing its name, so a new
architecture (say ``riscv64``) is one entry here and its ISA table in
:mod:`explorer.target.features`. Plain data, no imports of schedx or TVM."""

from __future__ import annotations

import platform
from dataclasses import dataclass


@dataclass(frozen=True)
class CpuArch:
    """One CPU architecture.

    ``triple``: LLVM's; ``cross_compiler``: the C++ compiler that links a library for it on
    another machine; ``spellings``: what users type; ``example_cpus``: CPU names to suggest;
    ``isa_ranks``: its vector ISAs, narrowest first (the words of
    :func:`explorer.target.features.isa_word`); ``tensor_intrin``: the submodule of
    ``tvm.s_tir.tensor_intrin`` with its intrinsics; ``registers``: vector registers, and
    ``more_registers``: (feature, count) where a feature gives more; ``broadcast_below_bits``:
    vector widths under which a scalar broadcast costs an instruction of its own before an FMA
    (x86 before AVX-512: ``vbroadcastss``; 0: never); ``fma_feature``: the feature FMAs need ("":
    always there); ``int8_dot``: (features, instruction set) for int8 dot products, best first;
    ``narrower``: (feature, spelling) of the same CPU without its widest unit; ``compare_with``:
    other targets worth comparing its code with."""

    name: str
    triple: str
    cross_compiler: str
    spellings: tuple[str, ...]
    example_cpus: tuple[str, ...]
    isa_ranks: tuple[str, ...]
    tensor_intrin: str
    registers: int
    more_registers: tuple[tuple[str, int], ...] = ()
    broadcast_below_bits: int = 0
    fma_feature: str = ""
    int8_dot: tuple[tuple[frozenset[str], str], ...] = ()
    narrower: tuple[tuple[str, str], ...] = ()
    compare_with: tuple[str, ...] = ()


CPU_ARCHES: dict[str, CpuArch] = {a.name: a for a in (
    CpuArch("x86_64", "x86_64-linux-gnu", "x86_64-linux-gnu-g++", ("x86_64", "x86-64"),
            ("x86-64-v3", "x86-64-v4", "haswell", "skylake-avx512", "icelake-server", "sapphirerapids", "znver3",
             "znver4"), ("sse", "avx", "avx2", "avx512"), "x86",
            registers=16, more_registers=(("avx512f", 32),), broadcast_below_bits=512, fma_feature="fma",
            int8_dot=((frozenset({"avx512vnni", "avx512bw"}), "vnni"), (frozenset({"avx512bw"}), "avx512bw"),
                      (frozenset({"avx2"}), "avx2")),
            narrower=(("avx512f", "cpu:-avx512f"),), compare_with=("cpu:x86-64-v2", "aarch64:cortex-a76")),
    CpuArch("aarch64", "aarch64-linux-gnu", "aarch64-linux-gnu-g++", ("aarch64", "arm64"),
            ("generic", "cortex-a55", "cortex-a76", "neoverse-n1", "neoverse-v1", "apple-m1"), ("neon", "sve"),
            "arm_cpu", registers=32, compare_with=("cpu:generic", "x86_64:x86-64-v3")),
)}


def arch_of(triple: str) -> str:
    """``x86_64`` or ``aarch64`` (or the triple's first part) for an LLVM triple or a machine name."""
    head = (triple or "").split("-")[0].lower()
    for arch in CPU_ARCHES.values():
        if head == arch.name or head in arch.spellings or head == arch.triple.split("-")[0]:
            return arch.name
    return {"amd64": "x86_64"}.get(head, head)


def host_arch() -> str:
    """This machine's architecture, as :data:`CPU_ARCHES` names it."""
    return arch_of(platform.machine())


def cpu_intrinsics(arch: str) -> tuple[str, ...]:
    """The tensor-intrinsic submodules of a CPU architecture (every CPU's when it is unknown)."""
    known = CPU_ARCHES.get(arch)
    return (known.tensor_intrin,) if known else tuple(a.tensor_intrin for a in CPU_ARCHES.values())


__all__ = ["CPU_ARCHES", "CpuArch", "arch_of", "cpu_intrinsics", "host_arch"]
