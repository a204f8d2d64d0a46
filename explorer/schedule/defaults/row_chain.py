"""The default for a kernel that reduces rows and then maps them (layer norm, a mean subtracted):
every block computed row by row inside one parallel loop over the rows.

Block by block (:func:`explorer.schedule.defaults.simple.schedule_rows` and ``schedule_spatial``)
each pass over the tensor is a parallel loop of its own (or a serial one, below
:data:`~explorer.schedule.defaults.analysis.PARALLEL_MIN_VOLUME` each), and a row is read from
memory once per pass. Here the output block's rows are the loop and the blocks before it are
computed at each row (``compute_at``): the row is still in the L1 cache when the output reads it
and the threads meet once. Inside a row, a reduction accumulates a vector of partial results
(``rfactor``) and the output is vectorized. Layer norm over 256 x 96 ran in 4.9 us against 5.7
block by block, a mean subtracted 2.1 against 3.4 (2 threads, a loaded machine, alternated rounds).

A chain with a whole row of intermediates between its reductions (softmax's exponentials, read by
the sum and by the output) is left to the block-by-block rules: row by row it measured slower
(0.40 ms against 0.30 on ``[4, 256, 256]``, same conditions)."""

from __future__ import annotations

import math

from tvm import s_tir

from explorer.schedule.defaults.analysis import PARALLEL_MIN_VOLUME, BlockFacts, NotApplicable, block_facts, root_blocks
from explorer.schedule.defaults.machine import CpuSpec


# Rows of fewer vectors stay block by block: layer norm over 16 rows of 64 float32 took 0.38 us row by
# row against 0.33 (4 vectors a row), over 64 float16 0.73 against 0.38 (2); 96 float32 (6) gained.
MIN_VECTORS = 6


def _long(extents) -> tuple[int, ...]:
    return tuple(e for e in extents if e != 1)


def _row_shape(facts: BlockFacts) -> tuple[tuple[int, ...], int]:
    """(the extents of the rows, the row length) a block iterates over: a reduction's spatial
    iterators and its one reduction iterator, an elementwise block's iterators but the last."""
    if facts.is_spatial:
        return _long(facts.extents[:-1]), facts.extents[-1]
    (k,) = facts.reduce
    return _long(facts.extents[i] for i in facts.spatial), facts.extents[k]


def row_chain(sch: s_tir.Schedule, cpu: CpuSpec) -> list | None:
    """The root blocks if they are a row chain: the last block elementwise over ``rows x length``
    (``length`` whole vectors of ``cpu``, at least :data:`MIN_VECTORS`), at least one reduction over the rows'
    ``length`` innermost elements (one reduction iterator, last), the other blocks a row's scalars
    (layer norm's deviation); else None."""
    blocks = root_blocks(sch)
    if len(blocks) < 2:
        return None
    facts = [block_facts(sch, b) for b in blocks]
    last = facts[-1]
    if not last.is_spatial or not last.loops_match or not last.out_dims or last.out_dims[-1] != len(last.extents) - 1:
        return None
    rows, length = _row_shape(last)
    lanes = cpu.lanes(last.dtype)
    if length % lanes or length < MIN_VECTORS * lanes or not any(not f.is_spatial for f in facts):
        return None
    for f in facts[:-1]:
        if not f.loops_match:
            return None
        if f.is_spatial:  # a row's scalar (a whole row of intermediates: see the module docstring)
            if _long(f.extents) != rows:
                return None
        elif len(f.reduce) != 1 or f.reduce[0] != len(f.extents) - 1 or _row_shape(f) != (rows, length):
            return None
    return blocks


def _reduce_in_vectors(sch: s_tir.Schedule, block, lanes: int):
    """Split the reduction ``block`` (at the root, under its own loops) into a vector of partial
    results (``rfactor``, in registers) and their sum; the partial results' block."""
    loops = sch.get_loops(block)
    _, lane = sch.split(loops[-1], [None, lanes])
    partial = sch.rfactor(lane, factor_axis=len(sch.get(block).writes[0].region))  # the lanes innermost
    sch.set_scope(partial, 0, "local")
    return partial


def schedule_row_chain(sch: s_tir.Schedule, cpu: CpuSpec) -> list[str]:
    """Schedule a :func:`row_chain` kernel (see the module docstring); the steps.

    Raises :class:`NotApplicable` before changing anything when the kernel is not one."""
    blocks = row_chain(sch, cpu)
    if blocks is None:
        raise NotApplicable("not a chain of row reductions and maps")
    facts = [block_facts(sch, b) for b in blocks]
    last = facts[-1]
    rows, length = _row_shape(last)
    lanes = cpu.lanes(last.dtype)
    partials = {}
    for block, f in zip(blocks, facts):
        if not f.is_spatial:
            partials[f.name] = _reduce_in_vectors(sch, block, lanes)
    out_loops = sch.get_loops(blocks[-1])
    row = sch.fuse(*out_loops[:-1]) if len(out_loops) > 2 else out_loops[0]
    sch.vectorize(sch.split(out_loops[-1], [None, lanes])[1])
    for block, f in reversed(list(zip(blocks[:-1], facts[:-1]))):
        sch.compute_at(block, row, preserve_unit_loops=False)
        if f.name in partials:
            sch.compute_at(partials[f.name], row, preserve_unit_loops=False)
    steps = []
    for f in facts[:-1]:
        if f.name in partials:  # the whole vectors, then the lanes innermost (vectorized)
            # compute_at made the loops in the partial block's iterator order: the row, its lanes
            # (the iterator rfactor adds first), the whole vectors
            _, lane, whole = sch.get_loops(partials[f.name])
            sch.reorder(whole, lane)
            sch.vectorize(lane)
            steps.append(f"row by row ({f.name}, {lanes} partial results in a vector)")
        else:  # a row's scalar (layer norm's deviation): one value a row, no loop of its own
            steps.append(f"row by row ({f.name})")
    parallel = last.volume >= PARALLEL_MIN_VOLUME and math.prod(rows) > 1
    if parallel:
        sch.parallel(row)
    steps.append(f"{'parallel ' if parallel else ''}rows of {length}, one loop ({last.name})")
    return steps


__all__ = ["MIN_VECTORS", "row_chain", "schedule_row_chain"]
