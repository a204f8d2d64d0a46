"""Search: sketches, the search loop against deterministic fakes, true resume, a real tiny search
that is killed and resumed, bad parameters refused up front."""

from __future__ import annotations

import os
import signal
import time

import pytest

from explorer.kernels import builtin_kernel
from explorer.measure import check
from explorer.target import host_target
from explorer.schedule.session import ScheduleSession
from search.charts import job_series, spearman
from search.errors import SearchError
from search.params import SearchParams
from search.sketches import default_rule_names, generate_sketches, sample_schedule
from explorer.workload import kernel_task
from search.tune import tune
from store import Store
from tests.fake_measure import FakeBuilder, FakeRunner

FAST = dict(population=32, generations=1, init_min_unmeasured=8)


def test_sketches_show_open_decisions_and_sample_valid_schedules():
    k = builtin_kernel("matmul", M=64, N=64, K=64)
    target = host_target()
    assert "MultiLevelTiling" in default_rule_names(target)
    sketches = generate_sketches(k, target)
    assert len(sketches) >= 2
    s = sketches[0]
    assert "MultiLevelTiling" in s.rules and s.decisions >= 3
    split = next(st for st in s.open_steps if st.primitive == "split")
    assert all(isinstance(f, str) and f.startswith("?") for f in split.args["factors"])
    steps = sample_schedule(k, s, target, seed=3)
    session = ScheduleSession(k.func)
    session.apply_all(steps)
    ok, why = check(k, session.mod)
    assert ok, why


def test_rule_subset_and_unknown_rule():
    k = builtin_kernel("matmul", M=32, N=32, K=32)
    only = generate_sketches(k, host_target(), ["MultiLevelTiling"])
    assert only and all("ParallelizeVectorizeUnroll" not in s.rules for s in only)
    with pytest.raises(SearchError, match="unknown schedule rule"):
        generate_sketches(k, host_target(), ["Teleport"])


@pytest.mark.parametrize("bad", [dict(trials=0), dict(per_batch=-1), dict(eps_greedy=2.0), dict(cost_model="nn")])
def test_bad_parameters_are_refused(bad):
    with pytest.raises(SearchError):
        SearchParams(**bad)


def test_search_loop_with_fakes_records_every_batch_and_resumes_without_remeasuring(tmp_path):
    k = builtin_kernel("matmul", M=64, N=64, K=64)
    store = Store(tmp_path / "s.db")
    params = SearchParams(trials=16, per_batch=8, cost_model="random", **FAST)
    runner, reports = FakeRunner(fail_every=7), []
    summary = tune([kernel_task(k)], store=store, target=host_target(), params=params, builder=FakeBuilder(),
                   runner=runner, on_batch=reports.append)
    records = store.records()
    assert summary.trials == 16 and len(reports) >= 3 and reports[-1].trials == 16  # the default, then batches
    assert reports[0].trials == 1 and [r.source for r in store.records(order="id")][0] == "default"
    assert len(records) == summary.measured + summary.failed == len(runner.ran)
    failed = [r for r in records if r.status != "ok"]
    assert all(r.error and r.steps for r in failed)  # the failure table has the error and the steps
    assert all(r.gflops and r.source in ("search", "default") and r.trace for r in records if r.status == "ok")
    first = {r.candidate for r in records}
    # resume: the same search again measures nothing it already measured
    runner2 = FakeRunner(fail_every=7)
    summary2 = tune([kernel_task(k)], store=store, target=host_target(), params=params, builder=FakeBuilder(),
                    runner=runner2)
    assert not set(runner2.ran) & first
    hashes = [r.candidate for r in store.records()]
    assert len(hashes) == len(set(hashes))  # every trial measured once
    # the budget counts new measurements: candidates answered from the store are extra, not instead;
    # a top-up whose random samples the store all held ends the search (TVM's threaded sampling may
    # draw such a batch), so the last batch may fall short
    assert summary2.measured + summary2.failed == summary2.trials == len(runner2.ran)
    assert 16 - params.per_batch < summary2.trials <= 16
    assert len(store.records()) == 16 + summary2.trials


def test_charts_from_records(tmp_path):
    from store import Record

    recs = [Record(workload_key="w", target="t", hardware="h", source="search", status="ok" if i % 4 else "run_error",
                   steps=[], trace=None, latencies=[1.0], median_s=1.0, gflops=float(i), environment={},
                   predicted=float(i) + 0.5, id=i + 1, created=f"2026-01-01T00:00:{i:02d}") for i in range(8)]
    s = job_series(recs, {"w": "matmul"}, per_batch=4)
    assert s.best_so_far["matmul"][1][-1] == 7.0 and len(s.failures) == 2
    assert s.batch_corr and s.batch_corr[-1][1] == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0) and spearman([1], [1]) is None


def test_real_tiny_search_killed_then_resumed_measures_nothing_twice(tmp_path):
    from search.job_spec import JobSpec
    from search.jobs import refresh, start_job

    db = tmp_path / "real.db"
    store = Store(db)
    spec = JobSpec(workload="matmul:M=128,N=128,K=128",  # no defaults round: every record is in a batch of 4
                   params=SearchParams(trials=16, per_batch=4, defaults_first=False, **FAST))
    job = start_job(store, spec)
    deadline = time.time() + 240
    while time.time() < deadline and store.count(job_id=job.id) < 4:
        time.sleep(0.5)
    assert store.count(job_id=job.id) >= 4, "no batch landed in time"
    os.killpg(job.pid, signal.SIGKILL)  # kill -9 in the middle of the search
    time.sleep(1.0)
    before = store.records(job_id=job.id)
    assert len(before) % 4 == 0  # whole batches only
    assert next(j for j in refresh(store) if j.id == job.id).status == "failed"
    summary = tune([kernel_task(builtin_kernel("matmul", M=128, N=128, K=128))], store=store,
                   target=host_target(), params=SearchParams(trials=16, per_batch=4, **FAST))
    hashes = [r.candidate for r in store.records()]
    assert len(hashes) == len(set(hashes))
    assert summary.measured + summary.failed == summary.trials == 16


def test_the_default_schedule_is_measured_first_and_export_takes_the_faster(tmp_path):
    """A search measures each task's default schedule first (source default): an export then
    applies a search record only when it beat the default in the same conditions."""
    from explorer.target import parse_target
    from explorer.workload import load_workload
    from export.choose import best_schedules

    k = builtin_kernel("matmul", M=64, N=64, K=64)
    store = Store(tmp_path / "d.db")
    params = SearchParams(trials=9, per_batch=8, cost_model="random", **FAST)
    tune([kernel_task(k)], store=store, target=host_target(), params=params, builder=FakeBuilder(),
         runner=FakeRunner())
    records = store.records(order="id")
    default = records[0]
    assert default.source == "default" and default.trace is not None and default.status == "ok"
    assert [r.source for r in records[1:]] == ["search"] * 8
    workload = load_workload("matmul:M=64,N=64,K=64")
    schedules, choices = best_schedules(store, workload.tasks(), parse_target("cpu"))
    fastest = min((r for r in records if r.status == "ok"), key=lambda r: r.median_s)
    assert schedules[workload.tasks()[0].name].record_id == fastest.id  # whichever is faster, default included
    again = tune([kernel_task(k)], store=store, target=host_target(), params=SearchParams(trials=8, per_batch=8,
                 cost_model="random", **FAST), builder=FakeBuilder(), runner=FakeRunner())
    assert again.cached >= 1 and sum(r.source == "default" for r in store.records()) == 1  # measured once
