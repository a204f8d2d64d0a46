"""Where a built model spends its time: time per fused kernel on the target, beside its share of
the total, its GFLOPS and % of this machine's measured peak, and where its schedule came from
(a record or the default); ONNX Runtime's own per-node profile beside it.

The model is built as it would be exported (:func:`export.build.build`, the chosen records
applied), written as a bundle and run in a fresh process (a crashing kernel cannot take the
caller down) whose VM instrument times every call (``run.py --profile``). This is the loop the
literature recommends: search first, then profile, then put human effort where the time goes.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from explorer.target import Target, parse_target
from explorer.workload import Workload, load_workload
from export.schedules import TaskSchedule

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
    GFLOPS, % of the measured peak, and where its schedule came from."""

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
    roofline_gflops: float | None = None  # what its arithmetic intensity allows: min(peak, AI x copy bandwidth)

    @property
    def percent_of_roofline(self) -> float | None:
        return 100.0 * self.gflops / self.roofline_gflops if self.gflops and self.roofline_gflops else None

    @property
    def headroom_s(self) -> float:
        """Seconds it would save at its roofline (0 where it runs there or above, or where unknown)."""
        if self.percent_of_roofline is None:
            return 0.0
        return max(0.0, self.seconds * (1.0 - self.percent_of_roofline / 100.0))

    def to_dict(self) -> dict:
        return asdict(self) | {"percent_of_roofline": self.percent_of_roofline, "headroom_s": self.headroom_s}


@dataclass(frozen=True)
class OrtNode:
    """ONNX Runtime's time for one node of the ONNX graph (per run)."""

    node: str
    op_type: str
    seconds: float

    def to_dict(self) -> dict:
        return asdict(self)


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

    @property
    def busy(self) -> bool:
        return bool(self.busy_note)

    @property
    def headroom_s(self) -> float | None:
        """What the kernels would save, together, if each ran at its roofline (the FLOP peak, or the
        copy bandwidth where its bytes bind it): about the most any schedule, searched or written
        by hand, can take off this model on this machine. None without both peaks. An estimate: the
        calibrated peak is a little below what the best kernels reach, and a kernel whose data stays
        in the cache can beat the copy bandwidth."""
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
        return d


def profile_workload(workload: str | Workload, target: str | Target = "cpu", *,
                     schedules: Mapping[str, TaskSchedule] | None = None, shapes: str | None = None,
                     runs: int = 10, threads: int | None = None, ort: bool = True,
                     peak_gflops: float | None = None, peak_gbps: float | None = None) -> Profile:
    """Profile ``workload`` built for ``target`` (which must run here) with ``schedules``; with the
    machine's peaks, each kernel's % of the peak and roofline."""
    from export.flow import export_workload

    target = parse_target(target)
    target.require_runnable("profile")
    if isinstance(workload, str):
        workload = load_workload(workload, shapes)
    with tempfile.TemporaryDirectory(prefix="schedx-profile-") as tmp:
        report = export_workload(workload, target, Path(tmp) / "bundle", schedules=schedules, verify=False,
                                 layers=False, threads=threads)
        return profile_export(report, workload, runs=runs, threads=threads, ort=ort, peak_gflops=peak_gflops,
                              peak_gbps=peak_gbps)


