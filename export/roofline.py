"""The roofline of a profiled kernel: the most its arithmetic intensity allows, its FLOPs per byte of
arguments times the bandwidth those bytes can move at (:class:`explorer.measure.memory_roof.MemoryRoof`:
as many as the L1 caches hold at theirs, the rest the L2 caches hold at theirs, the rest the L3
holds at its, the rest at memory's), at most its family's FLOP peak: the calibrated one, or the best
GFLOPS a kernel with a share of the time reached where that is higher (:func:`roofline_peak`).
"""

from __future__ import annotations

from explorer.measure.figure_check import MAX_RAISE
from explorer.measure.memory_roof import MemoryRoof

# a kernel's GFLOPS counts as the attained peak from this share of the kernels' time up (a short
# kernel's time is the least sure), and at most this many times the calibrated peak (beyond is a
# measurement gone wrong, not the machine)
PEAK_SHARE = 0.05
PEAK_CAP = MAX_RAISE


def roofline_bound(flops: int, nbytes: int, peak_gflops: float | None, memory: MemoryRoof | None) -> float | None:
    """What the roofline allows a kernel of ``flops`` over ``nbytes`` of arguments: its arithmetic
    intensity times the bandwidth its bytes can move at (``memory``'s tiers), at most the FLOP peak. A
    model's small max-pool reads what the convolution before it wrote to the L2 cache (against the
    large copy's bandwidth it read many times its roofline); a matrix-vector product over hundreds
    of MB of weights is bound by reading them from memory, far below the FLOP peak. None without
    both peaks, or without FLOPs."""
    from store.plots import roofline_ceiling

    if not peak_gflops or memory is None or not memory.memory_gbps or not flops:
        return None
    if not nbytes:
        return peak_gflops
    return roofline_ceiling(flops / nbytes, peak_gflops, memory.gbps_for(nbytes))


def roofline_gflops(task, peak_gflops: float | None, memory: MemoryRoof | None) -> float | None:
    """:func:`roofline_bound` of a task (its FLOPs and its arguments' bytes)."""
    from explorer.workload.keys import argument_bytes

    nbytes = argument_bytes(task.mod) if task.flops else 0
    return roofline_bound(task.flops, nbytes, peak_gflops, memory)


def roofline_peak(peak_gflops: float | None, kernels: list[tuple[float, float | None]]) -> float | None:
    """The FLOP peak of the rooflines: ``peak_gflops`` (calibrated), or the best GFLOPS among
    ``kernels`` (seconds, GFLOPS) that take :data:`PEAK_SHARE` of their time, where higher, up to
    :data:`PEAK_CAP` times the calibrated one."""
    if not peak_gflops:
        return None
    total = sum(seconds for seconds, _ in kernels)
    attained = max((g for seconds, g in kernels if g and seconds >= PEAK_SHARE * total), default=0.0)
    return max(peak_gflops, min(attained, PEAK_CAP * peak_gflops))


__all__ = ["PEAK_CAP", "PEAK_SHARE", "roofline_bound", "roofline_gflops", "roofline_peak"]
