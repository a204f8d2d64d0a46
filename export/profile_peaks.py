"""The peaks and the memory roof a profile's rows read against, checked by the rows themselves: a
sure kernel above its family's calibrated peak raises that peak (:func:`checked_peaks`, through
:func:`explorer.measure.peak_check.within_peak`); a sure kernel bound by its bytes and above its
roofline has the memory roof measured again or a tier raised (:func:`checked_roof`, through
:func:`explorer.measure.roof_check.within_roof`), or is not trusted; a short kernel above either has
that figure left blank, and so has an untrusted one (:func:`unsure_above_peak`): no row reads above
100 % of its peak or of its roofline. :func:`checked_rows` does it all, as a profile does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from explorer.measure.families import FP32, FamilyPeak
from explorer.measure.memory_roof import MemoryRoof
from export.profile_rows import KernelTime, Rows, TaskCost, kernel_rows
from export.roofline import PEAK_SHARE

if TYPE_CHECKING:
    from explorer.measure.peak_check import PeakCheck


def _peak_checks(kernels: tuple[KernelTime, ...], peak_gflops: float | None, family: str
                 ) -> list[tuple[PeakCheck, str]]:
    """:func:`explorer.measure.peak_check.within_peak` of each sure kernel of ``family`` above the peak,
    the fastest first, until one is trusted (it raised the peak, or the calibration measured again or
    stored holds it: the slower ones read under it), each with its task; [] when none is above."""
    sure = sorted(((k.gflops, k.task) for k in kernels if k.family == family and k.gflops and k.products
                   and (k.share >= PEAK_SHARE or not k.resolved)), reverse=True)
    checks: list[tuple[PeakCheck, str]] = []
    for gflops, task in sure:
        if not peak_gflops or gflops <= peak_gflops:
            break
        from explorer.measure.peak_check import within_peak

        check = within_peak(gflops, task, peak_gflops, family=family)
        checks.append((check, task))
        peak_gflops = check.peak_gflops
        if check.trusted:
            break
    return checks


def _checked_family(kernels: tuple[KernelTime, ...], peak: FamilyPeak
                    ) -> tuple[FamilyPeak, list[str], frozenset[str]]:
    """``(peak, notes, untrusted)``: ``peak`` as :func:`_peak_checks` left it, naming what its
    calibration says raised it (the trusted sure kernel checked, never a faster short one, whose figure
    raised nothing; nothing where measuring the calibration again explained the kernel's figure), the
    notes of the checks, and the tasks whose figure was not trusted (their % peak is no figure)."""
    checks = _peak_checks(kernels, peak.gflops, peak.family)
    notes = [check.note for check, _ in checks if check.note]
    untrusted = frozenset(task for check, task in checks if not check.trusted)
    if notes:
        check, task = checks[-1]
        stored = check.calibration.family(peak.family) if check.calibration else None
        raised_by = stored.raised_by if stored else task if check.trusted else peak.raised_by
        peak = replace(peak, gflops=check.peak_gflops, raised_by=raised_by)
    return peak, notes, untrusted


def checked_peak(kernels: tuple[KernelTime, ...], peak_gflops: float | None, family: str = FP32
                 ) -> tuple[float | None, str]:
    """``(peak, note)``: the peak of ``family`` no sure kernel of that family reads above, from the
    fastest whose figure is sure (:data:`PEAK_SHARE` of the kernels' time or more, or a lower bound)
    through :func:`explorer.measure.peak_check.within_peak` (which measures the calibration again or
    raises that family's peak, and says so in the note; "" when no kernel was above ``peak_gflops``;
    a kernel too far above to be trusted raises nothing and the next fastest is checked)."""
    checked, notes, _ = _checked_family(kernels, FamilyPeak(family, peak_gflops, ""))
    return checked.gflops, "; ".join(notes)


def _checked_peaks(kernels: tuple[KernelTime, ...], peak_gflops: float | None, family_peaks: tuple[FamilyPeak, ...]
                   ) -> tuple[float | None, tuple[FamilyPeak, ...], list[str], frozenset[str]]:
    """:func:`checked_peaks`, and the tasks whose figure a check did not trust."""
    fp32, notes, untrusted = _checked_family(kernels, FamilyPeak(FP32, peak_gflops, ""))
    checked = []
    for fam in family_peaks:
        fam, fam_notes, fam_untrusted = _checked_family(kernels, fam)
        checked.append(fam)
        notes, untrusted = notes + fam_notes, untrusted | fam_untrusted
    return fp32.gflops, tuple(checked), notes, untrusted


def checked_peaks(kernels: tuple[KernelTime, ...], peak_gflops: float | None, family_peaks: tuple[FamilyPeak, ...]
                  ) -> tuple[float | None, tuple[FamilyPeak, ...], list[str]]:
    """:func:`checked_peak` for fp32 and each other family: the fp32 peak, the family peaks and the notes
    of those changed. A changed peak names what its calibration says raised it: the sure kernel checked
    (never a faster short one, whose figure raised nothing), or nothing where measuring the calibration
    again explained the kernel's figure."""
    return _checked_peaks(kernels, peak_gflops, family_peaks)[:3]


def _bound_by_bytes(k: KernelTime, memory: MemoryRoof) -> bool:
    """Whether ``k``'s roofline is its bytes' (its FLOPs per byte times their bandwidth), not a FLOP peak."""
    return bool(k.roofline_gflops) and k.flops / k.nbytes * memory.gbps_for(k.nbytes) <= k.roofline_gflops * (1 + 1e-9)


def checked_roof(kernels: tuple[KernelTime, ...], memory: MemoryRoof | None, *, hardware: str | None = None
                 ) -> tuple[MemoryRoof | None, list[str], frozenset[str]]:
    """``(memory, notes, untrusted)``: the memory roof no sure kernel bound by its bytes reads above
    (:data:`PEAK_SHARE` of the kernels' time or more, its time resolved), each such kernel above its
    roofline checked by :func:`explorer.measure.roof_check.within_roof`, the fastest first; the notes of
    those checked, and the tasks whose figure the check did not trust (their % roofline is no figure).
    ``hardware``: the machine whose figures ``memory`` holds (None: this one; another's is raised in the
    answer alone, never measured again nor stored as this machine's)."""
    if memory is None:
        return memory, [], frozenset()
    bound = [k for k in kernels if k.gflops and k.nbytes and k.flops and k.resolved and k.share >= PEAK_SHARE
             and (k.percent_of_roofline or 0.0) > 100.0 and _bound_by_bytes(k, memory)]
    if not bound:
        return memory, [], frozenset()
    from explorer.measure.roof_check import within_roof

    def gbps(k: KernelTime) -> float:  # the bytes it moved a second
        return k.nbytes * k.calls / k.seconds / 1e9

    notes, untrusted = [], set()
    for k in sorted(bound, key=lambda k: -gbps(k)):
        check = within_roof(gbps(k), k.nbytes, k.task, memory, hardware=hardware)
        memory = check.roof
        notes += [check.note] if check.note else []
        untrusted |= set() if check.trusted else {k.task}
    return memory, notes, frozenset(untrusted)


def unsure_above_peak(rows: Rows, untrusted: frozenset[str] = frozenset()) -> tuple[Rows, int]:
    """``rows`` with each figure still above 100 % left blank: the % peak where it is above, the %
    roofline where it is above (:attr:`export.profile_rows.KernelTime.roofline_blank`: the roofline
    itself stands, and the kernel has no headroom); and how many kernels had one left blank that are
    short (not sure), not counting the ``untrusted`` tasks (:func:`checked_peaks`, :func:`checked_roof`,
    whose notes say why)."""
    def blanked(k: KernelTime) -> KernelTime:
        return replace(k, percent_of_peak=None if (k.percent_of_peak or 0.0) > 100.0 else k.percent_of_peak,
                       roofline_blank=k.roofline_blank or (k.percent_of_roofline or 0.0) > 100.0)

    kernels = tuple(blanked(k) for k in rows.kernels)
    short = sum(1 for old, new in zip(rows.kernels, kernels) if old != new and old.task not in untrusted)
    return (replace(rows, kernels=kernels) if kernels != rows.kernels else rows), short


@dataclass(frozen=True)
class CheckedRows:
    """A profile's rows read against the peaks and the memory roof they were checked against, the notes
    of the checks (of the peaks; of the roof), and how many short kernels have a figure left blank."""

    rows: Rows
    peak_gflops: float | None
    family_peaks: tuple[FamilyPeak, ...]
    memory: MemoryRoof | None
    peak_notes: tuple[str, ...] = ()
    roof_notes: tuple[str, ...] = ()
    unsure: int = 0


def checked_rows(costs: list[TaskCost], calls: Mapping[str, dict], per_call: float, *, peak_gflops: float | None,
                 memory: MemoryRoof | None, family_peaks: tuple[FamilyPeak, ...] = (), hardware: str | None = None
                 ) -> CheckedRows:
    """:func:`export.profile_rows.kernel_rows` checked: the peaks (:func:`checked_peaks`), then the memory
    roof (:func:`checked_roof`; ``hardware``: whose figures ``memory`` holds, None: this machine's), the
    rows made again against what they raised, and the figures still above 100 % left blank
    (:func:`unsure_above_peak`)."""
    def rows_for(peak, memory, families, untrusted=frozenset()) -> Rows:
        return kernel_rows(costs, calls, per_call, peak_gflops=peak, memory=memory,
                           family_peaks={f.family: f.gflops for f in families}, untrusted=untrusted)

    rows = rows_for(peak_gflops, memory, family_peaks)
    peak_gflops, family_peaks, peak_notes, peak_untrusted = _checked_peaks(rows.kernels, peak_gflops, family_peaks)
    if peak_notes:  # every row against the peaks they were raised to (no roof lifted by an untrusted kernel)
        rows = rows_for(peak_gflops, memory, family_peaks, peak_untrusted)
    memory, roof_notes, roof_untrusted = checked_roof(rows.kernels, memory, hardware=hardware)
    if roof_notes:
        rows = rows_for(peak_gflops, memory, family_peaks, peak_untrusted)
    beside = _beside_products(rows.kernels)
    if beside:
        peak_notes = [*peak_notes, _beside_note(beside)]
    rows, unsure = unsure_above_peak(rows, peak_untrusted | roof_untrusted | beside)
    return CheckedRows(rows, peak_gflops, family_peaks, memory, tuple(peak_notes), tuple(roof_notes), unsure)


def _beside_products(kernels: tuple[KernelTime, ...]) -> frozenset[str]:
    """The kernels above 100 % of their peak whose FLOPs are mostly element-wise work beside their products
    (:mod:`explorer.workload.product_flops`): theirs is no figure of the FMA units, and raised nothing."""
    return frozenset(k.task for k in kernels if not k.products and (k.percent_of_peak or 0.0) > 100.0)


def _beside_note(tasks: frozenset[str]) -> str:
    names = sorted(t.split("/", 1)[-1] for t in tasks)
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return (f"{shown}: above the peak in FLOPs that are largely element-wise work (an activation's exp, its "
            f"clamps) beside their products, run on other vector units than the FMAs: at their compute limit, their "
            f"% peak left blank, and they raised nothing")


__all__ = ["CheckedRows", "checked_peak", "checked_peaks", "checked_roof", "checked_rows", "unsure_above_peak"]
