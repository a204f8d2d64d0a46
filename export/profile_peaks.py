"""The peaks a profile's rows read against, checked by the rows themselves: a sure kernel above its
family's calibrated peak raises that peak (:func:`checked_peaks`, through
:func:`explorer.measure.peak_check.within_peak`), and a short one above it has its % peak left blank
(:func:`unsure_above_peak`): no row reads above 100 % of its peak.
"""

from __future__ import annotations

from dataclasses import replace

from explorer.measure.families import FP32, FamilyPeak
from export.profile_rows import KernelTime, Rows
from export.roofline import PEAK_SHARE


def checked_peak(kernels: tuple[KernelTime, ...], peak_gflops: float | None, family: str = FP32
                 ) -> tuple[float | None, str]:
    """``(peak, note)``: the peak of ``family`` no sure kernel of that family reads above, from the
    fastest whose figure is sure (:data:`PEAK_SHARE` of the kernels' time or more, or a lower bound)
    through :func:`explorer.measure.peak_check.within_peak` (which measures the calibration again or
    raises that family's peak, and says so in the note; "" when no kernel was above ``peak_gflops``)."""
    sure = [(k.gflops, k.task) for k in kernels
            if k.family == family and k.gflops and (k.share >= PEAK_SHARE or not k.resolved)]
    if not peak_gflops or not sure or max(sure)[0] <= peak_gflops:
        return peak_gflops, ""
    from explorer.measure.peak_check import within_peak

    check = within_peak(*max(sure), peak_gflops, family=family)
    return check.peak_gflops, check.note


def checked_peaks(kernels: tuple[KernelTime, ...], peak_gflops: float | None, family_peaks: tuple[FamilyPeak, ...]
                  ) -> tuple[float | None, tuple[FamilyPeak, ...], list[str]]:
    """:func:`checked_peak` for fp32 and each other family: the fp32 peak, the family peaks (a raised
    one names the kernel that raised it) and the notes of those raised."""
    peak_gflops, note = checked_peak(kernels, peak_gflops)
    notes, checked = [note] if note else [], []
    for fam in family_peaks:
        peak, note = checked_peak(kernels, fam.gflops, fam.family)
        if note:
            top = max((k for k in kernels if k.family == fam.family and k.gflops), key=lambda k: k.gflops)
            notes.append(note)
            fam = replace(fam, gflops=peak, raised_by=top.task if peak != fam.gflops else fam.raised_by)
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
