"""No kernel reads above 100 % of the peak: the one place that decides what happens when one does.

A kernel measured faster than the calibrated peak means the calibration is wrong (it was taken on
a busy machine, or the calibration kernels miss something the machine can do), not that the
kernel beats the machine. :func:`within_peak` measures the calibration again (at most every
:data:`explorer.measure.figure_check.RECHECK_EVERY_S` seconds per process);
if the kernel is still above it, the stored peak is raised to the kernel's figure and the
returned note says so, for the callers to show. Every "% of peak" (measurements, profiles,
benchmarks) is computed against the peak this returns.

A kernel above :data:`explorer.measure.figure_check.MAX_RAISE` times the peak its calibration
measured (:func:`measured_peak`: the calibration kernels' own figure, never a raise, so raises do
not pile up) raises nothing: its FLOPs or its time are not what the peak counts (FLOPs miscounted,
a time too short), the check says the kernel is not trusted, its % peak is to be left blank
(:meth:`PeakCheck.percent` is None), and the note says why.

Only this machine's calibration is measured again or stored; a calibration of another machine (or
a test's) is raised in the returned value alone (nothing is stored, so that raise is not capped).

Per instruction family (:mod:`explorer.measure.families`): a bf16 kernel is checked against the
bf16 peak and raises that one only; so does an int8 kernel (GOPS); every other kernel the fp32 one.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.target.environment import hardware_fingerprint
from explorer.measure.calibration import Calibration, calibration, raise_peak
from explorer.measure.families import FP32
from explorer.measure.figure_check import MAX_RAISE, ceil_tenth, recheck_due

_recalibrated: dict[str, float] = {}  # hardware -> when this process measured the calibration again


@dataclass(frozen=True)
class PeakCheck:
    """The peak a figure is to be read against (``peak_gflops``), the calibration behind it, a
    note when the figure was above the peak it was given ("" when it was not), and whether the
    figure is one (False: its % peak is to be left blank)."""

    peak_gflops: float | None
    note: str = ""
    calibration: Calibration | None = None
    family: str = FP32
    trusted: bool = True

    def percent(self, gflops: float | None) -> float | None:
        """``gflops`` as a % of the peak (None without both, or where the figure is not trusted)."""
        return 100.0 * gflops / self.peak_gflops if gflops and self.peak_gflops and self.trusted else None


def measured_peak(cal: Calibration, family: str = FP32) -> float | None:
    """The peak of ``family`` as ``cal``'s own kernels measured it, before any kernel raised it: fp32's
    the better of the FMA kernel and numpy's matmul, a family's its kernel's figure (its peak where
    the calibration did not record one)."""
    if family == FP32:
        return max(cal.fma_gflops or 0.0, cal.numpy_gflops or 0.0) or cal.peak_gflops or None
    found = cal.family(family)
    return (found.measured or found.gflops) if found else None


def within_peak(gflops: float | None, kernel: str, peak_gflops: float | None = None, *,
                peaks: Calibration | None = None, family: str = FP32, products: bool = True) -> PeakCheck:
    """The peak of ``family`` against which ``gflops``, measured by ``kernel``, reads at most 100 %.

    ``peak_gflops`` (default: ``peaks``', else this machine's calibration's peak of ``family``) is
    what the caller holds. Under it, nothing changes. Above it: this machine's stored calibration is
    measured again (see the module docstring) and, if ``gflops`` still exceeds the family's peak,
    that peak is raised to ``gflops``; the note then reads "above the calibrated peak: peak raised to
    X GFLOPS measured by KERNEL" ("bf16 peak", "int8 peak ... GOPS" for those families), unless
    ``gflops`` is above :data:`MAX_RAISE` times the measured peak: then nothing is raised and the
    check is not trusted. A family the CPU has no peak for (None) is left as it is. ``products``: False
    for a kernel whose FLOPs are mostly element-wise work beside its products
    (:mod:`explorer.workload.product_flops`): above the peak, its figure is no figure of the FMA units,
    raises nothing and is not trusted."""
    cal = peaks
    if peak_gflops is None:
        cal = cal or calibration()
        peak_gflops = cal.peak_for(family)
    if not gflops or not peak_gflops or gflops <= peak_gflops:
        return PeakCheck(peak_gflops, "", cal, family)
    if not products:
        what, unit = _words(family)
        return PeakCheck(peak_gflops, f"{kernel} at {gflops:.1f} {unit} is above the {what} of {peak_gflops:.1f} "
                                      f"{unit} in FLOPs that are mostly element-wise work beside its products (run on "
                                      f"other vector units than the FMAs): the {what} stays, its % peak is left blank",
                         cal, family, trusted=False)
    hw = hardware_fingerprint()
    if cal is not None and cal.hardware != hw:  # not this machine's: raised here only
        return _raised(raise_peak(cal, ceil_tenth(gflops), kernel, family), kernel, family)
    cal = calibration()
    what, unit = _words(family)
    if gflops > (cal.peak_for(family) or 0.0) and recheck_due(_recalibrated, hw):
        cal = calibration(refresh=True)
        if gflops <= (cal.peak_for(family) or 0.0):
            return PeakCheck(cal.peak_for(family), f"above the calibrated {what} of {peak_gflops:.1f} {unit}: "
                                                   f"measured again, the {what} is now {cal.peak_for(family):.1f} "
                                                   f"{unit} ({cal.family(family).source})", cal, family)
    if gflops <= (cal.peak_for(family) or 0.0):  # the caller's figure was older than the stored one
        note = f"above the {what} of {peak_gflops:.1f} {unit} it was read against: the calibrated {what} is " \
               f"{cal.peak_for(family):.1f} {unit} ({cal.family(family).source})"
        return PeakCheck(cal.peak_for(family), note, cal, family)
    measured = measured_peak(cal, family) or 0.0
    if gflops > MAX_RAISE * measured:
        peak = cal.peak_for(family)
        return PeakCheck(peak, f"{kernel} at {gflops:.1f} {unit} is above {MAX_RAISE:g} times the {what} measured "
                               f"({measured:.1f} {unit}), so its FLOPs or its time are not what the {what} counts: "
                               f"the {what} stays {peak:.1f} {unit} and its % peak is left blank", cal, family,
                         trusted=False)
    return _raised(raise_peak(cal, ceil_tenth(gflops), kernel, family), kernel, family)


def _words(family: str) -> tuple[str, str]:
    """("peak", "GFLOPS") for fp32, ("bf16 peak", "GFLOPS"), ("int8 peak", "GOPS")."""
    return ("peak" if family == FP32 else f"{family} peak"), ("GOPS" if family == "int8" else "GFLOPS")


def _raised(cal: Calibration, kernel: str, family: str = FP32) -> PeakCheck:
    what, unit = _words(family)
    peak = cal.peak_for(family)
    return PeakCheck(peak, f"above the calibrated {what}: {what} raised to {peak:.1f} {unit} measured by {kernel}",
                     cal, family)


__all__ = ["PeakCheck", "measured_peak", "within_peak"]
