"""The loop nest of a register tile: outer tiles fused and parallel, the reduction, the rows
unrolled and the vector lanes vectorized, the write-back per tile; a tail of rows in a tile of its
own."""

from __future__ import annotations

from tvm import s_tir

from explorer.schedule.defaults.analysis import BlockFacts, block_facts
from explorer.schedule.defaults.groups import partitioned_tiles
from explorer.schedule.defaults.machine import CpuSpec
from explorer.schedule.defaults.simple import schedule_plain
from explorer.schedule.defaults.tile_choice import Tiling


def register_tile(sch: s_tir.Schedule, block, stage, loops: dict, facts: BlockFacts, vec: int, rows: int | None,
                  row_tile: int, vec_tile: int, column_first: bool, parallel: bool, unroll_reduction: bool = False
                  ) -> None:
    """Loops ``[outer tiles: fused, parallel] [reduction] [rows: unrolled] [vec: vectorized]`` for
    ``block`` (``loops``: its loop per iterator), with ``stage`` (the tile's write-back, epilogue
    included) computed per tile; ``unroll_reduction``: the reduction loops unrolled as well (a
    depthwise conv's taps, :mod:`.depthwise`)."""
    v_out, v_in = sch.split(loops[vec], [None, vec_tile])
    inner = [v_in]
    outer_of = {vec: v_out}
    if rows is not None:
        r_out, r_in = sch.split(loops[rows], [None, row_tile])
        inner.insert(0, r_in)
        outer_of[rows] = r_out
    outer = [outer_of.get(k, loops[k]) for k in facts.spatial]
    if column_first:
        outer.remove(v_out)
        outer.insert(0, v_out)
    reduce = [loops[k] for k in facts.reduce]
    sch.reorder(*outer, *reduce, *inner)
    sch.reverse_compute_at(stage, outer[-1])
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    if parallel:
        sch.parallel(fused)
    sch.vectorize(inner[-1])
    if len(inner) > 1 and row_tile > 1:
        sch.unroll(inner[0])
    if unroll_reduction:
        for loop in reduce:
            sch.unroll(loop)
    stage_loops = sch.get_loops(stage)
    if len(stage_loops) > 1:
        sch.vectorize(stage_loops[-1])
    sch.decompose_reduction(block, reduce[0])


def tile_with_tail(sch: s_tir.Schedule, block, writeback, facts: BlockFacts, tiling: Tiling,
                   column_first: bool, parallel: bool, cpu: CpuSpec) -> None:
    """A row axis that the row tile does not divide (ResNet's 56, 28, 14 and 7 output columns
    against 6-row tiles). The loops above one row of tiles are fused (and run in parallel: tile
    columns first when the weights are large, so that a column's weights stay in cache for all
    its rows); under them the row loop is cut in two (``loop_partition``): the rows that whole
    tiles cover, and the rest in a tile of their own. Each part accumulates in its own register
    tile, into the block's output buffer, which is then written back once with the epilogue as a
    parallel vectorized pass (the parts sit in block scopes of their own, where the write-back
    cannot follow them)."""
    rows, vec = tiling.rows, tiling.vec
    loops = sch.get_loops(block)
    v_out, v_in = sch.split(loops[vec], [None, tiling.vec_tile])
    outer = [v_out if k == vec else loops[k] for k in facts.spatial if k != rows]
    if column_first:
        outer.remove(v_out)
        outer.insert(0, v_out)
    reduce = [loops[k] for k in facts.reduce]
    sch.reorder(*outer, loops[rows], v_in, *reduce)
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    if parallel:
        sch.parallel(fused)
    parts = partitioned_tiles(sch, loops[rows], [facts.extents[rows] - tiling.tail_rows, None], facts)
    for (part, tile), rt in zip(parts, (tiling.row_tile, tiling.tail_rows)):
        row_loop, lanes, *part_reduce = sch.get_loops(part)  # the part's scope holds these loops only
        if rt < sch.get(row_loop).extent.value:
            r_out, r_in = sch.split(row_loop, [None, rt])
            sch.reorder(*part_reduce, r_in, lanes)
            sch.reverse_compute_at(tile, r_out)
        else:  # one tile (the tail; or whole tiles that are one): its write-back is already in place
            r_in = row_loop
            sch.reorder(*part_reduce, r_in, lanes)
        sch.vectorize(lanes)
        if rt > 1:
            sch.unroll(r_in)
        tile_loops = sch.get_loops(tile)
        sch.vectorize(tile_loops[-1])
        sch.decompose_reduction(part, part_reduce[0])
    schedule_plain(sch, writeback, cpu)


def slices_per_tile(sch: s_tir.Schedule, block, writeback, consumers: list) -> int:
    """Compute each of ``consumers`` (elementwise blocks that read a part of the tile's output, so
    that the write-back could not take them in: the real channels of a conv padded to whole
    vectors, ``passes/conv_channels.py``'s ``strided_slice``) tile by tile, right after the tile's
    write-back and from its accumulator, instead of in a pass of its own over the whole padded
    output; returns how many. MobileNetV2's 1x1 96->24 @56 (padded to 32): the pass read the
    401 KB padded map back and wrote the 301 KB output; measurements: docs/notes/measurements.md."""
    done = 0
    padded = sch.get(writeback).writes[0].source
    for consumer in consumers:
        if not block_facts(sch, consumer).is_spatial or not _keeps_innermost(sch.get(consumer), padded):
            continue
        try:
            sch.reverse_compute_at(consumer, sch.get_loops(block)[0])
        except s_tir.ScheduleError:
            continue
        loops = sch.get_loops(consumer)
        if len(loops) > 1:
            sch.vectorize(loops[-1])
        done += 1
    if done:
        try:  # the consumers read the tile's accumulator: the copy into the padded map goes
            sch.compute_inline(writeback)
        except s_tir.ScheduleError:
            pass
    return done


def _keeps_innermost(consumer, buffer) -> bool:
    """Whether ``consumer`` writes its output's innermost dimension with the iterator it reads
    ``buffer``'s innermost dimension with (a slice, a bias, an activation; not a transpose, whose
    writes per tile would stride across its output)."""
    read = next((r for r in consumer.reads if r.source.same_as(buffer)), None)
    return read is not None and read.region[-1].min.same_as(consumer.writes[0].region[-1].min)


__all__ = ["register_tile", "slices_per_tile", "tile_with_tail"]
