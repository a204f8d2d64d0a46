"""A tiled kernel's epilogue computed tile by tile: what the int8 rules (:mod:`.int8`, :mod:`.int8_amx`)
and the direct bf16 convolution's (:mod:`.bf16_amx_conv`) share."""

from __future__ import annotations

from math import prod

from tvm import s_tir

from explorer.schedule.defaults.analysis import block_facts


def epilogue_per_tile(sch: s_tir.Schedule, block, tile_loop):
    """The kernel's epilogue (its one consumer: requantization, dequantization, a residual add, all
    inlined into one block) computed tile by tile under ``tile_loop``, while the tile's int32 sums
    are in cache; the sums then need a buffer of one tile only (on the stack), not the whole
    output's. None (the epilogue left at the root) where there is none or TVM refuses it."""
    consumers = sch.get_consumers(block)
    if len(consumers) != 1 or not block_facts(sch, consumers[0]).is_spatial:
        return None
    try:
        sch.reverse_compute_at(consumers[0], tile_loop)
    except s_tir.ScheduleError:
        return None
    return consumers[0]


def epilogue_reads_a_map(sch: s_tir.Schedule, block) -> bool:
    """Whether ``block``'s one spatial consumer (its epilogue) reads, besides ``block``'s output, a
    buffer of as many values as the epilogue writes: a map (a residual add), not a per-channel
    constant (a bias, a batch norm's scale), a broadcast along some axes, or a scalar."""
    consumers = sch.get_consumers(block)
    if len(consumers) != 1 or not block_facts(sch, consumers[0]).is_spatial:
        return False
    out, epilogue = sch.get(block).writes[0].source, sch.get(consumers[0])
    values = prod(int(d) for d in epilogue.writes[0].source.shape)
    return any(not r.source.same_as(out) and prod(int(d) for d in r.source.shape) >= values for r in epilogue.reads)


def vectorize_epilogue(sch: s_tir.Schedule, epilogue) -> None:
    """Vectorize the channel loop of a tile's epilogue (``epilogue_per_tile``'s block; None: nothing
    to do); a loop TVM does not vectorize is left to LLVM."""
    if epilogue is None:
        return
    try:
        sch.vectorize(sch.get_loops(epilogue)[-1])
    except s_tir.ScheduleError:
        pass


__all__ = ["epilogue_per_tile", "epilogue_reads_a_map", "vectorize_epilogue"]
