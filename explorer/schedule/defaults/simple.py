"""Defaults for the blocks that are not a tiled reduction, and the safe fallback.

- :func:`schedule_spatial`: an injective block (elementwise, broadcast, transpose, padding):
  its loops fused into one, cut into vectors of the target's lanes (vectorized) and the rest run
  in parallel; where a vector would cross a broadcast operand's run, the end of a row that a
  read takes contiguously (:mod:`.strides`: attention heads split off a matrix) or read a channel
  shuffle's ``c % d``, ``c // d`` lane by lane, rows that LLVM vectorizes instead; where rows no
  vector divides lie under two or more other axes, only the two innermost axes are vectorized
  as one loop (TVM cannot fold a third level of ``// e``, ``% e`` back into a contiguous index);
  an NCHW image padded into a few NHWC channels runs by rows, LLVM vectorizing each row's pixels;
- :func:`schedule_rows`: a reduction without a vector axis (softmax's and layer norm's row
  reductions, a sum over the innermost axis, a min over a whole tensor): the spatial loops in
  parallel; where the innermost reduction reads at least two vectors contiguously, it
  accumulates a vector of partial results (``rfactor``: LLVM does not reorder a float reduction
  itself) reduced once at the end, a tail shorter than a vector after the whole ones (a
  dynamically quantized BERT's min and max 15x faster, layer norm 7x, wav2vec2's group norm over
  1599 steps 8x), else it stays serial;
- :func:`safe_schedule`: what any block takes: its outermost loop in parallel and its innermost
  loop vectorized when TVM agrees that they are data parallel.
"""

from __future__ import annotations

import math

from tvm import s_tir

from explorer.schedule.defaults.analysis import (PARALLEL_MIN_VOLUME, BlockFacts, NotApplicable, block_facts,
                                                  partial_rows)
from explorer.schedule.defaults.machine import CpuSpec
from explorer.schedule.defaults.strides import contiguous_run, read_strides
from explorer.schedule.defaults.transpose_blocks import blocked_transpose


def _vector_factor(extent: int, lanes: int) -> int:
    """Lanes if they divide ``extent``, else the largest divisor of it within the lanes (1: none)."""
    if extent % lanes == 0:
        return lanes
    return max((d for d in range(2, lanes + 1) if extent % d == 0), default=1)


def aligned_run(facts: BlockFacts) -> int | None:
    """How many consecutive iterations of the block's fused loop every operand reads either
    contiguously or as one element; None where all do so everywhere (same shape as the output, or a
    scalar). A broadcast operand changes pattern at a run's end: a bias over 136 channels read
    inside 16-lane vectors of the fused loop is gathered lane by lane (``% 136`` indices, one
    ``vpextrd``/``vinsertps`` per lane), so no vector may cross a run (:func:`schedule_spatial`)."""
    dims = [k for k, e in enumerate(facts.extents) if e > 1]
    run = None
    for access in facts.reads:
        if access.divided and max(access.divided) < len(facts.extents) - 1:
            # contiguous within the iterators inside the innermost divided one (an NCHW plane)
            length = math.prod(facts.extents[max(access.divided) + 1:])
            run = length if run is None else math.gcd(run, length)
        used = [access.uses(k) for k in dims]
        if all(used) or not any(used):
            continue
        length = 1
        for k, u in zip(reversed(dims), reversed(used)):
            if u != used[-1]:
                break
            length *= facts.extents[k]
        run = length if run is None else math.gcd(run, length)
    return run


