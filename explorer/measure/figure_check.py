"""What the two checks of a measured figure against this machine's own share
(:mod:`explorer.measure.peak_check` for FLOPs, :mod:`explorer.measure.roof_check` for bytes): how
often a process measures this machine's figures again, how a raised figure is rounded, and how far
above its figure a kernel may be before its own figure is taken for a measurement gone wrong.
"""

from __future__ import annotations

import math
import time

RECHECK_EVERY_S = 600.0  # a process measures this machine's figures again at most this often
# a kernel counts at most this many times a measured figure (the attained FLOP peak of the rooflines; a
# raise of a FLOP peak or of a memory tier, of the figure measured, never of an earlier raise): beyond is a
# measurement gone wrong (FLOPs miscounted, a slice counted whole, a time too short), not the machine
MAX_RAISE = 1.25


def ceil_tenth(figure: float) -> float:
    """Rounded up to 0.1 (GFLOPS, GB/s), so the figure it came from reads at most 100.0 %."""
    return math.ceil(figure * 10.0) / 10.0


def recheck_due(stamps: dict[str, float], hardware: str) -> bool:
    """Whether ``hardware``'s figures are due to be measured again in this process (at most every
    :data:`RECHECK_EVERY_S` seconds); when they are, ``stamps`` (hardware -> when, the caller's own
    per-process record) is marked now."""
    now = time.monotonic()
    if now - stamps.get(hardware, -RECHECK_EVERY_S) < RECHECK_EVERY_S:
        return False
    stamps[hardware] = now
    return True


__all__ = ["MAX_RAISE", "RECHECK_EVERY_S", "ceil_tenth", "recheck_due"]
