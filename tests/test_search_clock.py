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