def schedule_spatial(sch: s_tir.Schedule, block, cpu: CpuSpec) -> str:
    """Fuse, vectorize by lanes, parallel outside (see the module docstring)."""
    facts = block_facts(sch, block)
    if not facts.is_spatial or not facts.loops_match:
        raise NotApplicable("not a plain spatial block")
    loops = sch.get_loops(block)
    if not loops:
        return f"scalar ({facts.name})"
    inner = len(loops) - 1
    contiguous = bool(facts.out_dims) and facts.out_dims[-1] == inner
    if contiguous and any(a.uses(inner) and inner not in a.last for a in facts.reads):
        # a transpose: vectors would be gathered (NCHW -> NHWC of a 3-channel image: 10x slower
        # than the loop nest); the outer loops in parallel, the innermost left to LLVM
        along = _read_row_axis(facts, inner, cpu)
        if along is not None:
            return _transpose_by_read_rows(sch, facts, loops, inner, along, cpu)
        if _padded_image(facts, inner):
            return _padded_image_by_rows(sch, facts, loops)
        blocked = blocked_transpose(sch, facts, loops, inner, cpu)
        if blocked:
            return blocked
        if len(loops) > 1 and facts.volume >= PARALLEL_MIN_VOLUME:
            sch.parallel(sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0])
        return f"parallel transpose ({facts.name})"
    lanes = cpu.lanes(facts.dtype)
    # an operand read at ``c // d`` and ``c % d`` of the innermost iterator (a channel shuffle's
    # ``c % 4 * 34 + c // 4``, a nearest upsampling's ``x // 2``), not a reshape's ``(j // 10, j % 10)``
    # whose flat offset is linear in the iterators
    divisors = {d for a, strides in zip(facts.reads, read_strides(sch, block)) if strides is None
                for k, d in a.groups if k == inner and d < facts.extents[inner]}
    step = math.gcd(*divisors) if divisors else 0
    if contiguous and step > 1 and step % lanes and facts.extents[inner] % step == 0:
        # vectors over the fused loops would compute every lane's index and gather (ShuffleNet v1's
        # channel shuffle: 50 us for 28x28x136); the innermost loop cut at the divisor gives LLVM
        # affine indices, the rest in parallel
        sch.split(loops[-1], [None, step])
        if len(loops) > 1 and facts.volume >= PARALLEL_MIN_VOLUME:
            sch.parallel(sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0])
        return f"parallel rows of {facts.extents[inner]} in steps of {step} ({facts.name})"
    if contiguous and facts.padding and facts.extents[inner] % lanes and len(loops) > 1:
        # a padding whose innermost rows are shorter than a vector or not a multiple of one (a
        # 3-channel image): vectors across pixels test the border and compute the indices lane by
        # lane (MobileNetV3's 226x226x3 stem padding: 0.43 ms of its 0.50-ms kernel). The two
        # innermost axes run as one loop for LLVM (0.13 -> 0.07 ms against the innermost alone),
        # the rest in parallel.
        sch.fuse(*loops[-2:])
        if len(loops) > 2 and facts.volume >= PARALLEL_MIN_VOLUME:
            sch.parallel(sch.fuse(*loops[:-2]) if len(loops) > 3 else loops[0])
        return f"parallel rows of {facts.extents[inner - 1]}x{facts.extents[inner]} ({facts.name})"
    written, partial = partial_rows(sch, block, facts)
    if partial > 0 and written == inner and not facts.padding:
        # rows of a slice of a buffer (a concatenation's copy, a strided slice): the loops from the
        # innermost partial one inwards run as one contiguous vectorized row, the rest in parallel
        # (and the row's vectors in parallel too where few rows do not feed the cores: a channel
        # slice of NCHW has one image above it; otherwise a row stays one loop for each thread)
        row = sch.fuse(*loops[partial:]) if len(loops) - partial > 1 else loops[partial]
        length = math.prod(facts.extents[partial:])
        factor = _vector_factor(length, lanes)
        outside = list(loops[:partial])
        if factor > 1 and length > factor:
            row_outer, vec = sch.split(row, [None, factor])
            sch.vectorize(vec)
            if math.prod(facts.extents[:partial]) < 4 * cpu.cores:
                outside.append(row_outer)
        elif factor > 1:
            sch.vectorize(row)
        parallel = facts.volume >= PARALLEL_MIN_VOLUME
        if parallel:
            sch.parallel(sch.fuse(*outside) if len(outside) > 1 else outside[0])
        return f"{'parallel ' if parallel else ''}rows of {length} x{factor} ({facts.name})"
    aligned = aligned_run(facts)
    strided = contiguous_run(sch, block, facts) if contiguous else None
    if strided == 1 and len(loops) > 1:
        # a transpose that only the simplified indices show (an inlined reshape's ``(h * 32 + w)
        # // 256 + c``): as above, the innermost loop left to LLVM
        blocked = blocked_transpose(sch, facts, loops, inner, cpu)
        if blocked:
            return blocked
        if facts.volume >= PARALLEL_MIN_VOLUME:
            sch.parallel(sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0])
        return f"parallel transpose ({facts.name})"
    # (a broadcast operand's runs shorter than a vector are crossed: its few scalars gathered cost
    # less than rows that short; a softmax's exponentials over rows of 8 ran 1.5x slower by rows)
    run = _shorter_run(aligned if aligned is not None and aligned > lanes else None, strided)
    if run is not None and run > 1 and run % lanes and (contiguous or written == inner):
        # a broadcast operand whose runs no whole vectors fill (a bias over 136 channels), or rows
        # read apart (attention heads split off a [tokens, 3 x heads x 24] matrix: rows of 24): the
        # loops of one run are one row that LLVM vectorizes with a remainder of its own, the rows
        # in parallel
        start, length = len(loops), 1
        while start > 0 and length < run:
            start -= 1
            length *= facts.extents[start]
        if length == run:
            if len(loops) - start > 1:
                sch.fuse(*loops[start:])
            parallel = start > 0 and facts.volume >= PARALLEL_MIN_VOLUME
            if parallel:
                sch.parallel(sch.fuse(*loops[:start]) if start > 1 else loops[0])
            return f"{'parallel ' if parallel else ''}rows of {run} ({facts.name})"
    start = _vector_rows_start(facts, lanes) if contiguous or written == inner else 0
    if start:
        # rows whose length no vector divides under two or more other axes (a [4, 256, 24] slice
        # of attention heads): vectors over all the loops as one would take their indices apart
        # lane by lane (TVM folds ``x // 24 * 24 + x % 24`` back into ``x``, not a third level:
        # 28 us against 2 us); the rows' two innermost axes are the vectorized loop, the rest outside
        row = sch.fuse(*loops[start:])
        length = math.prod(facts.extents[start:])
        row_outer, vec = sch.split(row, [None, lanes])
        sch.vectorize(vec)
        parallel = facts.volume >= PARALLEL_MIN_VOLUME
        if parallel:
            sch.parallel(sch.fuse(*loops[:start], row_outer))
        return f"{'parallel ' if parallel else ''}rows of {length} x{lanes} ({facts.name})"
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    total = facts.volume
    factor = _vector_factor(total, lanes) if contiguous or written == inner else 1
    outer = fused
    if factor > 1 and total > factor:
        outer, inner = sch.split(fused, [None, factor])
        sch.vectorize(inner)
    elif factor > 1:
        sch.vectorize(fused)
        return f"vectorized ({facts.name})"
    if total >= PARALLEL_MIN_VOLUME:
        sch.parallel(outer)
    return f"parallel x{factor} ({facts.name})"


