"""A product with fewer output columns than a vector, over many rows, as dot products along its
reduction: a NeRF's colour head (4096 points x 128 -> 3 colours), a token classifier's 2, 3, 5, 6 or 7
classes (on AVX-512 also 9 to 15 but 12): the column counts under a vector whose widest power-of-two
divisor is under 4, for which :func:`.layouts.few_channels_pixel_axis` vectorizes the rows. 4 or 8
columns keep their register tile, and a single column is a dot product per row already
(:func:`.simple.schedule_rows`).

A register tile vectorizes an output axis. Here the columns fill no vector, so
:func:`.layouts.few_channels_pixel_axis` vectorizes the rows instead, which the activations do not
lay out contiguously: the kernel copied them transposed on every call, a gather a value (NeRF's
head: 1.95 ms at 1 thread, 4.4 GFLOPS). Each output is instead a dot product along the reduction,
which the activations read contiguously: the weight is laid out with the reduction innermost once,
at build time, and :func:`.simple.schedule_rows` accumulates a vector of partial sums per output
(the same head: 0.066 ms at 1 thread for 4096 x 128 -> 3, Zen 5 VM, ``time_evaluator``).

Only a plain product: one reduction axis, one constant weight indexed by it and the columns, every
other operand that the reduction reads contiguous along it and independent of the columns, and
rows enough for a vector (a single row has its own one-row tile)."""

from __future__ import annotations

import math

from tvm import s_tir

from explorer.ir.tir_walk import LAYOUT_REWRITE_PREPROC
from explorer.schedule.defaults.analysis import BlockFacts
from explorer.schedule.defaults.layouts import innermost_output_axis, is_weight, permutation
from explorer.schedule.defaults.machine import CpuSpec
from explorer.schedule.defaults.simple import schedule_rows


def few_columns_weight(sch: s_tir.Schedule, block, facts: BlockFacts, cpu: CpuSpec) -> int | None:
    """The position among the block's reads of the weight a dot-product schedule lays out again
    (module docstring), or None where the block is no such product (checked whole here, so that the
    function stands alone: its caller has already seen the columns fill no vector)."""
    if not facts.dtype.startswith("float") or len(facts.reduce) != 1 or not facts.loops_match:
        return None
    lanes = cpu.lanes(facts.dtype)
    columns, (k,) = innermost_output_axis(facts), facts.reduce
    if columns is None or facts.extents[columns] >= lanes or facts.extents[k] < 2 * lanes:
        return None
    rows = math.prod(facts.extents[j] for j in facts.spatial if j != columns)
    if rows < lanes:
        return None
    regions = sch.get(block).reads
    weights = [i for i, a in enumerate(facts.reads) if a.uses(columns)]
    if len(weights) != 1 or not is_weight(sch, regions[weights[0]].source):
        return None
    weight = facts.reads[weights[0]]
    if sorted(len(d) for d in weight.dims if d) != [1, 1] or not (weight.uses(k) and weight.groups == ()):
        return None  # a plain [K, N] or [N, K] matrix: each dimension one iterator
    for i, access in enumerate(facts.reads):
        if i != weights[0] and access.uses(k) and (access.last != frozenset({k}) or access.groups):
            return None  # read across the reduction: its vectors would gather
    return weights[0]


def dot_product_rows(sch: s_tir.Schedule, block, facts: BlockFacts, weight: int, cpu: CpuSpec) -> str:
    """Lay the weight (read ``weight``, :func:`few_columns_weight`) out with the reduction innermost
    at build time, then each output's dot product with vector partial sums; returns a description."""
    (k,) = facts.reduce
    region = sch.get(block).reads[weight]
    rank = len(region.region)
    at = next(d for d, used in enumerate(facts.reads[weight].dims) if k in used)
    laid = ""
    if at != rank - 1:
        packed = sch.cache_read(block, weight, "global")
        sch.transform_layout(packed, ("write", 0), permutation([d for d in range(rank) if d != at] + [at]))
        sch.annotate(packed, LAYOUT_REWRITE_PREPROC, True)  # (a loop left plain: it runs once, at build time)
        laid = ", the weight laid out with the reduction innermost at build time"
    return f"dot products over {facts.extents[k]} for {facts.extents[innermost_output_axis(facts)]} columns" \
           f"{laid}: {schedule_rows(sch, block, cpu)}"


__all__ = ["dot_product_rows", "few_columns_weight"]
