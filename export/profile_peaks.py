"""The peaks a profile's rows read against, checked by the rows themselves: a sure kernel above its
family's calibrated peak raises that peak (:func:`checked_peaks`, through
:func:`explorer.measure.peak_check.within_peak`), and a short one above it has its % peak left blank
(:func:`unsure_above_peak`): no row reads above 100 % of its peak.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from explorer.measure.families import FP32, FamilyPeak
from export.profile_rows import KernelTime, Rows
from export.roofline import PEAK_SHARE

if TYPE_CHECKING:
    from explorer.measure.peak_check import PeakCheck


def _peak_check(kernels: tuple[KernelTime, ...], peak_gflops: float | None, family: str
                ) -> tuple[PeakCheck | None, str]:
    """``(check, kernel)``: :func:`explorer.measure.peak_check.within_peak` of the fastest sure kernel
    of ``family`` and that kernel's task, or ``(None, "")`` when no sure kernel is above ``peak_gflops``."""
    sure = [(k.gflops, k.task) for k in kernels
            if k.family == family and k.gflops and (k.share >= PEAK_SHARE or not k.resolved)]
    if not peak_gflops or not sure or max(sure)[0] <= peak_gflops:
        return None, ""
    from explorer.measure.peak_check import within_peak

    gflops, task = max(sure)
    return within_peak(gflops, task, peak_gflops, family=family), task


def checked_peak(kernels: tuple[KernelTime, ...], peak_gflops: float | None, family: str = FP32
                 ) -> tuple[float | None, str]:
    """``(peak, note)``: the peak of ``family`` no sure kernel of that family reads above, from the
    fastest whose figure is sure (:data:`PEAK_SHARE` of the kernels' time or more, or a lower bound)
    through :func:`explorer.measure.peak_check.within_peak` (which measures the calibration again or
    raises that family's peak, and says so in the note; "" when no kernel was above ``peak_gflops``)."""
    check, _ = _peak_check(kernels, peak_gflops, family)
    return (check.peak_gflops, check.note) if check else (peak_gflops, "")


def checked_peaks(kernels: tuple[KernelTime, ...], peak_gflops: float | None, family_peaks: tuple[FamilyPeak, ...]
                  ) -> tuple[float | None, tuple[FamilyPeak, ...], list[str]]:
    """:func:`checked_peak` for fp32 and each other family: the fp32 peak, the family peaks and the notes
    of those changed. A changed peak names what its calibration says raised it: the sure kernel checked
    (never a faster short one, whose figure raised nothing), or nothing where measuring the calibration
    again explained the kernel's figure."""
    peak_gflops, note = checked_peak(kernels, peak_gflops)
    notes, checked = [note] if note else [], []
    for fam in family_peaks:
        check, task = _peak_check(kernels, fam.gflops, fam.family)
        if check and check.note:
            stored = check.calibration.family(fam.family) if check.calibration else None
            notes.append(check.note)
            fam = replace(fam, gflops=check.peak_gflops, raised_by=stored.raised_by if stored else task)
        checked.append(fam)
    return peak_gflops, tuple(checked), notes


def unsure_above_peak(rows: Rows) -> tuple[Rows, int]:
    """``rows`` with the % peak of kernels still above 100 % (short ones, not sure) left blank; how many."""
    above = [k for k in rows.kernels if (k.percent_of_peak or 0.0) > 100.0]
    if not above:
        return rows, 0
    return replace(rows, kernels=tuple(replace(k, percent_of_peak=None) if k in above else k
                                       for k in rows.kernels)), len(above)


__all__ = ["checked_peak", "checked_peaks", "unsure_above_peak"]
