"""The default for a kernel that reduces rows and then maps them (layer norm, a mean subtracted,
softmax): every block computed row by row inside one parallel loop over the rows.

Block by block (:func:`explorer.schedule.defaults.simple.schedule_rows` and ``schedule_spatial``)
each pass over the tensor is a parallel loop of its own (or a serial one, below
:data:`~explorer.schedule.defaults.analysis.PARALLEL_MIN_VOLUME` each), and a row is read from
memory once per pass. Here the output block's rows are the loop and the blocks before it are
computed at each row (``compute_at``): the row is still in the L1 cache when the output reads it
and the threads meet once. Inside a row, a reduction accumulates a vector of partial results
(``rfactor``) summed as a tree of halves, a whole row of intermediates (softmax's exponentials,
read by the sum and by the output) is computed once in vectors into a row buffer (on the stack up
to 1 KiB, else the runtime's workspace, once a row), and the output is vectorized. Layer norm over
256 x 96 ran in 3.7 us against 9.1 block by block, softmax over BERT's 12 x 128 x 128 in 87 us
against 125, over 4 x 256 x 256 (SVTR) 0.83x, over rows of 4096 0.64x (2 threads, a busy machine,
alternated rounds). Recomputing the exponentials in the sum and the output instead of keeping
the row measured 1.15-1.56x slower."""

from __future__ import annotations

import math

from tvm import s_tir

from explorer.schedule.defaults.analysis import PARALLEL_MIN_VOLUME, BlockFacts, NotApplicable, block_facts, root_blocks
from explorer.schedule.defaults.machine import CpuSpec


# Rows of fewer vectors stay block by block (a row of one vector has no loop of vectors to reduce).
# With the partial results on the stack and summed as a tree, rows of 2 vectors and more gained:
# layer norm over 256 x 32 float32 took 1.7 us row by row against 3.6 block by block, 256 x 64 2.5
# against 4.6, over 256 x 64 float16 3.8 against 5.2; softmax over 12 x 256 x 32 53 us against 78 (2
# threads, busy machine, alternated).
MIN_VECTORS = 2


def _long(extents) -> tuple[int, ...]:
    return tuple(e for e in extents if e != 1)


def _row_shape(facts: BlockFacts) -> tuple[tuple[int, ...], int]:
    """(the extents of the rows, the row length) a block iterates over: a reduction's spatial
    iterators and its one reduction iterator, an elementwise block's iterators but the last."""
    if facts.is_spatial:
        return _long(facts.extents[:-1]), facts.extents[-1]
    (k,) = facts.reduce
    return _long(facts.extents[i] for i in facts.spatial), facts.extents[k]


def _whole_row(facts: BlockFacts, rows: tuple[int, ...], length: int) -> bool:
    """Whether an elementwise block writes whole rows of the chain, innermost contiguous."""
    return (bool(facts.out_dims) and facts.out_dims[-1] == len(facts.extents) - 1
            and _row_shape(facts) == (rows, length))


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
        if f.is_spatial:  # a row's scalar (layer norm's deviation) or a whole row (softmax's exponentials)
            if _long(f.extents) != rows and not _whole_row(f, rows, length):
                return None
        elif len(f.reduce) != 1 or f.reduce[0] != len(f.extents) - 1 or _row_shape(f) != (rows, length):
            return None
    return blocks


def _reduce_in_vectors(sch: s_tir.Schedule, block, lanes: int) -> list:
    """Split the reduction ``block`` (at the root, under its own loops) into a vector of partial
    results (``rfactor``) and their sum, the sum as a tree of halves (``rfactor`` again: one
    vector operation a level where a chain of scalar ones waits on each other); the blocks that
    make the partial results, the vector first, then the levels of the tree.

    Their buffers stay "global": under the row loop a buffer of a vector is an alloca that LLVM
    keeps in a register, where "local" takes it from the runtime's workspace pool (an allocate
    and a free call) for every row."""
    loops = sch.get_loops(block)
    _, lane = sch.split(loops[-1], [None, lanes])
    axis = len(sch.get(block).writes[0].region)
    made = [sch.rfactor(lane, factor_axis=axis)]  # the lanes innermost
    width = lanes
    while width > 2 and width % 2 == 0:
        _, half = sch.split(sch.get_loops(block)[-1], [2, width // 2])
        made.append(sch.rfactor(half, factor_axis=axis))
        width //= 2
    return made


def schedule_row_chain(sch: s_tir.Schedule, cpu: CpuSpec, blocks: list | None = None) -> list[str]:
    """Schedule a :func:`row_chain` kernel (see the module docstring); the steps. ``blocks``:
    :func:`row_chain`'s answer where the caller has it already (else asked here).

    Raises :class:`NotApplicable` before changing anything when the kernel is not one."""
    blocks = row_chain(sch, cpu) if blocks is None else blocks
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
        for made in reversed(partials.get(f.name, [])):
            sch.compute_at(made, row, preserve_unit_loops=False)
    steps = []
    for block, f in zip(blocks[:-1], facts[:-1]):
        if f.name in partials:  # the whole vectors, then the lanes innermost (vectorized)
            # compute_at made the loops in the partial block's iterator order: the row, its lanes
            # (the iterator rfactor adds first), the whole vectors
            for made in partials[f.name]:
                _, lane, whole = sch.get_loops(made)
                sch.reorder(whole, lane)
                sch.vectorize(lane)
            steps.append(f"row by row ({f.name}, {lanes} partial results in a vector)")
        elif _whole_row(f, rows, length):  # a row of intermediates: in vectors, on the stack or in registers
            whole = sch.get_loops(block)[-1]
            sch.vectorize(sch.split(whole, [None, lanes])[1])
            steps.append(f"row by row ({f.name}, vectorized)")
        else:  # a row's scalar (layer norm's deviation): one value a row, no loop of its own
            steps.append(f"row by row ({f.name})")
    parallel = last.volume >= PARALLEL_MIN_VOLUME and math.prod(rows) > 1
    if parallel:
        sch.parallel(row)
    steps.append(f"{'parallel ' if parallel else ''}rows of {length}, one loop ({last.name})")
    return steps


__all__ = ["MIN_VECTORS", "row_chain", "schedule_row_chain"]
