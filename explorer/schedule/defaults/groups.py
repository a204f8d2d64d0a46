"""Register tiles for a grouped convolution whose group width is not a multiple of the vector.

A grouped conv reads input channel ``ff // w * w + rc`` for output channel ``ff``: a vector of
output channels must stay inside one group of ``w``, or its input loads are gathers. Where no whole
number of vectors divides ``w`` (ShuffleNet v1: groups of 34, 68 and 136 channels against 16 float
lanes), the tile of :mod:`.tiling` fell back to the widest power of two dividing ``w``: 2 lanes of 16
(a 28x28x136 1x1 conv at 60 GFLOPS, 14% of the peak). Here each group's channels are cut in two
(``loop_partition``): whole vectors, and the rest in one narrower vector; each part accumulates in
its own register tile over the rows (output pixels) and is written back, and the epilogue runs as a
vectorized pass over the output (the same 1x1 conv: 0.126 -> 0.030 ms on a 2-core AVX-512 Zen 5).
"""

from __future__ import annotations

from tvm import s_tir
from tvm.tirx import IndexMap

from explorer.schedule.defaults.analysis import PARALLEL_MIN_MACS, BlockFacts
from explorer.schedule.defaults.machine import CpuSpec
from explorer.schedule.defaults.simple import schedule_plain
from explorer.schedule.primitives import annotate_buffer_access


def ragged_group_width(facts: BlockFacts, vec: int, rows: int | None, cpu: CpuSpec) -> int | None:
    """The group width ``w`` of a grouped reduction over the vector axis ``vec`` when it holds more
    than one vector but no whole number of them, the output is indexed by plain iterators and there
    is a row axis to tile; else None (the plain register tile fits)."""
    lanes = cpu.lanes(facts.dtype)
    widths = {c for a in facts.reads for k, c in a.groups if k == vec}
    if rows is None or lanes <= 1 or len(widths) != 1 or any(k is None for k in facts.out_dims):
        return None
    (width,) = widths
    ext = facts.extents[vec]
    if width <= lanes or width % lanes == 0 or ext % width or ext == width:
        return None
    return width


def _row_tile(extent: int, cpu: CpuSpec) -> int:
    """The most rows of one-vector tiles that divide ``extent`` and fit the accumulators (one
    register for the weight vector and one for the broadcast row operand besides)."""
    budget = min(cpu.accumulators, cpu.registers - 2)
    return max(d for d in range(1, min(extent, budget) + 1) if extent % d == 0)


def partitioned_tiles(sch: s_tir.Schedule, loop, bounds: list, facts: BlockFacts) -> list[tuple]:
    """``loop_partition`` ``loop`` at ``bounds``; each part's block and its register tile (a
    ``reindex_cache_write``), in order. The tile's buffer is indexed by the block's own iterators
    (cache_write would offset them by the loops above the part's scope, which a block may not use);
    compacted to the tile when lowered. Each part is declared to write one element per iteration:
    ``loop_partition`` leaves a block declaring the whole buffer, which would make its tile as large."""
    tile_index = IndexMap.from_func(lambda *v: tuple(v[k] for k in facts.out_dims), ndim=len(facts.extents))
    tiles = []
    for part_loop in sch.loop_partition(loop, bounds):
        part = sch.get_child_blocks(part_loop)[0]
        annotate_buffer_access(sch, part, ("write", 0),
                               lambda *iters: [b for k in facts.out_dims for b in (iters[k], iters[k] + 1)])
        tiles.append((part, sch.reindex_cache_write(part, 0, "global", tile_index)))
    return tiles


def tile_ragged_groups(sch: s_tir.Schedule, block, writeback, facts: BlockFacts, vec: int, rows: int, width: int,
                       cpu: CpuSpec) -> str:
    """Schedule ``block`` (see the module docstring); ``writeback``: its output's copy with the
    epilogue folded in, scheduled as a plain pass. Returns a description."""
    lanes = cpu.lanes(facts.dtype)
    rt = _row_tile(facts.extents[rows], cpu)
    loops = sch.get_loops(block)
    group, within = sch.split(loops[vec], [facts.extents[vec] // width, width])
    r_out, r_in = sch.split(loops[rows], [None, rt])
    outer = [group if k == vec else r_out if k == rows else loops[k] for k in facts.spatial]
    sch.reorder(*outer, within, r_in, *[loops[k] for k in facts.reduce])
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    if facts.volume >= PARALLEL_MIN_MACS:
        sch.parallel(fused)
    whole = width // lanes * lanes
    for (part, tile), wide in zip(partitioned_tiles(sch, within, [whole, None], facts), (True, False)):
        channel, row, *reduce = sch.get_loops(part)  # the part's scope holds these loops only
        if wide:
            vectors, lane = sch.split(channel, [None, lanes])
            sch.reorder(vectors, *reduce, row, lane)
            sch.reverse_compute_at(tile, vectors)
        else:  # the narrower vector: one tile, its write-back already in place
            lane = channel
            sch.reorder(*reduce, row, lane)
        sch.vectorize(lane)
        if rt > 1:
            sch.unroll(row)
        written = sch.get_loops(tile)
        if not wide and len(written) > 1:  # its rows outside, its channels in one vector
            sch.reorder(written[-1], written[-2])
            written = sch.get_loops(tile)
        sch.vectorize(written[-1])
        sch.decompose_reduction(part, reduce[0])
    schedule_plain(sch, writeback, cpu)
    return (f"register tile {rt}x{lanes} per group of {width} ({facts.name}), "
            f"the last {width - whole} of each group in {rt}x{width - whole}")


__all__ = ["partitioned_tiles", "ragged_group_width", "tile_ragged_groups"]
