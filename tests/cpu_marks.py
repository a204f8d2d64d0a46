"""The CPU's bf16 instructions as schedx reads its flags, and the pytest marks that skip the tests
that run them where the CPU lacks them: shared by every bf16 test."""

from __future__ import annotations

import pytest

from explorer.target.environment import cpu_flags

# The flags as schedx reads them (``SCHEDX_CPU_FLAGS`` plays a machine without them: the host target
# then lacks the instructions, and code forced to use them stops LLVM, process and all)
HAS_BF16 = "avx512_bf16" in cpu_flags()
HAS_AMX = {"amx_bf16", "amx_tile"} <= cpu_flags()
NEEDS_BF16 = pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16 (avx512_bf16 not in its flags)")
NEEDS_AMX = pytest.mark.skipif(not HAS_AMX, reason="this CPU has no AMX-BF16 (amx_bf16 not in its flags)")

__all__ = ["HAS_AMX", "HAS_BF16", "NEEDS_AMX", "NEEDS_BF16"]
