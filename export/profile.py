"""Where a built model spends its time: time per fused kernel on the target, beside its share of
the total, its GFLOPS and % of this machine's measured peak, and where its schedule came from
(a record or the default); ONNX Runtime's own per-node profile beside it.

Each kernel is read against the peak of its instruction family (:mod:`explorer.measure.families`):
a bf16 kernel against the bf16 units' peak (AMX ``tdpbf16ps`` or ``vdpbf16ps``), an int8 one against
the int8 units' (GOPS), the rest against the fp32 FMA peak; its roofline and headroom too, and a
kernel above its family's peak raises that peak only.

The model is built as it would be exported (:func:`export.build.build`, the chosen records
applied), written as a bundle and run in a fresh process (a crashing kernel cannot take the
caller down) whose VM instrument times every call (``run.py --profile``). This is the loop the
literature recommends: search first, then profile, then put human effort where the time goes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from explorer.measure.families import FP32, FamilyPeak, peaks_line
from explorer.target import Target, parse_target
from explorer.temp_dirs import private_temp_dir
from explorer.workload import Workload, load_workload
from export.schedules import TaskSchedule
from store.values import DictValue

if TYPE_CHECKING:
    from export.flow import ExportReport

# a kernel's GFLOPS counts as the attained peak from this share of the kernels' time up (a short
# kernel's time is the least sure), and at most this many times the calibrated peak (beyond is a
# measurement gone wrong, not the machine)
PEAK_SHARE = 0.05
PEAK_CAP = 1.25


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
        return 100.0 * self.gflops / self.roofline_gflops if self.gflops and self.roofline_gflops else None

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
                peak_gflops: float | None = None, peak_gbps: float | None = None, cache_gbps: float = 0.0,
                cache_bytes: int = 0, family_peaks: Mapping[str, float | None] | None = None) -> Rows:
    """Rows from the instrument's ``calls`` (function -> seconds and calls, per run) with
    ``per_call`` seconds of its own cost taken out of every call (a row never below zero; one
    left with less than was taken out is a bound: see :class:`KernelTime`). A task's % of peak and
    roofline are against its family's peak: ``peak_gflops`` for fp32, ``family_peaks`` for the
    others (a family missing there has no % peak and no roofline)."""
    measured, kernels_s, owned = [], 0.0, set()
    for task in tasks:
        count = sum(calls.get(f, {}).get("calls", 0) for f in task.funcs)
        timed = sum(calls.get(f, {}).get("seconds", 0.0) for f in task.funcs)
        seconds = max(0.0, timed - per_call * count)
        owned.update(task.funcs)
        kernels_s += seconds
        probe = KernelTime(task=task.name, funcs=task.funcs, calls=count, seconds=seconds, share=0.0,
                           flops=task.flops, gflops=None, percent_of_peak=None, schedule=task.schedule, timed_s=timed)
        rate_s = probe.upper_s
        gflops = task.flops * count / rate_s / 1e9 if count and rate_s > 0 and task.flops else None
        measured.append((task, probe, gflops))
    other_s = sum(max(0.0, c["seconds"] - per_call * c.get("calls", 0)) for f, c in calls.items() if f not in owned)
    peaks = {**(family_peaks or {}), FP32: peak_gflops}
    roof = {fam: roofline_peak(peaks.get(fam), [(p.seconds, g) for t, p, g in measured if t.family == fam])
            for fam in {FP32} | {t.family for t in tasks}}
    kernels = tuple(sorted(
        (KernelTime(task=t.name, funcs=t.funcs, calls=p.calls, seconds=p.seconds,
                    share=p.seconds / kernels_s if kernels_s else 0.0, flops=t.flops, gflops=g,
                    percent_of_peak=100 * g / peaks[t.family] if g and peaks.get(t.family) else None,
                    schedule=t.schedule, record_id=t.record_id, timed_s=p.timed_s, family=t.family,
                    peak_gflops=peaks.get(t.family),
                    roofline_gflops=roofline_bound(t.flops, t.nbytes, roof[t.family], peak_gbps, cache_gbps=cache_gbps,
                                                   cache_bytes=cache_bytes))
         for t, p, g in measured), key=lambda k: (-k.seconds, -k.upper_s)))
    return Rows(kernels, kernels_s, other_s, roof[FP32], roof)


@dataclass(frozen=True)
class OrtNode(DictValue):
    """ONNX Runtime's time for one node of the ONNX graph (per run)."""

    node: str
    op_type: str
    seconds: float


