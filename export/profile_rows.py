"""The rows of a profile: one per task of the model, its time per run as the VM instrument timed it
(the instrument's own cost taken out), its share, GFLOPS, % of its instruction family's peak and %
of its roofline (:mod:`export.roofline`), and where its schedule came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from explorer.measure.families import FP32
from explorer.measure.memory_roof import MemoryRoof
from export.roofline import roofline_bound, roofline_peak


@dataclass(frozen=True)
class KernelTime:
    """One task of the model: its seconds per run (all its calls), share of the kernels' time,
    GFLOPS, % of the measured peak, and where its schedule came from.

    ``seconds`` is the time as timed (``timed_s``) less the instrument's own cost for its calls.
    Where that leaves less than was taken out, the kernel ran faster than the instrument can tell
    apart from its own cost (``resolved`` is False): its time is at most ``timed_s``, and its
    GFLOPS, % of peak and % of roofline are computed from ``timed_s``, lower bounds, never from a
    difference near zero (a max-pool read 5145 % of its roofline so)."""

    task: str
    funcs: tuple[str, ...]
    calls: int
    seconds: float
    share: float
    flops: int
    gflops: float | None
    percent_of_peak: float | None
    schedule: str  # "record", "default" or "failed" (a record that did not apply)
    record_id: int | None = None
    # what its arithmetic intensity allows: min(peak, AI x the bandwidth of where its bytes fit)
    roofline_gflops: float | None = None
    timed_s: float | None = None  # as timed, the instrument's cost included (None: the same as seconds)
    family: str = FP32  # its instruction family: its % of peak is against that family's peak (GOPS for int8)
    peak_gflops: float | None = None  # the peak its % is against
    nbytes: int = 0  # its arguments' bytes per call, each read or written once (its roofline's traffic)
    tier: str = ""  # the smallest tier those bytes fit in: "L1", "L2", "L3" or "memory" ("": no roofline)
    # its % roofline is no figure (above 100 % from a short time, or a kernel the checks did not trust:
    # export.profile_peaks.unsure_above_peak): left blank, its roofline kept
    roofline_blank: bool = False
    # the share of its FLOPs in its products (explorer.workload.product_flops): under PRODUCT_SHARE its GFLOPS
    # count element-wise work beside the FMA units: it neither raises the peak nor lifts the roof, and a % above 100
    # is no figure (left blank: export.profile_peaks)
    product_share: float = 1.0

    @property
    def products(self) -> bool:
        """Whether its FLOPs are mostly products: its figure is one of the FMA (or dot-product) units."""
        from explorer.workload.product_flops import PRODUCT_SHARE

        return self.product_share >= PRODUCT_SHARE

    @property
    def ran(self) -> bool:
        return self.calls > 0

    @property
    def resolved(self) -> bool:
        """Its own time is at least what the instrument's cost took out of it (see the class)."""
        if self.timed_s is None:
            return True
        return self.ran and self.seconds > 0 and self.seconds >= self.timed_s - self.seconds

    @property
    def upper_s(self) -> float:
        """The most it can have taken: ``seconds`` where resolved, else the time as timed."""
        return self.seconds if self.resolved or self.timed_s is None else self.timed_s

    @property
    def percent_of_roofline(self) -> float | None:
        """Its GFLOPS as a % of its roofline (None without both, or where :attr:`roofline_blank`)."""
        if self.roofline_blank or not self.gflops or not self.roofline_gflops:
            return None
        return 100.0 * self.gflops / self.roofline_gflops

    @property
    def headroom_s(self) -> float:
        """Seconds it would save at its roofline (0 where it runs there or above, or where unknown)."""
        if self.percent_of_roofline is None:
            return 0.0
        return max(0.0, self.seconds * (1.0 - self.percent_of_roofline / 100.0))

    def cells(self, kernels_s: float) -> dict[str, str]:
        """The row as the CLI and the page print it (``ms``, ``share``, ``GFLOPS``, ``% peak``,
        ``% roofline``): a kernel that ran is never "0": one below the instrument's resolution
        shows its time as timed as a bound ("< 0.0018" ms) and its rates as lower bounds ("≥ 9.1")."""
        if not self.ran:
            return {"ms": "not run", "share": "-", "GFLOPS": "-", "% peak": "-", "% roofline": "-"}
        bound = "" if self.resolved else "≥ "

        def gflops(value: float | None) -> str:
            return "-" if value is None else f"{bound}{value:.1f}"

        def percent(value: float | None) -> str:  # a tenth where under 10 ("≥ 0.3", not "≥ 0")
            return "-" if value is None else f"{bound}{value:.1f}" if value < 10 else f"{bound}{value:.0f}"

        share = self.upper_s / kernels_s if kernels_s else 0.0
        return {"ms": _ms(self.seconds) if self.resolved else f"< {_ms(self.upper_s)}",
                "share": f"{self.share:.1%}" if self.resolved else f"< {share:.1%}",
                "GFLOPS": gflops(self.gflops), "% peak": percent(self.percent_of_peak),
                "% roofline": percent(self.percent_of_roofline)}

    def to_dict(self) -> dict:
        return asdict(self) | {"percent_of_roofline": self.percent_of_roofline, "headroom_s": self.headroom_s,
                               "resolved": self.resolved}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}" if seconds >= 1e-5 else f"{seconds * 1e3:.4f}"


