"""The default for a reduction with a vector axis (conv2d in any layout, depthwise conv, matmul,
dense, pooling, mean): a register tile like MultiLevelTiling's innermost level.

The output is cut into ``rows x vec`` tiles that accumulate in vector registers over all the
reduction loops; the epilogue is applied as a tile is written back, and the loops above the tiles
are one parallel loop. This module puts the parts together: the axes and tile sizes
(:mod:`.tile_choice`, costed by :mod:`.tile_cost`), rows over two output axes as one
(:mod:`.pixel_rows`), a vector axis padded to whole vectors (:mod:`.vector_padding`), weights
packed into panels (:mod:`.panels`), the loop nest (:mod:`.tile_loops`), grouped convolutions
tiled group by group (:mod:`.groups`), depthwise ones pixels by channels with their taps unrolled
(:mod:`.depthwise`). Why each choice: ``docs/notes/default-tiling.md``."""

from __future__ import annotations

from dataclasses import replace

from tvm import s_tir

from explorer.schedule.defaults.analysis import PARALLEL_MIN_MACS, NotApplicable, block_facts
from explorer.schedule.defaults.depthwise import choose_conv_tiles
from explorer.schedule.defaults.groups import ragged_group_width, tile_ragged_groups
from explorer.schedule.defaults.few_columns import dot_product_rows, few_columns_weight
from explorer.schedule.defaults.inline import fold_into_producer
from explorer.schedule.defaults.layouts import (accumulate_along_vectors, few_channels_pixel_axis, gathered_operands,
                                                innermost_output_axis, relayout)
from explorer.schedule.defaults.machine import CpuSpec
from explorer.schedule.defaults.panels import into_panels, pack_weights, reads_along_vectors, weight_bytes
from explorer.schedule.defaults.pixel_rows import fuse_rows, pixel_rows
from explorer.schedule.defaults.simple import safe_schedule
from explorer.schedule.defaults.tile_choice import row_axis, vector_axis
from explorer.schedule.defaults.tile_loops import register_tile, slices_per_tile, tile_with_tail
from explorer.schedule.defaults.vector_padding import pad_vector_axis

# Weights larger than this (a typical L2) are walked one tile column at a time, for all the rows
# (ResNet-18's last 3x3 conv: 9.4 MB of weights were read again for each of its 7 output rows);
# smaller ones stay in cache while the rows go by, and the input is read once.
CACHE_BYTES = 512 * 1024