@dataclass(frozen=True)
class Profile:
    """The profile of one model on one target (see the module docstring)."""

    workload: str
    target: str
    runs: int
    end_to_end_s: float  # median of plain runs (no instrument)
    kernels_s: float  # sum of the kernels' times (instrumented)
    other_s: float  # VM builtins between kernels (allocation, reshapes, ...)
    kernels: tuple[KernelTime, ...]
    ort: tuple[OrtNode, ...] = ()
    ort_s: float | None = None
    peak_gflops: float | None = None
    notes: tuple[str, ...] = field(default=())
    busy_note: str = ""  # other work ran on the machine meanwhile: how much ("" when quiet)
    instrument_s: float = 0.0  # the instrument's own cost per timed call, taken out of every row
    peak_gbps: float | None = None
    # the FLOP peak of the kernels' rooflines: the calibrated one, or the best GFLOPS a kernel with a
    # share of the time reached in this profile where that is higher (the calibration, a numpy
    # matmul, runs ~10% below the best kernels: headroom against it would miss that much)
    roofline_peak_gflops: float | None = None
    cache_gbps: float = 0.0  # the bandwidth of kernels whose bytes fit in the cores' caches (0: unknown)
    cache_bytes: int = 0  # those caches together
    # OpenVINO f32 and its default precision beside TVM's plain runs (export.openvino_row.Anchor)
    openvino: tuple = ()
    # the bf16/int8 peaks the kernels of those families read against (after any raise)
    family_peaks: tuple[FamilyPeak, ...] = ()

    def peaks(self) -> tuple[FamilyPeak, ...]:
        """The peaks this profile's kernels read against: fp32, then each other family a kernel of
        the model belongs to (one the CPU has no peak for reads "no bf16 peak")."""
        used = [f for f in dict.fromkeys(k.family for k in self.kernels) if f != FP32]
        known = {p.family: p for p in self.family_peaks}
        return (FamilyPeak(FP32, self.peak_gflops, "", "fp32"),
                *(known.get(f) or FamilyPeak(f, None, "not measured") for f in used))

    def peaks_text(self) -> str:
        """``peaks: fp32 477 GFLOPS, bf16 AMX 3339 GFLOPS``."""
        return peaks_line(self.peaks())

    @property
    def busy(self) -> bool:
        return bool(self.busy_note)

    @property
    def headroom_s(self) -> float | None:
        """What the kernels would save, together, if each ran at its roofline (the FLOP peak, or the
        bandwidth of where its bytes fit where they bind it): about the most any schedule, searched
        or written by hand, can take off this model on this machine. None without both peaks. An
        estimate: the calibrated peak is a little below what the best kernels reach."""
        if not self.peak_gflops or not self.peak_gbps:
            return None
        return sum(k.headroom_s for k in self.kernels)

    def top(self, k: int = 5) -> list[KernelTime]:
        return list(self.kernels[:k])

    def to_dict(self) -> dict:
        d = asdict(self)
        d["kernels"] = [k.to_dict() for k in self.kernels]
        d["headroom_s"] = self.headroom_s
        d["ort"] = [n.to_dict() for n in self.ort]
        d["openvino"] = [a.to_dict() for a in self.openvino]
        return d


