"""Issue 51 item 5: a bundle's latency on a busy machine. TVM's idle workers spin (300000 yields)
between kernels; beside busy processes a spinning worker uses up its CPU share and runs last when a
kernel waits for it, so the bundle's run.py lets workers sleep at once (``TVM_THREAD_POOL_SPIN_COUNT=0``,
:mod:`export.runner.threads`) when other threads are runnable as it starts (on a quiet machine
spinning is faster); the README's loading code says how. The decision is tested as
data (which variables for which settings), on a real bundle's run.py, and, slow, by timing
MobileNetV2 beside three busy processes against ONNX Runtime (`schedx bench --busy`)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from export.runner.threads import (SPIN_COUNT, ThreadChoice, spin_count_for, thread_environment, threads_for,
                                   usable_cores)

SPIN = "TVM_THREAD_POOL_SPIN_COUNT"


@pytest.mark.parametrize(("threads", "user", "others", "want"), [
    # nothing set, nothing else runnable: the usable cores, unpinned, TVM's own spin
    (None, {}, 0, {"TVM_NUM_THREADS": str(usable_cores()), "TVM_BIND_THREADS": "0"}),
    # other processes' threads runnable as it starts: workers that sleep at once
    (None, {}, 2, {"TVM_NUM_THREADS": str(usable_cores()), "TVM_BIND_THREADS": "0", SPIN: str(SPIN_COUNT)}),
    # no /proc reading: TVM's own spin
    (None, {}, None, {"TVM_NUM_THREADS": str(usable_cores()), "TVM_BIND_THREADS": "0"}),
    # --threads wins over the user's TVM_NUM_THREADS; the user's spin and pinning are kept
    (1, {"TVM_NUM_THREADS": "4", SPIN: "1000", "TVM_BIND_THREADS": "1"}, 3,
     {"TVM_NUM_THREADS": "1", "TVM_BIND_THREADS": "1", SPIN: "1000"}),
    # OMP_NUM_THREADS (which TVM reads next) is left to TVM
    (None, {"OMP_NUM_THREADS": "3"}, 1, {"OMP_NUM_THREADS": "3", "TVM_BIND_THREADS": "0", SPIN: str(SPIN_COUNT)}),
])
def test_the_thread_pool_settings_a_bundle_runs_with(threads, user, others, want):
    env = dict(user)
    assert thread_environment(threads, env, others=others) == want
    assert env == {**user, **want}


def test_workers_sleep_at_once_only_beside_other_runnable_work():
    assert spin_count_for(2) == str(SPIN_COUNT) == "0" and spin_count_for(0) is None and spin_count_for(None) is None


@pytest.mark.parametrize(("others", "cores", "most", "want"), [
    (0, 2, 2, 2),   # quiet: every thread
    (1, 2, 2, 1),   # one other runnable thread on 2 cores: one thread, no chunk waits for a shared core
    (3, 2, 2, 1),   # never below one
    (3, 16, 16, 13),  # the cores the others leave free
    (0, 16, 8, 8),  # never above the pool's threads
    (-1, 2, 2, 2),  # a reading below zero counts as none
])
def test_threads_for_a_load_reading(others, cores, most, want):
    assert threads_for(others, cores, most) == want


def test_thread_choice_drops_at_once_and_comes_back_after_a_window_of_quiet_readings():
    readings, applied = iter([0, 2, 0, 0, 0, None]), []
    choice = ThreadChoice(2, cores=2, every_s=0.0, window=3, read=lambda: next(readings), apply=applied.append)
    got = [choice.before_run() for _ in range(6)]
    assert got == [2, 1, 1, 1, 2, 2]  # a None reading (no /proc) keeps the last choice
    assert applied == [1, 2] and choice.changes == 2


def test_thread_choice_reads_the_load_at_most_every_interval():
    calls = []
    choice = ThreadChoice(2, cores=2, every_s=60.0, read=lambda: calls.append(1) or 0, apply=lambda n: None)
    for _ in range(5):
        choice.before_run()
    assert len(calls) == 1


@pytest.mark.heavy
def test_a_bundles_run_py_lets_workers_sleep_unless_told(tmp_path):
    import os

    from export import export_workload

    # not verified here: the bundle's run.py checks its outputs against the bundle's references itself (below)
    report = export_workload("small_cnn", "cpu", tmp_path / "small_cnn", layers=False, verify=False)
    env = {k: v for k, v in os.environ.items() if k != SPIN}
    runner = [sys.executable, "-I", str(report.folder / "run.py"), "--json", "--without-torch"]
    for user, want in ((None, (None, "0")), ("300000", ("300000",))):  # unset: as the load it read decides
        proc = subprocess.run(runner, env={**env, **({SPIN: user} if user else {})}, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["spin_count"] in want
    assert f'os.environ.setdefault("{SPIN}", "0")' in (report.folder / "README.md").read_text()
    # beside three busy processes the runner starts with sleeping workers
    from export.busy_load import busy_processes

    with busy_processes(3):
        proc = subprocess.run(runner, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["spin_count"] == "0"
    proc = subprocess.run(runner + ["--runs", "3", "--adapt-threads"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert 1 <= r["threads_last"] <= int(r["threads"]) and r["check"]["verified"]


@pytest.mark.slow  # a MobileNetV2 export, then timings beside three busy processes (minutes on 2 busy cores)
def test_mobilenet_v2_beside_three_busy_processes_stays_near_onnx_runtime():
    """Issue 51 item 5: beside three busy processes on 2 cores MobileNetV2's default bundle ran 368 ms
    against ONNX Runtime's 16.5 ms (22x). Goal: within 2x; asserted at 3x (slack: this machine is
    shared, and other work comes and goes between rounds)."""
    from export.bench import DEFAULT_ROW, ORT_ROW
    from export.entry import BenchSpec, run_bench

    spec = BenchSpec(workload="mobilenet_v2", use_records=False, runs=30, budget_s=15.0, rounds=3, busy=3,
                     threads=2)
    report = run_bench(spec).report
    rows = {r.name: r for r in report.rows}
    ratio = rows[DEFAULT_ROW].median_s / rows[ORT_ROW].median_s
    assert any("3 busy process" in n for n in report.notes), report.notes
    assert ratio <= 3.0, report.table()