def _shorter_run(a: int | None, b: int | None) -> int | None:
    """The run both ``a`` and ``b`` allow (None: no limit)."""
    return b if a is None else a if b is None else math.gcd(a, b)


def _vector_rows_start(facts: BlockFacts, lanes: int) -> int:
    """Where the loops of the vectorized rows start (see :func:`schedule_spatial`'s last case): the
    second innermost axis longer than 1, where the innermost one is not a multiple of the lanes,
    the two make whole vectors and another axis longer than 1 is outside them; else 0 (all loops)."""
    long_axes = [k for k, e in enumerate(facts.extents) if e > 1]
    if len(long_axes) < 3 or facts.extents[long_axes[-1]] % lanes == 0:
        return 0
    start = long_axes[-2]
    return start if math.prod(facts.extents[start:]) % lanes == 0 else 0


# A transpose's innermost output axis short enough to unroll around vectors along the rows it reads
# (an image's 3 or 4 channels); and the longest such row that is one vector (LLVM splits it into
# registers) where the CPU's vectors do not divide it (a padded 64-pixel row: 66).
SHORT_CHANNELS = 4
WHOLE_ROW_MAX = 128


def _read_row_axis(facts: BlockFacts, inner: int, cpu: CpuSpec) -> int | None:
    """The iterator along which every transposed read is contiguous, where the block computes
    something costly per value (a quantization's rounding: plain copies gain nothing, a padded one
    lost 40%), the output's innermost axis ``inner`` is a few channels (:data:`SHORT_CHANNELS`)
    and that iterator's rows are whole vectors or one short row (:data:`WHOLE_ROW_MAX`); else None."""
    if not facts.costly or facts.extents[inner] > SHORT_CHANNELS:
        return None
    transposed = [a for a in facts.reads if a.uses(inner) and inner not in a.last]
    rows = {k for a in transposed for k in a.last}
    if len(rows) != 1 or any(len(a.last) != 1 for a in transposed):
        return None
    (k,) = rows
    lanes = cpu.lanes("float32")
    if k == inner or facts.extents[k] < lanes:
        return None
    if facts.extents[k] % lanes and facts.extents[k] > WHOLE_ROW_MAX:
        return None
    return k


