"""How far a spatial block's innermost loops may run as one vector: the element strides of every
buffer it reads and writes along each iterator, and the run of innermost iterators over which
each access is contiguous (or one element).

A vector of the fused loops that crosses the end of such a run reads lane by lane: a reshape and
transpose of attention heads (``[256, 288] -> [3, 4, 256, 24]``: rows of 24 read 288 apart)
vectorized 16 at a time over the fused loops took 110 us where rows of 24 take 4. Read from the
block's indices simplified within its iterators' domains (an inlined reshape's ``(h * 24 + d)
// 288`` is 0 there); nothing here changes a schedule."""

from __future__ import annotations

import functools
import math
import operator

from tvm import s_tir, sym, tirx

from explorer.schedule.defaults.analysis import BlockFacts


def _int(x) -> int | None:
    return int(x.value) if isinstance(x, tirx.IntImm) else None


def access_strides(sch: s_tir.Schedule, block) -> list[tuple[int, ...] | None]:
    """Per buffer the block writes, then per buffer it reads: the element stride of the flattened
    buffer along each iterator, or None where an index is not linear in the iterators (a
    ``% c`` that the domains do not remove, a gather) or a shape is not constant."""
    blk = sch.get(block)
    return [_region_strides(region, blk.iter_vars) for region in blk.writes] + read_strides(sch, block)


def read_strides(sch: s_tir.Schedule, block) -> list[tuple[int, ...] | None]:
    """:func:`access_strides` of the buffers the block reads alone, in the order of its reads."""
    blk = sch.get(block)
    return [_region_strides(region, blk.iter_vars) for region in blk.reads]


def _region_strides(region, iters) -> tuple[int, ...] | None:
    """The element strides of one buffer region along each iterator (see :func:`access_strides`):
    read per dimension, or, where a dimension's index is not linear, from the flattened index: a
    reshape fused after an elementwise step reads ``[n, 3, 10]`` at ``(i, j // 10, j % 10)`` for
    output ``(i, j)`` of ``[n, 30]``, whose flat offset ``30 i + j`` is contiguous (TVM folds it back
    once the loops are fused: NeRF's sine kernel 546 -> 24 us vectorized over the fused loops)."""
    variables = [iv.var for iv in iters]
    analyzer = sym.Analyzer()
    for iv in iters:
        analyzer.bind(iv.var, iv.dom)
    shape = [_int(s) for s in region.source.shape]
    if None in shape or any(_int(r.extent) != 1 for r in region.region):
        return None
    strides = [0] * len(variables)
    for dim, rng in enumerate(region.region):
        coefficients = _linear(analyzer, rng.min, variables)
        if coefficients is None:
            break
        step = math.prod(shape[dim + 1:])
        for k, c in enumerate(coefficients):
            strides[k] += c * step
    else:
        return tuple(strides)
    terms = [rng.min * math.prod(shape[dim + 1:]) for dim, rng in enumerate(region.region)]
    coefficients = _linear(analyzer, functools.reduce(operator.add, terms), variables)  # (a 0-d region returned above)
    return tuple(coefficients) if coefficients is not None else None


def _linear(analyzer, index, variables) -> list[int] | None:
    """The constant coefficients of ``index`` (simplified within the iterators' domains) in
    ``variables``, or None where it is not linear in them."""
    coefficients = sym.detect_linear_equation(analyzer.simplify(index), variables)
    if len(coefficients) != len(variables) + 1 or any(_int(c) is None for c in coefficients[:-1]):
        return None
    return [_int(c) for c in coefficients[:-1]]


def contiguous_run(sch: s_tir.Schedule, block, facts: BlockFacts) -> int | None:
    """How many consecutive iterations of the block's fused loop every buffer it writes and reads
    takes contiguously (the product of the innermost iterators' extents where that holds),
    counting the buffers whose indices are linear in the iterators and step along the innermost
    one; None where it holds over the whole loop. A buffer read as one element along the innermost
    iterators (a row's maximum in softmax) limits no run here: a vector that crosses its runs
    gathers a few scalars, which measured cheaper than rows shorter than a vector
    (:func:`explorer.schedule.defaults.simple.aligned_run` keeps vectors within its runs longer
    than one). 1 where the innermost iterator itself is strided for some buffer (a transpose: no
    vector of the fused loop reads contiguously). Needs ``facts.loops_match`` (the loop order is
    the iterators' order)."""
    # an index that is not linear (a merge of heads: ``h // 64``, ``h % 64``) is left to the rules
    # that read its divisions (:func:`explorer.schedule.defaults.simple.schedule_spatial`)
    per_access = [s for s in access_strides(sch, block) if s is not None]
    expected: list[int | None] = [None] * len(per_access)  # the stride each access must have next
    run = 1
    for k in reversed(range(len(facts.extents))):
        extent = facts.extents[k]
        if extent == 1:
            continue
        for i, strides in enumerate(per_access):
            if expected[i] is None:  # the innermost iterator: contiguous or broadcast
                if strides[k] not in (0, 1):
                    return run
            elif expected[i] and strides[k] != expected[i]:
                return run
        for i, strides in enumerate(per_access):
            expected[i] = strides[k] * extent if expected[i] is None else expected[i] * extent
        run *= extent
    return None


__all__ = ["access_strides", "contiguous_run", "read_strides"]