def profile_workload(workload: str | Workload, target: str | Target = "cpu", *,
                     schedules: Mapping[str, TaskSchedule] | None = None, shapes: str | None = None,
                     runs: int = 10, threads: int | None = None, ort: bool = True,
                     peak_gflops: float | None = None, peak_gbps: float | None = None, cache_gbps: float = 0.0,
                     cache_bytes: int = 0, precision: str = "fp32", calibration=None,
                     family_peaks: tuple[FamilyPeak, ...] = ()) -> Profile:
    """Profile ``workload`` built for ``target`` (which must run here) with ``schedules`` at
    ``precision`` (:mod:`explorer.precision`; int8: quantized with ``calibration``, and ONNX Runtime
    beside it runs the int8 model); with the machine's peaks
    (:class:`explorer.measure.calibration.Calibration`'s: ``peak_gflops`` the fp32 one, ``family_peaks``
    its ``families``), each kernel's % of its family's peak and its roofline."""
    from export.flow import export_workload

    target = parse_target(target)
    target.require_runnable("profile")
    if isinstance(workload, str):
        workload = load_workload(workload, shapes)
    from export.build import as_built

    workload = as_built(workload, target, precision, calibration)[0]  # what is built and profiled, ONNX Runtime's too
    with private_temp_dir("schedx-profile-") as tmp:
        report = export_workload(workload, target, Path(tmp) / "bundle", schedules=schedules, verify=False,
                                 layers=False, threads=threads, precision=precision)
        return profile_export(report, workload, runs=runs, threads=threads, ort=ort, peak_gflops=peak_gflops,
                              peak_gbps=peak_gbps, cache_gbps=cache_gbps, cache_bytes=cache_bytes,
                              family_peaks=family_peaks)


def profile_export(report: ExportReport, workload: Workload, *, runs: int = 10, threads: int | None = None,
                   ort: bool = True, peak_gflops: float | None = None, peak_gbps: float | None = None,
                   cache_gbps: float = 0.0, cache_bytes: int = 0, family_peaks: tuple[FamilyPeak, ...] = ()
                   ) -> Profile:
    """Profile a bundle :func:`export.flow.export_workload` wrote for ``workload`` (its folder must
    still exist): the same figures as :func:`profile_workload`, without building again."""
    import statistics

    from explorer.measure.machine_load import machine_load
    from export.verify import run_in_child

    load = machine_load()
    child = run_in_child(report.folder, threads=threads, runs=max(3, runs), budget_s=60.0, profile=runs)
    load = load.worst(machine_load())
    end_to_end_s = float(statistics.median(child["latencies_s"]))
    calls = child["profile"]["calls"]
    per_call = _instrument_cost(calls, end_to_end_s)
    costs = [task_cost(o.task, o.schedule, o.record_id) for o in report.built.outcomes]
    rows = kernel_rows(costs, calls, per_call, peak_gflops=peak_gflops, peak_gbps=peak_gbps, cache_gbps=cache_gbps,
                       cache_bytes=cache_bytes, family_peaks={f.family: f.gflops for f in family_peaks})
    peak_gflops, family_peaks, peak_notes = checked_peaks(rows.kernels, peak_gflops, family_peaks)
    if peak_notes:  # a kernel read above its calibrated peak: every row against the peak it was raised to
        rows = kernel_rows(costs, calls, per_call, peak_gflops=peak_gflops, peak_gbps=peak_gbps, cache_gbps=cache_gbps,
                           cache_bytes=cache_bytes, family_peaks={f.family: f.gflops for f in family_peaks})
    rows, unsure = _unsure_above_peak(rows)
    kernels, kernels_s, other_s = rows.kernels, rows.kernels_s, rows.other_s
    notes = [f"instrumented runs took {child['profile']['instrumented_run_s'] * 1e3:.2f} ms against "
             f"{end_to_end_s * 1e3:.2f} ms plain; the instrument's own cost, {per_call * 1e6:.2f} us per timed "
             f"call, is taken out of every row (rows add up to {(kernels_s + other_s) * 1e3:.3f} ms)"]
    bounds = [k for k in kernels if k.ran and not k.resolved]
    if bounds:
        notes.append(f"{len(bounds)} of {len(kernels)} kernels ran in less time than the instrument's cost took out "
                     f"of them: their rows show the time as timed, the most they took (< ms), and the rates it "
                     f"gives, lower bounds (≥); kernels that did not run say so")
    notes += peak_notes
    if unsure:
        notes.append(f"{unsure} short kernel(s) read above the peak from a time too short to be sure (under "
                     f"{PEAK_SHARE:.0%} of the kernels' time): their % peak is left blank")
    if load.busy:
        notes.append(load.note())  # (also the report's busy_note)
    ort_nodes, ort_s = (), None
    if ort and workload.onnx_model is not None:
        ort_nodes, ort_s = ort_profile(workload.onnx_model, workload.sample_inputs(), runs=runs, threads=threads)
    anchors = ()
    if ort and workload.onnx_model is not None:  # OpenVINO's rows, or a note why there are none
        from explorer.target.environment import cpu_info
        from export.openvino_row import openvino_anchors

        anchors, why_not = openvino_anchors(workload.onnx_model, workload.sample_inputs(), child["latencies_s"],
                                            threads=int(threads or cpu_info()["usable_cores"]), runs=runs)
        notes += why_not
    return Profile(workload=workload.spec, target=report.manifest["target"]["label"], runs=runs,
                   end_to_end_s=end_to_end_s, kernels_s=kernels_s, other_s=other_s, kernels=kernels, ort=ort_nodes,
                   ort_s=ort_s, peak_gflops=peak_gflops, notes=tuple(notes), busy_note=load.note(), instrument_s=per_call,
                   peak_gbps=peak_gbps, roofline_peak_gflops=rows.roofline_peak_gflops, cache_gbps=cache_gbps,
                   cache_bytes=cache_bytes, openvino=anchors, family_peaks=family_peaks)


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
    from dataclasses import replace

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


