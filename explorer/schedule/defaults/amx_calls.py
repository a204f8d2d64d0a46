"""How many grids of AMX tiles one call computes, and the init of its sums: what the bf16 products'
rule (:mod:`.bf16`) and the direct convolutions' (:mod:`.bf16_amx_conv`) share.

A call of several grids loads the tile configuration once and stores its sums in one buffer, which
its epilogue reads right after: it takes as many grids as keep :data:`MIN_CALLS_PER_CORE` calls a
core (load balance) and at most :data:`MAX_CALL_SUMS` bytes of sums (they stay in L1). The call
starts its C tiles from ``tilezero``: the block's init is tensorized into no code (no zeros stored
before the call).
"""

from __future__ import annotations

from collections.abc import Callable

from tvm import s_tir

from explorer.schedule.amx_bf16_conv import register_zero

MIN_CALLS_PER_CORE = 4  # the calls a core gets at least (load balance between the cores)
MAX_CALL_SUMS = 32 * 1024  # bytes of fp32 sums one call stores for its epilogue (they stay in L1)


def call_fits(grids: int, grid_sums: int, cores: int, per_call: int, max_sums: int | None = None) -> bool:
    """Whether calls of ``per_call`` grids each (of a kernel's ``grids``, ``grid_sums`` fp32 sums a
    grid) keep :data:`MIN_CALLS_PER_CORE` calls a core and at most ``max_sums`` bytes of sums (None:
    :data:`MAX_CALL_SUMS`)."""
    cap = MAX_CALL_SUMS if max_sums is None else max_sums
    return grids // per_call >= MIN_CALLS_PER_CORE * cores and grid_sums * per_call * 4 <= cap


def most_dividing(count: int, ok: Callable[[int], bool]) -> int:
    """The largest divisor of ``count`` that ``ok`` accepts (1 where none does)."""
    return max((g for g in range(1, count + 1) if count % g == 0 and ok(g)), default=1)


def zero_init(sch: s_tir.Schedule, tile, loop, rows: int, cols: int, out_rows: int = 1) -> None:
    """Decompose ``tile``'s reduction at ``loop`` and tensorize its init (``rows x cols`` fp32 sums)
    into no code: the call that follows starts from ``tilezero`` (an update-form call only)."""
    sch.tensorize(sch.decompose_reduction(tile, loop), register_zero(rows, cols, out_rows))


__all__ = ["MAX_CALL_SUMS", "MIN_CALLS_PER_CORE", "call_fits", "most_dividing", "zero_init"]
