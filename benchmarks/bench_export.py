"""Benchmark: export, verify and time deployable bundles.

Prints figures measured in this run (the machines here are shared and noisy):
  1. ResNet-18 exported for this CPU and verified (fresh process against ONNX Runtime, layer by
     layer): seconds per stage (target <= 60 s in all);
  2. ResNet-18 exported for sm_90 with the no-GPU checks (thread binding, nvcc): seconds;
  3. ``bench`` on small_cnn, resnet18 and mobilenet_v2: TVM with records, TVM untuned, ONNX
     Runtime, side by side (compile s, first ms, median ms, p90 ms) on the same threads.

Records: the database (``--db``, default: the default database) for this CPU and machine. With
``--hand`` (the default) the benchmark also writes, into a throw-away database, one measured
hand schedule per convolution (reorder the reduction outward, parallel over output channels,
vectorize the output row) so the "with records" row exists even before any search ran; they are
labelled as such. Run: ``python -m benchmarks.bench_export [--runs N] [--budget S] [--no-hand]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

CONV_STEPS = [
    {"primitive": "reorder", "args": {"loops": ["conv2d_nchw/nn", "conv2d_nchw/ff", "conv2d_nchw/yy",
                                                "conv2d_nchw/rc", "conv2d_nchw/ry", "conv2d_nchw/rx",
                                                "conv2d_nchw/xx"]}},
    {"primitive": "parallel", "args": {"loop": "conv2d_nchw/ff"}},
    {"primitive": "vectorize", "args": {"loop": "conv2d_nchw/xx"}},
]
MODELS = ("small_cnn", "resnet18", "mobilenet_v2")


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def hand_records(db_path: Path, model: str) -> int:
    """Measure the hand schedule on every convolution of ``model`` it applies to; store the
    verified ones as manual records. Returns how many were stored."""
    from explorer.target.environment import hardware_fingerprint
    from explorer.kernels.kernel import make_kernel
    from explorer.measure import measure
    from explorer.schedule.session import ScheduleSession
    from explorer.schedule.steps import ScheduleError, steps_from_json
    from explorer.workload import load_workload
    from search.records import store_workload
    from store import Record, Store

    workload = load_workload(model)
    stored = 0
    with Store(db_path) as store:
        for task in workload.tasks():
            if "conv2d" not in task.name:
                continue
            kernel = make_kernel(task.mod["main"], name=task.name, title=task.name.split("/")[-1],
                                 source=f"model:{model}", spec=task.name, params={"calls": task.calls})
            session = ScheduleSession(kernel.func)
            try:
                session.apply_all(steps_from_json(CONV_STEPS))
            except ScheduleError:
                continue  # e.g. a depthwise conv whose loops are named differently
            result = measure(kernel, session.mod, repeat=3, min_repeat_s=0.05)
            if not result.ok:
                continue
            key = store.add_workload(store_workload(kernel.func, name=kernel.name, kind="model_task"), replace=False)
            store.add_record(Record(workload_key=key, target=result.target, hardware=hardware_fingerprint(),
                                    source="manual", status="ok", steps=CONV_STEPS, trace=None,
                                    latencies=list(result.latencies), median_s=result.median_s, gflops=result.gflops,
                                    environment=result.environment, max_error=result.max_abs_error,
                                    verified=result.verified))
            stored += 1
    return stored


def schedules_for(model: str, db) -> dict:
    from explorer.target import parse_target
    from explorer.workload import load_workload
    from export.choose import best_schedules

    return best_schedules(db, load_workload(model).tasks(), parse_target("cpu"))[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="timed runs after the first (per contender)")
    parser.add_argument("--budget", type=float, default=15.0, help="seconds of timing per contender at most")
    parser.add_argument("--db", default=None, help="database with records (default: the default database)")
    parser.add_argument("--no-hand", action="store_true", help="skip the measured hand-schedule records")
    parser.add_argument("--models", default=",".join(MODELS))
    opts = parser.parse_args()

    from explorer.target.environment import cpu_info, hardware_fingerprint
    from export import export_workload
    from export.bench import bench_workload

    out(f"machine: {hardware_fingerprint()}, {cpu_info()['usable_cores']} usable cores")
    with tempfile.TemporaryDirectory(prefix="schedx-bench-export-") as tmp:
        tmp = Path(tmp)
        start = time.perf_counter()
        report = export_workload("resnet18", "cpu", tmp / "resnet18-cpu", schedules=schedules_for("resnet18", opts.db))
        total = time.perf_counter() - start
        stages = ", ".join(f"{k} {v:.1f}" for k, v in report.seconds.items() if k != "total")
        out(f"\n1. ResNet-18 export + verify for CPU: {total:.1f} s (target <= 60 s) [{stages}]")
        out(f"   {report.verification.summary()}")
        out(f"   {report.layers.summary()}")

        start = time.perf_counter()
        cuda = export_workload("resnet18", "cuda:sm_90", tmp / "resnet18-sm90", layers=False)
        out(f"\n2. ResNet-18 export for sm_90 (no GPU here): {time.perf_counter() - start:.1f} s")
        out(f"   {cuda.cuda.summary()}")

        out("\n3. bench: the three figures side by side")
        for model in [m for m in opts.models.split(",") if m]:
            schedules = schedules_for(model, opts.db)
            label = "database"
            if not schedules and not opts.no_hand:
                hand_db = tmp / f"hand-{model}.db"
                start = time.perf_counter()
                stored = hand_records(hand_db, model)
                schedules = schedules_for(model, hand_db) if stored else {}
                label = f"hand schedules measured now ({stored} convs, {time.perf_counter() - start:.0f} s)"
            report = bench_workload(model, schedules=schedules, runs=opts.runs, budget_s=opts.budget)
            out("")
            out(report.table())
            if schedules:
                out(f"note: records from {label}")


if __name__ == "__main__":
    main()
