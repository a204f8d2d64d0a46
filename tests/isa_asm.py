"""The three kinds of CPU target the ISA tests build for (AVX2, AVX-512, NEON, whatever CPU runs
the tests), their vector widths, the assembly a kernel builds to for one of them, and the check
that its FMAs are as wide as the target's vectors and none wider."""

from __future__ import annotations

import tvm

from explorer.schedule.codegen import asm_stats

TARGETS = {"avx2": "cpu:x86-64-v3", "avx512": "cpu:x86-64-v4", "neon": "aarch64:cortex-a76"}
VECTOR_BITS = {"avx2": 256, "avx512": 512, "neon": 128}


def target_asm(func_or_mod, target) -> str:
    """The assembly of a PrimFunc (or a module of them) built for ``target``."""
    mod = func_or_mod if isinstance(func_or_mod, tvm.IRModule) else tvm.IRModule({"main": func_or_mod})
    lib = tvm.compile(mod, target=target.tvm())
    return (lib.mod.imports[0] if lib.mod.imports else lib.mod).inspect_source("asm")


def assert_vector_width(asm: str, bits: int) -> None:
    """FMAs of ``bits``-wide vectors, and no vector register wider than the target has."""
    stats = asm_stats(asm)
    assert stats.fma.get(bits, 0) > 0, stats.summary()
    assert max(stats.vector, default=0) <= bits, stats.summary()
