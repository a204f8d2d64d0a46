"""The profiling run: a model built as it would be exported (:func:`export.build.build`, the chosen
records applied), written as a bundle and run in a fresh process (a crashing kernel cannot take the
caller down) whose VM instrument times every call (``run.py --profile``); its rows
(:mod:`export.profile_rows`) read against this machine's peaks and memory tiers, and ONNX Runtime's
own per-node profile beside them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from explorer.measure.families import FamilyPeak
from explorer.measure.memory_roof import MemoryRoof
from explorer.target import Target, parse_target
from explorer.temp_dirs import private_temp_dir
from explorer.workload import Workload, load_workload
from export.profile_result import OrtNode, Profile
from export.profile_rows import task_cost
from export.profile_text import run_notes
from export.profile_peaks import checked_rows
from export.schedules import TaskSchedule

if TYPE_CHECKING:
    from export.flow import ExportReport


def profile_workload(workload: str | Workload, target: str | Target = "cpu", *,
                     schedules: Mapping[str, TaskSchedule] | None = None, shapes: str | None = None,
                     runs: int = 10, threads: int | None = None, ort: bool = True,
                     peak_gflops: float | None = None, memory: MemoryRoof | None = None, precision: str = "fp32",
                     calibration=None, family_peaks: tuple[FamilyPeak, ...] = ()) -> Profile:
    """Profile ``workload`` built for ``target`` (which must run here) with ``schedules`` at
    ``precision`` (:mod:`explorer.precision`; bf16: the bundle export ships, verified, a note saying which;
    int8: quantized with ``calibration``, and ONNX Runtime
    beside it runs the int8 model); with the machine's peaks
    (:class:`explorer.measure.calibration.Calibration`'s: ``peak_gflops`` the fp32 one, ``family_peaks``
    its ``families``), each kernel's % of its family's peak and its roofline: the bandwidth of where
    its bytes fit in, of ``memory``'s tiers: the L1 caches, the L2 caches, the L3 or memory
    (:meth:`explorer.measure.cache_peak.CachePeak.memory_roof`; None: no rooflines)."""
    from export.flow import bf16_shipped_note, export_to_time

    target = parse_target(target)
    target.require_runnable("profile")
    if isinstance(workload, str):
        workload = load_workload(workload, shapes)
    from export.build import as_built

    workload = as_built(workload, target, precision, calibration)[0]  # what is built and profiled, ONNX Runtime's too
    with private_temp_dir("schedx-profile-") as tmp:
        report = export_to_time(workload, target, Path(tmp) / "bundle", schedules=schedules, threads=threads,
                                precision=precision)
        profile = profile_export(report, workload, runs=runs, threads=threads, ort=ort, peak_gflops=peak_gflops,
                                 memory=memory, family_peaks=family_peaks)
    # (first: what the figures are of; the command export ships it with: records, or none)
    shipped = bf16_shipped_note(report, records=bool(schedules))
    return replace(profile, notes=(shipped, *profile.notes), unreached=report.unreached) if shipped else profile


def profile_export(report: ExportReport, workload: Workload, *, runs: int = 10, threads: int | None = None,
                   ort: bool = True, peak_gflops: float | None = None, memory: MemoryRoof | None = None,
                   family_peaks: tuple[FamilyPeak, ...] = ()) -> Profile:
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
    per_call = instrument_cost(calls, end_to_end_s)
    costs = [task_cost(o.task, o.schedule, o.record_id) for o in report.built.outcomes]
    checked = checked_rows(costs, calls, per_call, peak_gflops=peak_gflops, memory=memory, family_peaks=family_peaks)
    peak_gflops, family_peaks, memory = checked.peak_gflops, checked.family_peaks, checked.memory
    kernels, kernels_s, other_s = checked.rows.kernels, checked.rows.kernels_s, checked.rows.other_s
    notes = run_notes(instrumented_s=child["profile"]["instrumented_run_s"], plain_s=end_to_end_s, per_call=per_call,
                      kernels=kernels, rows_s=kernels_s + other_s, unsure=checked.unsure)
    notes += [*checked.peak_notes, *checked.roof_notes]
    notes += report.built.fallbacks  # kernels whose default rule failed: a slow row's likely cause
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
                   memory=memory, roofline_peak_gflops=checked.rows.roofline_peak_gflops, openvino=anchors,
                   family_peaks=family_peaks, roofline_peaks=checked.rows.roofline_peaks,
                   roof_notes=checked.roof_notes)


def instrument_cost(calls: Mapping[str, dict], plain_s: float) -> float:
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


__all__ = ["instrument_cost", "ort_profile", "profile_export", "profile_workload"]