def tile_reduction(sch: s_tir.Schedule, block, cpu: CpuSpec, tails: bool = True, pixels: bool = True,
                   rank: int = 0) -> str:
    """Schedule ``block`` (a reduction) with a register tile and its epilogue; returns a description.
    ``tails``: whether a row tile may leave rows over for a tile of their own; ``rank``: which
    tile by :func:`choose_tiles`' ranking (0: its best; a depthwise conv's own tile ranks first,
    :mod:`.depthwise`).

    Raises :class:`NotApplicable` before changing anything when the block does not fit."""
    facts = block_facts(sch, block)
    if facts.is_spatial or not facts.loops_match or not facts.out_dims:
        raise NotApplicable("not a reduction under its own loops")
    vec, relaid = few_channels_pixel_axis(facts, cpu.lanes(facts.dtype)), []
    if vec is not None and (weight := few_columns_weight(sch, block, facts, cpu)) is not None:
        return dot_product_rows(sch, block, facts, weight, cpu)  # dot products, not the rows transposed
    moves = gathered_operands(sch, block, facts, vec)
    if moves is None:  # channels fill the vectors (or their pixels cannot be read as vectors)
        try:
            vec = vector_axis(facts)
        except NotApplicable:  # a gather from a copy the kernel writes itself: lay the copy out for the vectors
            vec = innermost_output_axis(facts)
            moves = gathered_operands(sch, block, facts, vec)
            if not moves:
                raise
    if moves:
        relaid = relayout(sch, block, facts, moves)
        facts = block_facts(sch, block)
    width = ragged_group_width(facts, vec, row_axis(facts, vec), cpu)
    if width is not None:
        consumers = sch.get_consumers(block)
        writeback = sch.cache_write(block, 0, "global")
        for consumer in consumers:
            fold_into_producer(sch, consumer)
        return tile_ragged_groups(sch, block, writeback, facts, vec, row_axis(facts, vec), width, cpu)
    pad_note, pads, copies = "", [], []
    if pad_vector_axis(sch, block, facts, vec, cpu):
        pad_note = f", {facts.extents[vec]} outputs padded to whole vectors"
        facts = block_facts(sch, block)
        # the padded operands' copies, and the copy back into the output (the epilogue joins that one:
        # inlined into the write-back it would write past the output's end)
        pads = [p for p in sch.get_producers(block) if sch.get(p).name_hint.endswith("_pad")]
        copies = sch.get_consumers(block)
    rows = row_axis(facts, vec)
    # constant weights along the vectors (packed into panels below)
    streams = any(constant for *_, constant in reads_along_vectors(sch, block, facts, vec))
    # (a depthwise conv's own tile first: then the model's ranks are one lower, its own none)
    tiling, model_rank = choose_conv_tiles(facts, vec, rows, cpu, tails, rank, streams)
    fused = pixel_rows(facts, vec, rows, tiling, cpu, tails, model_rank) if pixels and model_rank is not None else None
    outer_rows = None
    if fused is not None:  # the tile sizes the fused rows want (the panels follow them)
        outer_rows, tiling = fused

    consumers = [] if copies else sch.get_consumers(block)
    packed = pack_weights(sch, block, facts, vec, rows, tiling.vec_tile)
    if packed is not None and pads:  # a weight's padding may have joined its panels
        pads = [p for p in sch.get_producers(block) if sch.get(p).name_hint.endswith("_pad")]
    if packed is not None and relaid:  # an operand laid out for the vectors, then packed: one copy
        relaid = into_panels(sch, relaid, packed)
    writeback = sch.cache_write(block, 0, "global")  # per tile: on the stack, not the workspace (tile_cost.STACK_BYTES)
    accumulate_along_vectors(sch, block, facts, vec)
    # the epilogue joins the write-back when it is elementwise and reads the whole output
    sliced = [consumer for consumer in consumers if not fold_into_producer(sch, consumer)]
    fused_note = ""
    if outer_rows is not None:
        fused_note = f", rows over {facts.extents[outer_rows]}x{facts.extents[rows]} outputs as one axis"
        facts = fuse_rows(sch, block, facts, outer_rows, rows)
        # the sizes planned (the panels are packed for them); the axes' positions after the fusion
        vec = vector_axis(facts)
        rows = row_axis(facts, vec)
        tiling = replace(tiling, vec=vec, rows=rows)

    column_first = weight_bytes(facts, vec, rows) > CACHE_BYTES  # each tile column's weights read once, for all the rows
    parallel = facts.volume >= PARALLEL_MIN_MACS
    per_tile = 0
    if tiling.tail_rows:
        tile_with_tail(sch, block, writeback, facts, tiling, column_first, parallel, cpu)
    else:
        loops = dict(enumerate(sch.get_loops(block)))
        register_tile(sch, block, writeback, loops, facts, vec, rows, tiling.row_tile, tiling.vec_tile,
                      column_first, parallel, unroll_reduction=tiling.taps_unrolled)
        # (a tile of one row, a matrix-vector product's: its own pass stays faster, 0.34x the time)
        if sliced and tiling.row_tile > 1:
            per_tile = slices_per_tile(sch, block, writeback, sliced)
    for copy in copies:
        for consumer in sch.get_consumers(copy):
            fold_into_producer(sch, consumer)
        safe_schedule(sch, copy, cpu)  # by rows: fused, its vectors would gather across the padded rows
    for pad in pads:
        safe_schedule(sch, pad, cpu)
    for copy in relaid:  # each tile's part of the copy, written just before the tile reads it (in cache)
        try:
            sch.compute_at(copy, sch.get_loops(block)[0])
        except s_tir.ScheduleError:
            pass  # the whole copy first, at the root (the caller schedules it with the other blocks)
    if packed is not None:
        pack_loops = sch.get_loops(packed)
        sch.parallel(pack_loops[0])
        _, lane = sch.split(pack_loops[-1], [None, tiling.vec_tile])  # one panel row: contiguous both ways
        sch.vectorize(lane)
    return (tiling.describe(facts) + fused_note + pad_note
            + (", weights packed in panels" if packed is not None else "")
            + (f", {per_tile} epilogue(s) on a slice of it per tile" if per_tile else "")
            + (f", {len(relaid)} input(s) copied with the vector axis innermost, tile by tile" if relaid else ""))


__all__ = ["CACHE_BYTES", "tile_reduction"]
