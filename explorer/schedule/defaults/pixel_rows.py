"""Register tiles over two output axes run as one (a conv's output height and width as one axis of
pixels), where a row axis too short for whole tiles would leave them waiting on the FMA latency."""

from __future__ import annotations

from dataclasses import replace

from tvm import s_tir
from tvm.tirx import IndexMap

from explorer.schedule.defaults.analysis import BlockFacts, NotApplicable, block_facts
from explorer.schedule.defaults.machine import CpuSpec
from explorer.schedule.defaults.tile_choice import Tiling, choose_tiles

# How much cheaper (by choose_tiles' model) a tile over fused outputs must be to be taken: the model
# says 5% at 56x56 and 4% at 28x28 (ResNet-18), where fusing ran 1-4% slower; 9% at 14x14x256,
# where it ran 2-7% faster, and 28% at 7x7x512 (17-20% faster).
PIXEL_GAIN = 0.07


def pixel_rows(facts: BlockFacts, vec: int, rows: int | None, tiling: Tiling, cpu: CpuSpec,
               tails: bool, rank: int = 0) -> tuple[int, Tiling] | None:
    """The output axis just outside the rows (a conv's output height, when rows are its width)
    and the tiles over both as one axis of pixels, when a tile should run so; else None.

    A row axis as short as ResNet's last convs' 7 columns leaves AVX2 a 5x16 tile and a 2x16
    tail, whose 4 accumulators wait on the FMA latency and read each weight vector from L2 for two
    multiply-adds; over 7x7 = 49 pixels the tiles are 5x16 and one 4x16 tail (ResNet-18's 7x7x512
    3x3 conv: 0.86 -> 0.62 modelled cycles per multiply-add). Both axes must index the output side
    by side and every operand alike (an operand that one of them indexes and not the other would
    change under a tile: a batched matmul's weights); taken when it costs at least
    ``PIXEL_GAIN`` less by :func:`choose_tiles`'s model (which does not see that each tile column
    then streams the whole input: the margin covers that) and leaves two tasks per core at least;
    only with a tail, whose parts write back in
    a pass of their own (whole tiles computing the write-back at each tile gave wrong values)."""
    if rows is None or not tails or not tiling.tail_rows or any(k is None for k in facts.out_dims):
        return None
    at = facts.out_dims.index(rows)
    outer = facts.out_dims[at - 1] if at > 0 else None
    if outer is None or outer == vec or facts.reduction[outer] or facts.extents[outer] < 2:
        return None
    if any(a.uses(outer) != a.uses(rows) for a in facts.reads):
        return None
    try:
        fused = choose_tiles(_fused_facts(facts, outer, rows), vec, rows, cpu, tails, rank)
    except NotApplicable:  # fewer tiles over the fused rows than ``rank``
        return None
    if fused.tasks < 2 * cpu.cores or fused.cycles > tiling.cycles * (1 - PIXEL_GAIN):
        return None
    if not fused.tail_rows:  # whole tiles write back under their own loop, where TVM 0.27 covers a tile
        return None          # that crosses output rows wrongly (42 = 6x7 outputs: wrong values)
    return outer, fused


def _fused_facts(facts: BlockFacts, outer: int, rows: int) -> BlockFacts:
    """``facts`` as :func:`choose_tiles` sees them with ``outer`` and ``rows`` run as one axis."""
    extents = list(facts.extents)
    extents[rows], extents[outer] = extents[rows] * extents[outer], 1
    return replace(facts, extents=tuple(extents))


def fuse_rows(sch: s_tir.Schedule, block, facts: BlockFacts, outer: int, rows: int) -> BlockFacts:
    """Run ``block`` over ``outer`` and ``rows`` as one iterator (``outer * rows_extent + rows``),
    and store its output (the write-back's buffer, already cached) with the two dimensions as one;
    the block's own indices of its inputs become ``p // W`` and ``p % W``. Returns the new facts."""
    width = facts.extents[rows]
    at = facts.out_dims.index(rows)
    dtype = str(sch.get(block).iter_vars[0].var.ty)
    sch.transform_layout(block, ("write", 0), IndexMap.from_func(
        lambda *i: (*i[:at - 1], i[at - 1] * width + i[at], *i[at + 1:]), ndim=len(facts.out_dims),
        index_dtype=dtype))
    sch.transform_block_layout(block, IndexMap.from_func(
        lambda *v: tuple(v[outer] * width + v[rows] if k == outer else v[k] for k in range(len(v)) if k != rows),
        ndim=len(facts.extents), index_dtype=dtype))
    return block_facts(sch, block)


__all__ = ["PIXEL_GAIN", "fuse_rows", "pixel_rows"]