def profile_export(report: ExportReport, workload: Workload, *, runs: int = 10, threads: int | None = None,
                   ort: bool = True, peak_gflops: float | None = None, peak_gbps: float | None = None) -> Profile:
    """Profile a bundle :func:`export.flow.export_workload` wrote for ``workload`` (its folder must
    still exist): the same figures as :func:`profile_workload`, without building again."""
    import statistics

    from explorer.machine_load import machine_load
    from export.verify import run_in_child

    load = machine_load()
    child = run_in_child(report.folder, threads=threads, runs=max(3, runs), budget_s=60.0, profile=runs)
    load = load.worst(machine_load())
    end_to_end_s = float(statistics.median(child["latencies_s"]))
    calls = child["profile"]["calls"]
    per_call = _instrument_cost(calls, end_to_end_s)
    outcomes = {o.task.name: o for o in report.built.outcomes}
    rows, kernels_s = [], 0.0
    owned = set()
    for name, outcome in outcomes.items():
        task = outcome.task
        count = sum(calls.get(f, {}).get("calls", 0) for f in task.funcs)
        seconds = max(0.0, sum(calls.get(f, {}).get("seconds", 0.0) for f in task.funcs) - per_call * count)
        owned.update(task.funcs)
        kernels_s += seconds
        gflops = task.flops * count / seconds / 1e9 if seconds > 0 and task.flops else None
        rows.append((task, outcome, seconds, count, gflops))
    other_s = sum(max(0.0, c["seconds"] - per_call * c.get("calls", 0)) for f, c in calls.items() if f not in owned)
    roof_peak = roofline_peak(peak_gflops, [(s, g) for _, _, s, _, g in rows])
    kernels = tuple(sorted(
        (KernelTime(task=t.name, funcs=t.funcs, calls=n, seconds=s, share=s / kernels_s if kernels_s else 0.0,
                    flops=t.flops, gflops=g,
                    percent_of_peak=100 * g / peak_gflops if g and peak_gflops else None,
                    schedule=o.schedule, record_id=o.record_id,
                    roofline_gflops=roofline_gflops(t, roof_peak, peak_gbps))
         for t, o, s, n, g in rows), key=lambda k: -k.seconds))
    notes = [f"instrumented runs took {child['profile']['instrumented_run_s'] * 1e3:.2f} ms against "
             f"{end_to_end_s * 1e3:.2f} ms plain; the instrument's own cost, {per_call * 1e6:.2f} us per timed "
             f"call, is taken out of every row (rows add up to {(kernels_s + other_s) * 1e3:.3f} ms)"]
    if load.busy:
        notes.append(load.note())  # (also the report's busy_note)
    ort_nodes, ort_s = (), None
    if ort and workload.onnx_model is not None:
        ort_nodes, ort_s = ort_profile(workload.onnx_model, workload.sample_inputs(), runs=runs, threads=threads)
    return Profile(workload=workload.spec, target=report.manifest["target"]["label"], runs=runs,
                   end_to_end_s=end_to_end_s, kernels_s=kernels_s, other_s=other_s, kernels=kernels, ort=ort_nodes,
                   ort_s=ort_s, peak_gflops=peak_gflops, notes=tuple(notes), busy_note=load.note(), instrument_s=per_call,
                   peak_gbps=peak_gbps, roofline_peak_gflops=roof_peak)


def roofline_peak(peak_gflops: float | None, kernels: list[tuple[float, float | None]]) -> float | None:
    """The FLOP peak of the rooflines: ``peak_gflops`` (calibrated), or the best GFLOPS among
    ``kernels`` (seconds, GFLOPS) that take :data:`PEAK_SHARE` of their time, where higher, up to
    :data:`PEAK_CAP` times the calibrated one."""
    if not peak_gflops:
        return None
    total = sum(seconds for seconds, _ in kernels)
    attained = max((g for seconds, g in kernels if g and seconds >= PEAK_SHARE * total), default=0.0)
    return max(peak_gflops, min(attained, PEAK_CAP * peak_gflops))


def roofline_gflops(task, peak_gflops: float | None, peak_gbps: float | None) -> float | None:
    """What the roofline allows ``task`` at its arithmetic intensity: its FLOPs over the bytes of its
    arguments (each read or written once), times the copy bandwidth, at most the FLOP peak. A
    matrix-vector product over 151 MB of weights is bound by reading them, far below the peak."""
    from explorer.workload.keys import argument_bytes
    from store.plots import roofline_ceiling

    if not peak_gflops or not peak_gbps or not task.flops:
        return None
    nbytes = argument_bytes(task.mod)
    return roofline_ceiling(task.flops / nbytes, peak_gflops, peak_gbps) if nbytes else peak_gflops


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

    with tempfile.TemporaryDirectory(prefix="schedx-ort-profile-") as tmp:
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


__all__ = ["KernelTime", "OrtNode", "Profile", "ort_profile", "profile_workload"]
