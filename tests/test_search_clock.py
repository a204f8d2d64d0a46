"""A search job's clock as every front end reads it (issue 52): the ETA of a time budget is its rest,
not the pace against ten million "unlimited" trials; elapsed runs on one clock and never goes back."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from search.job_spec import JobProgress, estimate_eta_s
from search.jobs import job_elapsed_s, job_eta_s
from search.params import UNLIMITED_TRIALS
from store import Job

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def _job(status: str, *, ran_s: float, written_s: float | None = None) -> Job:
    """A job created at T0 whose row last changed ``written_s`` (default ``ran_s``) seconds later."""
    written = T0 + timedelta(seconds=ran_s if written_s is None else written_s)
    return Job(id=1, kind="tune", status=status, params={}, progress={}, pid=None, created=T0.isoformat(),
               updated=written.isoformat())


def test_the_eta_of_a_time_budget_is_its_rest():
    # a 1-minute budget, unlimited trials, 32 trials in 20 s: 40 s left (it read 9,790,457 s)
    assert estimate_eta_s(elapsed_s=20.0, trials=32, total_trials=UNLIMITED_TRIALS, time_left_s=40.0) == 40.0
    # trials only: the pace so far for the trials left
    assert estimate_eta_s(elapsed_s=20.0, trials=32, total_trials=64, time_left_s=None) == pytest.approx(20.0)
    # both: the sooner end
    assert estimate_eta_s(elapsed_s=20.0, trials=32, total_trials=64, time_left_s=5.0) == 5.0
    assert estimate_eta_s(elapsed_s=20.0, trials=32, total_trials=64, time_left_s=300.0) == pytest.approx(20.0)
    # a budget spent (the last batch ran over): 0, not a negative time
    assert estimate_eta_s(elapsed_s=70.0, trials=96, total_trials=UNLIMITED_TRIALS, time_left_s=-10.0) == 0.0
    # nothing measured yet and no clock: unknown
    assert estimate_eta_s(elapsed_s=3.0, trials=0, total_trials=64) is None
    assert estimate_eta_s(elapsed_s=3.0, trials=0, total_trials=UNLIMITED_TRIALS) is None


def test_a_batch_of_a_minutes_search_reports_the_budgets_rest():
    """What the job row and the CLI's batch line get: the search's own accounting of a batch."""
    from search.callbacks import SearchState, _Batch, account
    from search.tune import TuneSummary

    reports = []
    task = SimpleNamespace(name="m/matmul", weight=1, flops=2 * 64**3)
    ok = SimpleNamespace(status="ok", gflops=10.0, verified=True, error="")
    state = SearchState(store=None, tasks=[task], target_key="llvm", hardware="test", job_id=None,
                        total_trials=UNLIMITED_TRIALS, environment={}, on_batch=reports.append,
                        summary=TuneSummary())
    state.start = time.perf_counter() - 20.0  # a 1-minute budget, 20 s in: 40 s left
    state.deadline = time.monotonic() + 40.0
    account(state, _Batch(task=0, records=[ok] * 16, cached=0, size=16))
    assert reports and reports[-1].eta_s is not None and 35.0 <= reports[-1].eta_s <= 40.0, reports[-1]


def test_elapsed_runs_on_one_clock_and_never_goes_back():
    """Issue 52: 44 s while the job ran, 36 s once it had stopped (the search's own clock, which
    starts once TVM is imported and the tasks extracted); 115 s -> 98 s at the end."""
    running = _job("running", ran_s=0.0)
    shown = [job_elapsed_s(running, now=T0 + timedelta(seconds=s)) for s in (10, 30, 44)]
    assert shown == [10.0, 30.0, 44.0]
    stopped = _job("stopped", ran_s=44.5)  # its row last changed when it stopped
    assert job_elapsed_s(stopped, now=T0 + timedelta(seconds=500)) == 44.5 >= shown[-1]
    assert job_elapsed_s(_job("done", ran_s=115.2), now=T0 + timedelta(days=2)) == 115.2
    assert job_elapsed_s(Job(id=1, kind="tune", status="done", params={}, progress={}, pid=None,
                             created="not a time", updated="")) is None


def test_a_running_jobs_eta_counts_down_between_batches():
    progress = JobProgress(trials=32, total=UNLIMITED_TRIALS, elapsed_s=20.0, eta_s=40.0)
    job = _job("running", ran_s=0.0, written_s=20.0)  # its last batch written 20 s in
    assert job_eta_s(job, progress, now=T0 + timedelta(seconds=20)) == 40.0
    assert job_eta_s(job, progress, now=T0 + timedelta(seconds=35)) == 25.0
    assert job_eta_s(job, progress, now=T0 + timedelta(seconds=90)) == 0.0  # past it: the last batch runs over
    assert job_eta_s(_job("stopped", ran_s=30.0), progress) is None  # an ended job has none
    assert job_eta_s(job, JobProgress(phase="confirm")) is None


def test_a_batch_starts_only_when_it_ends_nearer_the_deadline_than_stopping(monkeypatch):
    """--minutes kept within half a batch: with 3 s batches and 10 s, batches start at 0, 3 and 6
    s; at 9 s (1 s left, half a batch is 1.5 s) stopping misses by 1 s where a batch would by 2 s."""
    import search.stopping as stopping

    now = [100.0]
    monkeypatch.setattr(stopping.time, "monotonic", lambda: now[0])
    stop = stopping.StopRequest()
    stop.set_minutes(10 / 60)
    started = []
    while not stop.batch_starting():
        started.append(now[0] - 100.0)
        now[0] += 3.0
        stop.batch_done()
    assert started == [0.0, 3.0, 6.0] and stop.reason == stopping.TIME_UP


def test_batches_in_flight_count_against_the_budget(monkeypatch):
    """MetaSchedule asks for a batch of every task before the first is measured: with 3 s batches,
    three in flight and 10 s left, a fourth would end at 12 s: it does not start."""
    import search.stopping as stopping

    now = [100.0]
    monkeypatch.setattr(stopping.time, "monotonic", lambda: now[0])
    stop = stopping.StopRequest()
    stop.set_minutes(20 / 60)
    assert not stop.batch_starting()  # the first, at 0 s
    now[0] += 3.0
    stop.batch_done()  # measured at 3 s: 3 s a batch
    now[0] += 7.0  # at 10 s, 10 s left: three batches go out
    assert [stop.batch_starting() for _ in range(3)] == [False, False, False]
    assert stop.batch_starting() and stop.reason == stopping.TIME_UP  # (3 in flight + 0.5) x 3 s > 10 s


def test_a_time_budget_counts_from_the_commands_start(tmp_path):
    """The budget is wall time from the StopRequest's birth (the command's first line), start-up
    included; a search whose start-up ate its budget measures nothing instead of a budget more."""
    from explorer.kernels import builtin_kernel
    from explorer.target import host_target
    from explorer.workload import kernel_task
    from search.job_spec import ValidJob
    from search.params import SearchParams
    from search.stopping import StopRequest
    from search.tune import SearchHooks, tune
    from store import Store
    from tests.fake_measure import FakeBuilder, FakeRunner

    stop = StopRequest()
    stop.started -= 30.0  # the command started 30 s ago (loading a model, say)
    task = kernel_task(builtin_kernel("matmul", M=32, N=32, K=32))
    params = SearchParams(trials=100_000, per_batch=4, minutes=0.5, population=32, generations=1,
                          init_min_unmeasured=8, cost_model="random", defaults_first=False, confirm_rounds=0)
    summary = tune(ValidJob.of_tasks([task], host_target()), Store(tmp_path / "s.db"), params,
                   SearchHooks(stop=stop), builder=FakeBuilder(), runner=FakeRunner())
    assert summary.trials == 0 and summary.stopped == "time budget"
    assert summary.seconds >= 30.0  # elapsed on the same clock: from the command's start


# What the wall clock of `schedx tune` holds besides its budget: the interpreter's start before the
# command's first line, writing the summary and the process's exit; seconds on a loaded 2-core machine.
OUTSIDE_THE_BUDGET_S = 5.0


@pytest.mark.slow
def test_a_one_minute_search_takes_a_minute_of_wall_time(tmp_path):
    """Issue 52: a 1-minute small_cnn search took 117 s of wall time (its clock started inside the
    search, after start-up, and the last batch and the confirmation round ran past it). Now the
    minute counts from the command's start and holds the confirmation round: within 10 %, or, on a
    machine so loaded that start-up alone ate the budget, over by no more than the start-up the
    summary names."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    minutes = 1.0
    root = Path(__file__).resolve().parent.parent
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "app.cli", "tune", "small_cnn", "--minutes", str(minutes), "--db",
                           str(tmp_path / "clock.db"), "--json"], cwd=root, capture_output=True, text=True,
                          timeout=600)
    wall = time.monotonic() - start
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout[done.stdout.index("{"):])
    budget = minutes * 60
    kept = max(1.1 * budget, summary["startup_s"] + summary["confirm_s"])
    assert wall <= kept + OUTSIDE_THE_BUDGET_S, (wall, summary["startup_s"], summary["confirm_s"], summary["seconds"])
    assert summary["seconds"] <= wall and summary["stopped"] == "time budget"
    if summary["startup_s"] < budget / 2:  # time left to search: it searched, and used its minute
        assert summary["trials"] > 0 and wall >= 0.9 * budget, (wall, summary["trials"])
