"""A transpose of long rows in blocks: the output's innermost axis (``inner``, what the block writes
contiguously) against the axis that steps along the rows it reads (``k``, read contiguously).

Left to LLVM as one loop over ``inner`` under parallel outer loops, every value of ``inner`` reads
another row of the input: an NHWC -> NCHW transpose of 56 x 56 x 256 reads 56 values 1 KB apart
for each output row, and those lines, a power of two apart, share 4 of the L1 cache's 64 sets and
evict each other before the next channel reads them again (ResNeSt-14d's ReLU and transpose after
its split-attention convolution: 4.9 ms at one thread, against 0.56 ms for 128 channels, 512 B
apart). Here ``k`` is cut into blocks of a vector's lanes, and ``inner`` runs inside the block
with the lanes innermost: each value of ``inner`` reads one contiguous run of the row, and the
block's rows are written together (the same transpose: 0.40 ms).

Not where another read runs contiguously along ``inner`` (an add of an NCHW operand and a
transposed NHWC one: the blocks would read that operand across its rows instead), nor, where the
block runs in parallel, where the blocks and the other outer loops are fewer than the CPU's cores
(a 2-D transpose of 64 rows in 4 blocks of 16: the plain transpose's loops in parallel instead).
"""

from __future__ import annotations

from tvm import s_tir

from explorer.schedule.defaults.analysis import PARALLEL_MIN_VOLUME, BlockFacts
from explorer.schedule.defaults.machine import CpuSpec


def read_step_axis(facts: BlockFacts, inner: int, lanes: int) -> int | None:
    """The one iterator, other than ``inner``, that steps along the innermost index of every read
    that ``inner`` does not step (the innermost of them where a reshape's index steps with several:
    ``c1 * 128 + c2``), where ``inner`` and it are each at least a vector long, it is whole
    vectors and no other read uses ``inner`` in its innermost index (read along the output's
    rows); else None (no transpose of long rows)."""
    transposed = [a for a in facts.reads if a.uses(inner) and inner not in a.stepped]
    if not transposed or facts.extents[inner] < lanes:
        return None
    if any(inner in a.last for a in facts.reads if a not in transposed):
        return None
    axes = {max(a.stepped - {inner}, default=None) for a in transposed}
    if len(axes) != 1 or None in axes:
        return None
    (k,) = axes
    if k == inner or facts.extents[k] % lanes or facts.extents[k] <= lanes:
        return None
    return k


def blocked_transpose(sch: s_tir.Schedule, facts: BlockFacts, loops, inner: int, cpu: CpuSpec) -> str | None:
    """Schedule the block as the module docstring says and describe it; None (nothing done) where it
    is no transpose of long rows (:func:`read_step_axis`), or where it runs in parallel and its
    blocks and other outer loops are fewer than ``cpu.cores``."""
    lanes = cpu.lanes(facts.dtype)
    k = read_step_axis(facts, inner, lanes)
    if k is None:
        return None
    parallel = facts.volume >= PARALLEL_MIN_VOLUME
    if parallel and facts.volume // (facts.extents[inner] * lanes) < cpu.cores:
        return None
    block_loop, lane = sch.split(loops[k], [None, lanes])
    outer = [block_loop if j == k else loop for j, loop in enumerate(loops) if j != inner]
    sch.reorder(*outer, loops[inner], lane)
    if parallel:
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
    return (f"{'parallel ' if parallel else ''}transpose in blocks of {lanes} rows of {facts.extents[k]} "
            f"x {facts.extents[inner]} ({facts.name})")


__all__ = ["blocked_transpose", "read_step_axis"]