def _unsure_above_peak(rows: Rows) -> tuple[Rows, int]:
    """``rows`` with the % peak of kernels still above 100 % (short ones, not sure) left blank; how many."""
    from dataclasses import replace

    above = [k for k in rows.kernels if (k.percent_of_peak or 0.0) > 100.0]
    if not above:
        return rows, 0
    return replace(rows, kernels=tuple(replace(k, percent_of_peak=None) if k in above else k
                                       for k in rows.kernels)), len(above)


def roofline_peak(peak_gflops: float | None, kernels: list[tuple[float, float | None]]) -> float | None:
    """The FLOP peak of the rooflines: ``peak_gflops`` (calibrated), or the best GFLOPS among
    ``kernels`` (seconds, GFLOPS) that take :data:`PEAK_SHARE` of their time, where higher, up to
    :data:`PEAK_CAP` times the calibrated one."""
    if not peak_gflops:
        return None
    total = sum(seconds for seconds, _ in kernels)
    attained = max((g for seconds, g in kernels if g and seconds >= PEAK_SHARE * total), default=0.0)
    return max(peak_gflops, min(attained, PEAK_CAP * peak_gflops))


def task_cost(task, schedule: str = "default", record_id: int | None = None) -> TaskCost:
    """A task's :class:`TaskCost`: FLOPs per call, and the bytes of its arguments, each read or
    written once (the compulsory traffic of its roofline)."""
    from explorer.measure.families import kernel_family
    from explorer.workload.keys import argument_bytes

    return TaskCost(name=task.name, funcs=tuple(task.funcs), flops=task.flops, nbytes=argument_bytes(task.mod),
                    schedule=schedule, record_id=record_id, family=kernel_family(task.mod))


def roofline_bound(flops: int, nbytes: int, peak_gflops: float | None, peak_gbps: float | None, *,
                   cache_gbps: float = 0.0, cache_bytes: int = 0) -> float | None:
    """What the roofline allows a kernel of ``flops`` over ``nbytes`` of arguments: its arithmetic
    intensity times the bandwidth of where its bytes fit, at most the FLOP peak. Bytes that fit in
    the cores' caches (``cache_bytes``) move at ``cache_gbps`` (a model's small max-pool reads what
    the convolution before it wrote there: against the large copy's bandwidth it read many times
    its roofline); more move at ``peak_gbps``, the large copy's (a matrix-vector product over
    hundreds of MB of weights is bound by reading them, far below the FLOP peak)."""
    from store.plots import roofline_ceiling

    if not peak_gflops or not peak_gbps or not flops:
        return None
    if not nbytes:
        return peak_gflops
    gbps = cache_gbps if cache_gbps and nbytes <= cache_bytes else peak_gbps
    return roofline_ceiling(flops / nbytes, peak_gflops, max(gbps, peak_gbps))