@dataclass(frozen=True)
class TaskCost:
    """What a profile row needs of a task: its name and functions, FLOPs and argument bytes per
    call, and where its schedule came from."""

    name: str
    funcs: tuple[str, ...]
    flops: int
    nbytes: int
    schedule: str = "default"
    record_id: int | None = None
    family: str = FP32  # explorer.measure.families.kernel_family of its module
    product_share: float = 1.0  # of its FLOPs, its products' (explorer.workload.product_flops)


@dataclass(frozen=True)
class Rows:
    """The kernels' rows (slowest first), their seconds together, the VM builtins' seconds, and
    the FLOP peak of their rooflines."""

    kernels: tuple[KernelTime, ...]
    kernels_s: float
    other_s: float
    roofline_peak_gflops: float | None
    roofline_peaks: dict = field(default_factory=dict)  # family -> the FLOP peak of its kernels' rooflines


def kernel_rows(tasks: list[TaskCost], calls: Mapping[str, dict], per_call: float, *,
                peak_gflops: float | None = None, memory: MemoryRoof | None = None,
                family_peaks: Mapping[str, float | None] | None = None, untrusted: frozenset[str] = frozenset()
                ) -> Rows:
    """Rows from the instrument's ``calls`` (function -> seconds and calls, per run) with
    ``per_call`` seconds of its own cost taken out of every call (a row never below zero; one
    left with less than was taken out is a bound: see :class:`KernelTime`). A task's % of peak and
    roofline are against its family's peak: ``peak_gflops`` for fp32, ``family_peaks`` for the
    others (a family missing there has no % peak and no roofline); its roofline's bandwidth is that
    of the tier of ``memory`` its bytes fit in (no roofline without ``memory``). The ``untrusted`` tasks
    (a peak check's: :func:`export.profile_peaks.checked_rows`) lift no family's roof."""
    measured, kernels_s, owned = [], 0.0, set()
    for task in tasks:
        count = sum(calls.get(f, {}).get("calls", 0) for f in task.funcs)
        timed = sum(calls.get(f, {}).get("seconds", 0.0) for f in task.funcs)
        seconds = max(0.0, timed - per_call * count)
        owned.update(task.funcs)
        kernels_s += seconds
        probe = KernelTime(task=task.name, funcs=task.funcs, calls=count, seconds=seconds, share=0.0,
                           flops=task.flops, gflops=None, percent_of_peak=None, schedule=task.schedule, timed_s=timed,
                           product_share=task.product_share)
        rate_s = probe.upper_s
        gflops = task.flops * count / rate_s / 1e9 if count and rate_s > 0 and task.flops else None
        measured.append((task, probe, gflops))
    other_s = sum(max(0.0, c["seconds"] - per_call * c.get("calls", 0)) for f, c in calls.items() if f not in owned)
    peaks = {**(family_peaks or {}), FP32: peak_gflops}
    # a kernel's GFLOPS lifts its family's roof from PEAK_SHARE of all the kernels' time, as profile_peaks
    # calls a figure sure (of its family's alone, a bf16 BERT's fast_softmax, under 1 % of the time, lifted fp32's)
    # (nor a kernel whose FLOPs are mostly element-wise work beside its products: explorer.workload.product_flops)
    roof = {fam: roofline_peak(peaks.get(fam), [(p.seconds, g if t.family == fam and t.name not in untrusted
                                                 and p.products else None) for t, p, g in measured])
            for fam in {FP32} | {t.family for t in tasks}}
    kernels = tuple(sorted(
        (KernelTime(task=t.name, funcs=t.funcs, calls=p.calls, seconds=p.seconds,
                    share=p.seconds / kernels_s if kernels_s else 0.0, flops=t.flops, gflops=g,
                    percent_of_peak=100 * g / peaks[t.family] if g and peaks.get(t.family) else None,
                    schedule=t.schedule, record_id=t.record_id, timed_s=p.timed_s, family=t.family,
                    peak_gflops=peaks.get(t.family),
                    roofline_gflops=roofline_bound(t.flops, t.nbytes, roof[t.family], memory), nbytes=t.nbytes,
                    tier=memory.tier_for(t.nbytes) if memory is not None and t.flops else "",
                    product_share=t.product_share)
         for t, p, g in measured), key=lambda k: (-k.seconds, -k.upper_s)))
    return Rows(kernels, kernels_s, other_s, roof[FP32], roof)


def task_cost(task, schedule: str = "default", record_id: int | None = None) -> TaskCost:
    """A task's :class:`TaskCost`: FLOPs per call, and the bytes of its arguments, each read or
    written once (the compulsory traffic of its roofline)."""
    from explorer.measure.families import kernel_family
    from explorer.workload.keys import argument_bytes
    from explorer.workload.product_flops import product_share

    return TaskCost(name=task.name, funcs=tuple(task.funcs), flops=task.flops, nbytes=argument_bytes(task.mod),
                    schedule=schedule, record_id=record_id, family=kernel_family(task.mod),
                    product_share=product_share(task.mod))


__all__ = ["KernelTime", "Rows", "TaskCost", "kernel_rows", "task_cost"]
