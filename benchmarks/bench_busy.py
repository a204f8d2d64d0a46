"""Benchmark: a bundle's latency on a busy machine (issue 51 item 5), beside ONNX Runtime.

For each model: the default bundle (no records) is exported and verified, then timed with no load
started and beside ``--busy`` spinning processes that this benchmark starts and stops
(:mod:`export.busy_load`), in alternated rounds, each bundle round a fresh process:
``tvm`` (as shipped: idle workers sleep at once, ``TVM_THREAD_POOL_SPIN_COUNT=0``, when other
processes' threads are runnable as it starts, :mod:`export.runner.threads`), ``tvm, TVM's default
spin`` (300000 yields) and ONNX Runtime, all at
``--threads``. Prints the medians, their 95% intervals, the ratios to ONNX Runtime and
``/proc/loadavg`` before and after each condition (other work on the machine counts too).

Run: ``python -m benchmarks.bench_busy [--models mobilenet_v2] [--busy 3] [--rounds 5] [--runs 20]``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.bench_models import bundle, machine, out

TVM_DEFAULT_SPIN = "300000"  # TVM's kDefaultSpinCount (src/runtime/thread_pool.cc)


@contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value  # the bundle's process inherits it; run.py keeps a value the user set
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def _loadavg() -> str:
    with open("/proc/loadavg") as f:
        return f.read().strip()


def bench(model: str, opts, target, tmp: Path) -> dict:
    from explorer.workload import load_workload
    from export.bench import alternate, bundle_row, ort_row
    from export.busy_load import busy_processes

    workload = load_workload(model)
    folder = bundle(workload, target, tmp / model, None)
    inputs = workload.sample_inputs()

    def tvm(name: str, spin: str | None):
        def run(runs: int, budget_s: float):
            if spin is None:
                return bundle_row(folder, name, threads=opts.threads, runs=runs, budget_s=budget_s)[0]
            with _env("TVM_THREAD_POOL_SPIN_COUNT", spin):
                return bundle_row(folder, name, threads=opts.threads, runs=runs, budget_s=budget_s)[0]
        return run

    contenders = {"tvm": tvm("tvm", None), "tvm, TVM's default spin": tvm("tvm, TVM's default spin", TVM_DEFAULT_SPIN),
                  "onnxruntime": lambda runs, budget_s: ort_row(workload.onnx_model, inputs, threads=opts.threads,
                                                                runs=runs, budget_s=budget_s)}
    result: dict = {"model": model}
    for busy in (0, opts.busy):
        before = _loadavg()
        with busy_processes(busy):
            rows, _ = alternate(contenders, rounds=opts.rounds, runs=opts.runs * opts.rounds,
                                budget_s=opts.budget * opts.rounds)
            after = _loadavg()
        ort_ms = rows["onnxruntime"].median_s * 1e3
        result[f"busy {busy}"] = {
            "loadavg": [before, after],
            "median_ms": {n: round(r.median_s * 1e3, 2) for n, r in rows.items()},
            "ci_ms": {n: [round(r.ci_low_s * 1e3, 2), round(r.ci_high_s * 1e3, 2)] for n, r in rows.items()
                      if r.ci_low_s is not None},
            "over_onnxruntime": {n: round(r.median_s * 1e3 / ort_ms, 2) for n, r in rows.items()}}
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["mobilenet_v2"])
    ap.add_argument("--busy", type=int, default=3, help="busy processes started for the loaded condition")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20, help="runs per contender per round")
    ap.add_argument("--budget", type=float, default=8.0, help="seconds per contender per round")
    opts = ap.parse_args()
    from explorer.target import host_target

    out(json.dumps({"machine": machine(), "threads": opts.threads, "busy": opts.busy, "rounds": opts.rounds}))
    target = host_target()
    with tempfile.TemporaryDirectory(prefix="schedx-bench-busy-") as tmp:
        for model in opts.models:
            out(json.dumps(bench(model, opts, target, Path(tmp)), indent=1))


if __name__ == "__main__":
    main()