def _transpose_by_read_rows(sch: s_tir.Schedule, facts: BlockFacts, loops, inner: int, along: int,
                            cpu: CpuSpec) -> str:
    """NCHW -> NHWC of a few channels (an image quantized, transposed and padded for an int8
    convolution): the read rows vectorized (the quantization's float arithmetic in vectors, the
    reads contiguous), the channels unrolled around them (their border tests constants), each
    vector written lane by lane; the other loops fused and in parallel (docs/notes/measurements.md,
    "Small int8 CNNs")."""
    lanes = cpu.lanes("float32")
    row, channels = loops[along], loops[inner]
    rest = [loop for k, loop in enumerate(loops) if k not in (along, inner)]
    sch.reorder(*rest, channels, row)
    if facts.extents[along] % lanes == 0 and facts.extents[along] > lanes:
        row, vector = sch.split(row, [None, lanes])
        sch.reorder(row, channels, vector)
        row_note = f"vectors of {lanes}"
    else:
        vector = row
        row_note = "one vector"
    sch.vectorize(vector)
    sch.unroll(channels)
    parallel = bool(rest) and facts.volume >= PARALLEL_MIN_VOLUME
    if parallel:
        sch.parallel(sch.fuse(*rest) if len(rest) > 1 else rest[0])
    return (f"{'parallel ' if parallel else ''}transpose: rows of {facts.extents[along]} read as {row_note}, "
            f"{facts.extents[inner]} channels unrolled ({facts.name})")


def _padded_image(facts: BlockFacts, inner: int) -> bool:
    """Whether the block pads and transposes an image into a few channels (:data:`SHORT_CHANNELS`), every
    transposed read contiguous along the output's pixels (the axis before the channels): an NCHW model's
    input in the padding of its first NHWC convolution (:mod:`explorer.passes.layout_into_conv`)."""
    if not facts.padding or inner < 3 or facts.extents[inner] > SHORT_CHANNELS:  # (rows of an image: a 1-D
        # conv's [n, w, c] would leave only its batch to run in parallel)
        return False
    transposed = [a for a in facts.reads if a.uses(inner) and inner not in a.last]
    return bool(transposed) and all(a.last == frozenset({inner - 1}) for a in transposed)


def _padded_image_by_rows(sch: s_tir.Schedule, facts: BlockFacts, loops) -> str:
    """A padded image's rows in parallel, each row's pixels one loop left to LLVM, the channels unrolled
    inside it: LLVM vectorizes the pixels (loads contiguous along each channel's row, the stores
    interleaved by permutes). As one parallel loop over rows and pixels (the plain transpose's rule),
    each pixel's row and column came from a division and the copy stayed scalar. Measured (Intel Xeon
    KVM guest, AVX-512; the kernels alone, 1 thread, CPU time, 15-21 alternated rounds, load 1-2.7):
    MobileNetV2's stem (226 x 226 x 3 padded from NCHW, then its 3x3 stride-2 conv) 0.194 ms as a
    transpose and a conv, 0.221 as one kernel scheduled as a transpose (1.13x), 0.163 by rows (0.82x);
    ResNet-18's 7x7 stem 0.996x (its conv's time dominates)."""
    outer = loops[:-2]
    sch.unroll(loops[-1])
    parallel = facts.volume >= PARALLEL_MIN_VOLUME
    if parallel:
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
    return (f"{'parallel ' if parallel else ''}padded image by rows: {facts.extents[-2]} pixels a row, "
            f"{facts.extents[-1]} channels unrolled ({facts.name})")


