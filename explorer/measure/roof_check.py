"""No kernel moves its bytes faster than its memory roof: the one place that decides what happens
when one does (the bandwidth side of :mod:`explorer.measure.peak_check`).

A kernel whose bytes moved faster than the roof of where they fit
(:meth:`explorer.measure.memory_roof.MemoryRoof.gbps_for`) means a figure is wrong, not that the
kernel beats the machine: the bandwidth was measured on a busy machine or by kernels that move
bytes slower than this one, or the kernel's bytes or time are not what the roofline counts (a
slice that reads a tenth of its argument; a time too short to be sure). :func:`within_roof`
measures this machine's cache figures again (at most every
:data:`explorer.measure.figure_check.RECHECK_EVERY_S` seconds per process) and takes each tier at
least as fast as measured now. If the kernel is still above, one tier is raised
(:func:`tier_to_raise`): the smallest figure that makes the roof of the kernel's bytes its own rate
(:func:`raised_figure`; a roof blends the tiers its bytes fill, so raising the tier to the kernel's
rate itself would lift it past the kernel), stored in this machine's figures with the kernel's name
and the figure the tier was measured at where it is above the stored one
(:attr:`explorer.measure.cache_peak.CachePeak.raised`), and the note says so. A tier that would have
to rise past :data:`explorer.measure.figure_check.MAX_RAISE` times its measured figure
(:func:`measured_figure`: never a raise, so raises do not pile up across kernels or runs) is raised
by nothing: the check says the kernel is not trusted, its % roofline is to be left blank, and the
note says why. Measuring again and storing a raise hold this machine's measuring lock
(:func:`explorer.measure.lock.measuring`): a measurement never overlaps another's timing, and two
processes never raise from the same stored figures at once (call it outside that lock).

The tier raised is the smallest the kernel's bytes fit in, except memory for bytes that fit in the
two largest caches together: AMD's L3 is a victim cache, so the L2s and the L3 hold about 34 MB on
a 2-core Zen 5 guest where the roof nests them at the L3's 32 MB; a 33 MB kernel there raises the
L3, never memory. The roof given is this machine's unless ``hardware`` says whose it is: another
machine's figures (or a test's) are neither measured again nor stored, raised in the returned value
alone (capped at the figures it was given). A kernel whose time is not sure (a short one, mostly the
profiler's own cost) should not be checked: its figure is not one. Every figure is GB/s of argument
bytes, each read or written once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from explorer.measure.cache_peak import CachePeak, cache_peak, save
from explorer.measure.figure_check import MAX_RAISE, ceil_tenth, recheck_due
from explorer.measure.lock import measuring
from explorer.measure.memory import human
from explorer.measure.memory_roof import MemoryRoof
from explorer.target.environment import hardware_fingerprint

_rechecked: dict[str, float] = {}  # hardware -> when this process measured its cache figures again


@dataclass(frozen=True)
class RoofCheck:
    """The roof a kernel's bandwidth is to be read against, a note when the kernel was above the roof
    it was given ("" when it was not), and whether the kernel's figure is one (False: its %
    roofline is to be left blank)."""

    roof: MemoryRoof
    note: str = ""
    trusted: bool = True


def tier_to_raise(roof: MemoryRoof, nbytes: int) -> str:
    """The tier a kernel over ``nbytes`` above its roof raises (see the module docstring): the one its
    bytes fit in, the largest cache for bytes past it that the two largest caches hold together."""
    tier, caches = roof.tier_for(nbytes), roof.known()
    if tier == "memory" and caches and nbytes <= sum(t.nbytes for t in caches[-2:]):
        return caches[-1].name
    return tier


def measured_figure(roof: MemoryRoof, tier: str, stored: CachePeak | None = None) -> float:
    """The figure ``tier`` was measured at, before any kernel raised it: the one ``stored`` (this
    machine's figures) records with its raise, else the higher of ``roof``'s and ``stored``'s."""
    if stored is None:
        return roof.figure(tier)
    recorded = [measured for name, _, measured in stored.raised if name == tier]
    return recorded[0] if recorded else max(roof.figure(tier), stored.figure(tier))


def raised_figure(roof: MemoryRoof, tier: str, nbytes: int, gbps: float, measured: float | None = None
                  ) -> float | None:
    """The least figure of ``tier`` (rounded up to 0.1 GB/s) at which the roof of ``nbytes`` is
    ``gbps``, or None where that takes more than :data:`MAX_RAISE` times ``measured`` (the figure it
    was measured at; default: its figure in ``roof``). The roof only rises with a tier's figure, so
    halving the interval finds it."""
    low, high = roof.figure(tier), MAX_RAISE * (measured or roof.figure(tier))
    if high < low or roof.with_tier(tier, high).gbps_for(nbytes) < gbps:
        return None
    while high - low > 1e-3:
        middle = (low + high) / 2.0
        low, high = (low, middle) if roof.with_tier(tier, middle).gbps_for(nbytes) >= gbps else (middle, high)
    return ceil_tenth(high)


def within_roof(gbps: float, nbytes: int, kernel: str, roof: MemoryRoof, *, hardware: str | None = None
                ) -> RoofCheck:
    """The roof against which ``kernel``, which moved its ``nbytes`` of arguments at ``gbps``, reads
    at most 100 % (see the module docstring): ``roof`` where it does. ``hardware``: the machine whose
    figures ``roof`` holds (None: this one)."""
    if not gbps or not nbytes or gbps <= roof.gbps_for(nbytes):
        return RoofCheck(roof)
    said = f"{kernel} moved its {human(nbytes)} at {gbps:.0f} GB/s, above its roof of {roof.gbps_for(nbytes):.0f} GB/s"
    here = hardware_fingerprint()
    if hardware not in (None, here):  # another machine's figures: raised in the answer alone
        return _raised(roof, gbps, nbytes, kernel, said, None)
    with measuring(what=f"the cache figures ({kernel} above its roof)"):
        stored = None
        if recheck_due(_rechecked, here):
            stored = cache_peak(refresh=True)  # (the figures just stored: not read back)
            roof = roof.at_least(stored.memory_roof(roof.memory_gbps))
            if gbps <= roof.gbps_for(nbytes):
                return RoofCheck(roof, f"{said}: the cache figures, measured again, hold it")
        return _raised(roof, gbps, nbytes, kernel, said, stored or cache_peak())


def _raised(roof: MemoryRoof, gbps: float, nbytes: int, kernel: str, said: str, stored: CachePeak | None
            ) -> RoofCheck:
    """The kernel's tier raised to hold it, and stored in ``stored`` (this machine's figures, re-read
    under the lock; None: another machine's, nothing stored) where it is above the figure there; or
    the kernel untrusted where that is past :data:`MAX_RAISE` times the tier's measured figure."""
    tier = tier_to_raise(roof, nbytes)
    measured = measured_figure(roof, tier, stored)
    figure = raised_figure(roof, tier, nbytes, gbps, measured)
    if figure is None:
        return RoofCheck(roof, f"{said}: its roof would take the {tier} bandwidth past {MAX_RAISE:g} times the "
                               f"{measured:.0f} GB/s measured, so its bytes or its time are not what the roofline "
                               "counts; its % roofline is left blank", trusted=False)
    if stored is not None and figure > stored.figure(tier):
        save(replace(stored.with_figure(tier, figure),
                     raised=tuple(r for r in stored.raised if r[0] != tier) + ((tier, kernel, measured),)))
    return RoofCheck(roof.with_tier(tier, figure), f"{said}: the {tier} bandwidth raised to {figure:.0f} GB/s "
                                                   "to hold it")


__all__ = ["RoofCheck", "measured_figure", "raised_figure", "tier_to_raise", "within_roof"]