def roofline_gflops(task, peak_gflops: float | None, peak_gbps: float | None, *, cache_gbps: float = 0.0,
                    cache_bytes: int = 0) -> float | None:
    """:func:`roofline_bound` of a task (its FLOPs and its arguments' bytes)."""
    from explorer.workload.keys import argument_bytes

    nbytes = argument_bytes(task.mod) if task.flops else 0
    return roofline_bound(task.flops, nbytes, peak_gflops, peak_gbps, cache_gbps=cache_gbps, cache_bytes=cache_bytes)


def _instrument_cost(calls: Mapping[str, dict], plain_s: float) -> float:
    """The VM instrument's own cost per timed call: the one figure that, taken out of every timed
    call (each timing brackets a call with the same clock reads and synchronisation, whatever the
    call does; a row never goes below zero), makes the rows add up to a plain run's time. 0 when
    the rows do not exceed the plain run."""
    timed = [(c.get("seconds", 0.0), c.get("calls", 0)) for c in calls.values()]

    def rows_after(cost: float) -> float:
        return sum(max(0.0, seconds - cost * n) for seconds, n in timed)

    if not timed or rows_after(0.0) <= plain_s:
        return 0.0
    low, high = 0.0, max(seconds / n for seconds, n in timed if n) if any(n for _, n in timed) else 0.0
    for _ in range(60):  # rows_after falls as the cost grows: bisect to the plain run's time
        mid = (low + high) / 2
        low, high = (mid, high) if rows_after(mid) > plain_s else (low, mid)
    return high


def ort_profile(onnx_model, inputs: dict, *, runs: int = 10, threads: int | None = None
                ) -> tuple[tuple[OrtNode, ...], float]:
    """ONNX Runtime's per-node time (its own profiler: the median over ``runs`` runs after a
    warm-up), slowest first, and its median end-to-end time in a session that does not profile."""
    import os
    import statistics

    from explorer.models.ort_run import ort_latency, ort_session

    with private_temp_dir("schedx-ort-profile-") as tmp:
        session = ort_session(onnx_model, threads, profile_prefix=os.path.join(tmp, "ort"))
        session.run(None, inputs)  # warm-up (also profiled: left out below)
        for _ in range(runs):
            session.run(None, inputs)
        events = json.loads(Path(session.end_profiling()).read_text())
    # the end-to-end time from a session that does not profile: the profiler's own cost per node
    # doubled a 0.32-ms LSTM tagger (an 80-step unrolled model read 0.95x where `bench` said 1.56x)
    plain_s = ort_latency(ort_session(onnx_model, threads), inputs, runs=max(runs, 10), budget_s=5.0)
    per_node: dict[tuple[str, str], list[float]] = {}
    for e in events:
        if e.get("cat") != "Node" or not str(e.get("name", "")).endswith("_kernel_time"):
            continue
        node = e["name"][: -len("_kernel_time")]
        per_node.setdefault((node, e.get("args", {}).get("op_name", "")), []).append(e["dur"] * 1e-6)
    nodes = []
    for (node, op), durs in per_node.items():  # the median: robust to the first runs' warm-up
        nodes.append(OrtNode(node, op, float(statistics.median(durs[1:] or durs))))
    nodes.sort(key=lambda n: -n.seconds)
    return tuple(nodes), float(plain_s)


__all__ = ["KernelTime", "OrtNode", "Profile", "Rows", "TaskCost", "kernel_rows", "ort_profile", "profile_workload",
           "roofline_bound"]