def schedule_rows(sch: s_tir.Schedule, block, cpu: CpuSpec) -> str:
    """Spatial loops first and in parallel, the reduction serial inside."""
    facts = block_facts(sch, block)
    if facts.is_spatial or not facts.loops_match:
        raise NotApplicable("not a reduction under its own loops")
    loops = sch.get_loops(block)
    spatial = [loops[k] for k in facts.spatial]
    reduce = [loops[k] for k in facts.reduce]
    sch.reorder(*spatial, *reduce)
    lanes = _reduction_lanes(facts, cpu) if _one_output(sch, block) else 0
    how = ""
    if lanes:
        reduce = [*reduce[:-1], *sch.split(reduce[-1], [None, lanes])]
        try:
            partial = sch.rfactor(reduce[-1], factor_axis=len(facts.out_dims))
        except s_tir.ScheduleError:  # a reduction rfactor does not take (several outputs): serial
            return _rows_serial(sch, facts, spatial, "")
        loops = sch.get_loops(partial)  # the rows, other reductions, whole vectors, lanes
        sch.vectorize(loops[-1])
        # the partial results stay "global": under the row loop a buffer of a vector is then an
        # alloca that LLVM keeps in a register, where "local" takes it from the runtime's
        # workspace pool (an allocate and a free call) for every row (step_notes)
        how = f", {lanes} partial results in a vector"
        rows = loops[:len(spatial)]
        row = None
        if rows:
            # each row: its vector of partial results, then their sum, in one parallel loop (the
            # rows' work is in the partial results; their sums alone are a few adds a row)
            row = sch.fuse(*rows) if len(rows) > 1 else rows[0]
            try:
                sch.reverse_compute_at(block, row)
            except s_tir.ScheduleError:
                how += ", sums apart"  # the rows' partial results in parallel, their few sums serial
        extent = facts.extents[facts.reduce[-1]]
        if extent % lanes:
            # a tail shorter than a vector: the whole vectors run unpredicated, the tail after
            # them (a predicated vector loop is made scalar: 3x slower). The initialisation goes
            # first, so that the two parts of the loop only add.
            sch.decompose_reduction(partial, loops[len(rows)])
            sch.loop_partition(loops[-2], [extent // lanes, None])
            how += " and a scalar tail"
        if row is not None:
            return _rows_serial(sch, facts, [row], how)
    return _rows_serial(sch, facts, spatial, how)


def _one_output(sch: s_tir.Schedule, block) -> bool:
    """Whether ``block`` reduces into one buffer. An argmax/argmin reduces into two at once (index,
    value): its vector partial results and their scalar tail compiled to IR that TVM 0.27 refuses
    ("Trying to update var ... with a different value": CLIP's pooler, an argmax over the tokens,
    failed the whole export), so it stays serial."""
    return len(sch.get(block).writes) == 1


def _reduction_lanes(facts: BlockFacts, cpu: CpuSpec) -> int:
    """Lanes to reduce in parallel partial results (rfactor): where the innermost reduction runs
    over at least a vector read contiguously, and the whole reduction over at least two (the outer
    reductions add into the same vector: a one-channel convolution's 7 taps x 16 channels; a tail
    shorter than a vector is done apart), else 0 (left serial)."""
    if not facts.reduce or not facts.dtype.startswith("float"):
        return 0
    inner, lanes = facts.reduce[-1], cpu.lanes(facts.dtype)
    extent = facts.extents[inner]
    if lanes < 2 or extent < lanes or math.prod(facts.extents[k] for k in facts.reduce) < 2 * lanes:
        return 0
    if any(a.uses(inner) and (inner not in a.last or len(a.last) > 1 or a.groups) for a in facts.reads):
        return 0  # not contiguous along it: a vector would gather
    return lanes


def _rows_serial(sch: s_tir.Schedule, facts: BlockFacts, spatial: list, how: str) -> str:
    if not spatial:
        return f"serial reduction ({facts.name}{how})"
    fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    if facts.volume >= PARALLEL_MIN_VOLUME and math.prod(facts.extents[k] for k in facts.spatial) > 1:
        sch.parallel(fused)
    return f"parallel rows ({facts.name}{how})"


def safe_schedule(sch: s_tir.Schedule, block, cpu: CpuSpec) -> str:
    """Outermost loop parallel, innermost vectorized (by lanes), each only where TVM accepts it."""
    facts = block_facts(sch, block)
    loops = sch.get_loops(block)
    done = []
    if not loops:
        return f"unchanged ({facts.name})"
    if facts.is_spatial and facts.out_dims and len(loops) > 1:
        inner = loops[-1]
        extent = facts.extents[-1] if facts.loops_match else 0
        factor = _vector_factor(extent, cpu.lanes(facts.dtype)) if extent else 1
        if factor > 1:
            try:
                _, vec = sch.split(inner, [None, factor])
                sch.vectorize(vec)
                done.append("vectorized")
            except s_tir.ScheduleError:
                pass
    if facts.volume >= PARALLEL_MIN_VOLUME:
        try:
            sch.parallel(loops[0])
            done.append("parallel")
        except s_tir.ScheduleError:
            pass
    return f"{'+'.join(done) or 'unchanged'} ({facts.name})"


def schedule_plain(sch: s_tir.Schedule, block, cpu: CpuSpec) -> str:
    """A block that gets no register tile: fused and vectorized if spatial, by rows if a
    reduction, else the safe schedule."""
    rule = schedule_spatial if block_facts(sch, block).is_spatial else schedule_rows
    try:
        return rule(sch, block, cpu)
    except NotApplicable:
        return safe_schedule(sch, block, cpu)


__all__ = ["safe_schedule", "schedule_plain", "schedule_rows", "schedule_spatial"]
