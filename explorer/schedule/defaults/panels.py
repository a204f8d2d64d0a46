"""A register tile's weights packed into panels as wide as the tile, so that the rows a tile walks
down are contiguous: which operand, when it pays, and the packing copy."""

from __future__ import annotations

import math

from tvm import s_tir

from explorer.ir.tir_walk import LAYOUT_REWRITE_PREPROC
from explorer.schedule.defaults.analysis import BlockFacts
from explorer.schedule.defaults.layouts import is_weight
from explorer.schedule.defaults.machine import dtype_bits

# Weights smaller than this stay where they are: their rows fit the cache whatever their stride.
PACK_MIN_BYTES = 64 * 1024


def weight_bytes(facts: BlockFacts, vec: int, rows: int | None) -> int:
    """Bytes of the weights: an operand indexed by the vector axis and reductions only (NHWC conv
    and matmul weights; not an NCHW conv's input, which the vector axis also indexes), from the
    extents of the iterators that index it; of a batch of weights (:func:`_batched_weight`), one
    batch's. ``rows``: the tile's row axis (:func:`.tile_choice.row_axis`)."""
    other_spatial = {k for k in facts.spatial if k != vec and facts.extents[k] > 1}
    sizes = [math.prod(facts.extents[k] for k in set().union(*a.dims) - other_spatial) for a in facts.reads
             if a.uses(vec) and (not any(a.uses(k) for k in other_spatial) or _batched_weight(a, rows, other_spatial))]
    return max(sizes, default=0) * dtype_bits(facts.dtype) // 8


def reads_along_vectors(sch: s_tir.Schedule, block, facts: BlockFacts, vec: int):
    """``(index, access, buffer, constant)`` of each operand whose innermost index is the vector
    axis alone: the ones a register tile reads as vectors, and that :func:`pack_weights` may pack.
    ``constant``: the graph passes it as a weight (packed at build time, streamed from memory by a
    single-row tile, see :func:`.tile_choice.choose_tiles`)."""
    regions = sch.get(block).reads
    for i, access in enumerate(facts.reads):
        if access.last == frozenset({vec}):
            source = regions[i].source
            yield i, access, source, is_weight(sch, source) or _weight_padding(sch, block, source) is not None


def into_panels(sch: s_tir.Schedule, copies: list, packed) -> list:
    """Inline each copy whose only reader is the panels' copy ``packed``, so the operand is copied
    once, straight into its panels, not first into a transposed copy (a serial loop) and then
    again; returns the copies left."""
    left = []
    for copy in copies:
        readers = sch.get_consumers(copy)
        if len(readers) == 1 and sch.get(readers[0]).same_as(sch.get(packed)):
            sch.compute_inline(copy)
        else:
            left.append(copy)
    return left


def _weight_padding(sch: s_tir.Schedule, block, buffer):
    """The block that writes ``buffer`` as a constant weight padded to whole vectors
    (:func:`.vector_padding.pad_vector_axis`: the export computes it once, at build time), else None."""
    for producer in sch.get_producers(block):
        stmt = sch.get(producer)
        if stmt.name_hint.endswith("_pad") and len(stmt.writes) == 1 and stmt.writes[0].source.same_as(buffer) \
                and len(stmt.reads) == 1 and is_weight(sch, stmt.reads[0].source):
            return producer
    return None


def pack_weights(sch: s_tir.Schedule, block, facts: BlockFacts, vec: int, rows: int | None, vec_tile: int):
    """Copy a weights operand into panels ``vec_tile`` wide (``W[..., j]`` -> ``P[j // vec_tile,
    ..., j % vec_tile]``), so that the rows a register tile walks down are contiguous; returns the
    packing block or None.

    A weight the graph passes as a constant (``schedx.weight_buffers``) is packed whenever its rows are wider
    than the tile: the copy is marked as a layout rewrite and computed once, at build time. Others
    (a product of two activations) are copied on every call, so only when output rows share them
    and their rows are a multiple of 1 KB apart: those all fall into the same few cache sets, the tile's column of
    weights never stays in cache and every multiply-add waits on memory (measurements:
    docs/notes/default-tiling.md)."""
    other = {k for k in facts.spatial if k != vec and facts.extents[k] > 1}
    for i, access, buffer, free in reads_along_vectors(sch, block, facts, vec):
        if len(access.dims) < 2:
            continue
        if any(access.uses(k) for k in other) and not (free and _batched_weight(access, rows, other)):
            continue
        shape, item = [int(x) for x in buffer.shape], dtype_bits(buffer.dtype) // 8
        # a copy made on every call pays only where tiles reuse it: rows of outputs that share it
        # (a global average pool reads each input once: copying 1x7x7x1280 first took it 0.005 -> 0.063 ms)
        conflicts = shape[-1] * item % 1024 == 0 and bool(other)
        if shape[-1] % vec_tile or shape[-1] == vec_tile or not (free or conflicts) \
                or math.prod(shape) * item < PACK_MIN_BYTES:
            continue
        padding = _weight_padding(sch, block, buffer)
        packed = sch.cache_read(block, i, "global")
        if padding is not None:  # the panels read the weight itself, zeros past its end
            sch.compute_inline(padding)
        sch.transform_layout(packed, ("write", 0), lambda *idx: (idx[-1] // vec_tile, *idx[:-1], idx[-1] % vec_tile))
        if free:
            sch.annotate(packed, LAYOUT_REWRITE_PREPROC, True)
        return packed
    return None


def _batched_weight(access, rows: int | None, other: set[int]) -> bool:
    """Whether a weight that varies with output axes besides the vector axis does so only as a
    batch of weights: leading dimensions each indexed by one such axis alone, never by the tile's
    rows (Winograd's products, ``[36, C_in, C_out]``: one weight matrix per point of the tile).
    A register tile stays inside one batch, so each batch packs into panels of its own."""
    spatial_dims = [dim for dim in access.dims if dim & other]
    return rows not in set().union(*access.dims) and all(
        len(dim) == 1 for dim in spatial_dims) and list(access.dims[:len(spatial_dims)]) == spatial_dims


__all__ = ["PACK_MIN_BYTES", "into_panels", "pack_weights", "reads_along_vectors", "weight_bytes"]
