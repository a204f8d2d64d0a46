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
from search.job_spec import ValidJob
from search.tune import SearchHooks, tune
from store import Store
from tests.fake_measure import FakeBuilder, FakeRunner

pytestmark = pytest.mark.heavy  # real builds or searches: left out of make test-fast

# the confirmation round and the default's variants are tested on their own (they add records)
FAST = dict(population=32, generations=1, init_min_unmeasured=8, confirm_rounds=0, default_variants=0)


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


def test_a_pool_gets_the_default_rules_without_tvms_unknown_rule_warning(capfd):
    """TOPI's max pool names a custom rule (``meta_schedule.pool_max``) TVM registers for no target:
    MetaSchedule warned on every search and fell back to the default rules; schedx registers that
    fallback, so the sketches are the same and nothing is logged."""
    from explorer.workload.model_kernels import load_kernel

    k = load_kernel("small_cnn/max_pool2d")
    assert '"schedule_rule": "meta_schedule.pool_max"' in k.func.script()
    sketches = generate_sketches(k, host_target())
    assert sketches and all("ParallelizeVectorizeUnroll" in s.rules for s in sketches)
    assert "Unknown schedule rule" not in capfd.readouterr().err


@pytest.mark.parametrize("bad", [dict(trials=0), dict(per_batch=-1), dict(eps_greedy=2.0), dict(cost_model="nn")])
def test_bad_parameters_are_refused(bad):
    with pytest.raises(SearchError):
        SearchParams(**bad)


def test_search_loop_with_fakes_records_every_batch_and_resumes_without_remeasuring(tmp_path):
    k = builtin_kernel("matmul", M=64, N=64, K=64)
    store = Store(tmp_path / "s.db")
    params = SearchParams(trials=16, per_batch=8, cost_model="random", **FAST)
    runner, reports = FakeRunner(fail_every=7), []
    summary = tune(ValidJob.of_tasks([kernel_task(k)], host_target()), store, params,
                   SearchHooks(on_batch=reports.append), builder=FakeBuilder(), runner=runner)
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
    summary2 = tune(ValidJob.of_tasks([kernel_task(k)], host_target()), store, params, builder=FakeBuilder(),
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


def test_a_kernel_with_no_flops_that_ran_is_not_a_failure():
    """Issue 52: a transpose (0 FLOPs: its records have no GFLOPS) was listed as "failed 1" on the
    Search page while its record said ``ok``: failures are counted by outcome."""
    from store import Record

    def rec(i, key, status, gflops):
        return Record(workload_key=key, target="t", hardware="h", source="search", status=status, steps=[],
                      trace=None, latencies=[1e-6], median_s=1e-6, gflops=gflops, environment={}, id=i,
                      created=f"2026-01-01T00:00:{i:02d}", error="" if status == "ok" else "it crashed")

    recs = [rec(1, "tr", "ok", 0.0), rec(2, "tr", "ok", None), rec(3, "mm", "ok", 12.0),
            rec(4, "mm", "run_error", None)]
    s = job_series(recs, {"tr": "m/transpose", "mm": "m/matmul"}, per_batch=4)
    rows = {r["task"]: r for r in s.task_rows()}
    assert rows["m/transpose"]["failed"] == 0 and rows["m/transpose"]["trials"] == 2
    assert rows["m/transpose"]["best GFLOPS"] is None  # it ran, at no rate: nothing to plot, nothing failed
    assert rows["m/matmul"]["failed"] == 1 and rows["m/matmul"]["best GFLOPS"] == 12.0
    assert [r.id for r in s.failures] == [4] and s.failure_counts == {"run_error": 1}


def test_real_tiny_search_killed_then_resumed_measures_nothing_twice(tmp_path):
    from search.job_spec import JobSpec
    from search.jobs import refresh, start_job

    db = tmp_path / "real.db"
    store = Store(db)
    # no defaults round: every record is in a batch of 4; three batches, so the kill lands before the last ends.
    # A random cost model: what is measured twice or not is the store's claims, not the model (XGBoost's
    # training was 18 s of a 26 s tune of these 12 trials, on a busy 2-core machine)
    spec = JobSpec(workload="matmul:M=128,N=128,K=128",
                   params=SearchParams(trials=12, per_batch=4, defaults_first=False, cost_model="random", **FAST))
    job = start_job(store, spec)
    deadline = time.time() + 240
    while time.time() < deadline and store.count(job_id=job.id) < 4:
        time.sleep(0.1)
    assert store.count(job_id=job.id) >= 4, "no batch landed in time"
    os.killpg(job.pid, signal.SIGKILL)  # kill -9 in the middle of the search
    time.sleep(1.0)
    before = store.records(job_id=job.id)
    assert len(before) % 4 == 0  # whole batches only
    assert next(j for j in refresh(store) if j.id == job.id).status == "failed"
    summary = tune(ValidJob.of_tasks([kernel_task(builtin_kernel("matmul", M=128, N=128, K=128))], host_target()),
                   store, SearchParams(trials=12, per_batch=4, cost_model="random", **FAST))
    hashes = [r.candidate for r in store.records()]
    assert len(hashes) == len(set(hashes))
    assert summary.measured + summary.failed == summary.trials == 12


def test_the_default_schedule_is_measured_first_and_export_takes_the_faster(tmp_path):
    """A search measures each task's default schedule first (source default): an export then
    applies a search record only when it beat the default in the same conditions."""
    from explorer.target import parse_target
    from explorer.workload import load_workload
    from export.choose import best_schedules

    k = builtin_kernel("matmul", M=64, N=64, K=64)
    store = Store(tmp_path / "d.db")
    params = SearchParams(trials=9, per_batch=8, cost_model="random", **FAST)
    tune(ValidJob.of_tasks([kernel_task(k)], host_target()), store, params, builder=FakeBuilder(),
         runner=FakeRunner())
    records = store.records(order="id")
    default = records[0]
    assert default.source == "default" and default.trace is not None and default.status == "ok"
    assert [r.source for r in records[1:]] == ["search"] * 8
    workload = load_workload("matmul:M=64,N=64,K=64")
    schedules, choices = best_schedules(store, workload.tasks(), parse_target("cpu"))
    fastest = min((r for r in records if r.status == "ok"), key=lambda r: r.median_s)
    assert choices[0].best.id == fastest.id  # whichever is faster, default included
    name = workload.tasks()[0].name  # the default's record means the default schedule, built from the rules
    assert (schedules[name].record_id == fastest.id) if fastest.source == "search" else name not in schedules
    again = tune(ValidJob.of_tasks([kernel_task(k)], host_target()), store,
                 SearchParams(trials=8, per_batch=8, cost_model="random", **FAST), builder=FakeBuilder(),
                 runner=FakeRunner())
    assert again.cached >= 1 and sum(r.source == "default" for r in store.records()) == 1  # measured once


def test_the_defaults_design_space_is_measured_after_the_default_heaviest_task_first(tmp_path):
    """After the default, the default rules with one choice changed (the next register tiles by
    the ranking, ...) are measured as search candidates that name their variant; they take at
    most half a trial budget and leave the rest to MetaSchedule's sketches."""
    k = builtin_kernel("matmul", M=64, N=64, K=64)
    store = Store(tmp_path / "v.db")
    params = SearchParams(trials=8, per_batch=4, cost_model="random", **{**FAST, "default_variants": 3})
    summary = tune(ValidJob.of_tasks([kernel_task(k)], host_target()), store, params, builder=FakeBuilder(),
                   runner=FakeRunner())
    records = store.records(order="id")
    variants = [r for r in records if "default_variant" in r.environment]
    assert records[0].source == "default" and records[1:4] == variants  # right after the default
    assert [r.environment["default_variant"] for r in variants] == [
        "default rules, tile ranked 2", "default rules, tile ranked 3", "default rules, tile ranked 4"]
    assert all(r.source == "search" and r.trace and r.steps for r in variants)
    assert len({r.candidate for r in records}) == len(records) == summary.trials == 8  # 4 left to the sketches
    off = Store(tmp_path / "off.db")
    tune(ValidJob.of_tasks([kernel_task(k)], host_target()), off,
         SearchParams(trials=4, per_batch=4, cost_model="random", **FAST), builder=FakeBuilder(), runner=FakeRunner())
    assert not any("default_variant" in r.environment for r in off.records())
    with pytest.raises(SearchError, match="default_variants"):
        SearchParams(default_variants=7)


def test_the_confirmation_round_times_the_best_again_and_a_lucky_record_loses_to_the_default(tmp_path):
    """Every search candidate is timed once; the confirmation round times each task's fastest
    schedules and its default again, in turns, and the export applies the first of that: a record
    that was fast only the first time (LuckyRunner) no longer beats the default."""
    from explorer.target import parse_target
    from explorer.workload import load_workload
    from export.choose import best_schedules
    from tests.fake_measure import LuckyRunner

    k = builtin_kernel("matmul", M=64, N=64, K=64)
    task = load_workload("matmul:M=64,N=64,K=64").tasks()[0]
    params = dict(trials=8, per_batch=8, cost_model="random", **FAST)
    unconfirmed = Store(tmp_path / "u.db")
    tune(ValidJob.of_tasks([kernel_task(k)], host_target()), unconfirmed, SearchParams(**params),
         builder=FakeBuilder(), runner=LuckyRunner())
    best = best_schedules(unconfirmed, [task], parse_target("cpu"))[0][task.name]
    assert best.source == "search" and best.median_s == pytest.approx(5e-5)  # the lucky one ships

    store, runner = Store(tmp_path / "c.db"), LuckyRunner()
    summary = tune(ValidJob.of_tasks([kernel_task(k)], host_target()), store,
                   SearchParams(**{**params, "confirm_rounds": 3}), builder=FakeBuilder(), runner=runner)
    (confirmation,) = summary.confirmed
    assert confirmation["overturned"] and confirmation["before_source"] == "search"
    assert confirmation["after_source"] == "default" and confirmation["after_s"] == pytest.approx(1e-4)
    assert confirmation["after_origin"] == "default" and confirmation["default_s"] == pytest.approx(1e-4)
    assert confirmation["gain_s"] == 0 and confirmation["calls"] == 1  # the default kept: nothing gained
    schedules, (choice,) = best_schedules(store, [task], parse_target("cpu"))
    assert choice.best.source == "default" and choice.best.median_s == pytest.approx(1e-4)
    assert task.name not in schedules  # the export builds the default schedule from the rules
    confirmed = [r for r in store.records(order="id") if "confirmation" in r.environment]
    assert all(len(r.latencies) == 3 and r.environment["confirmation"]["rounds"] == 3 for r in confirmed)
    # a pass times the three fastest schedules and the default, three rounds in turns; while the
    # fastest time left is a single timing (here: every lucky one), the next ones get a pass
    searched = [r for r in store.records() if "confirmation" not in r.environment]
    timed = runner.ran[len(searched):len(searched) + 12]  # the first pass, after the search's runs
    assert timed[:4] == timed[4:8] == timed[8:] and len(set(timed[:4])) == 4
    assert {r.candidate for r in confirmed} == {r.candidate for r in searched}  # every lucky one, in 3 passes
    assert sum(r.source == "default" for r in confirmed) == 3  # the default in every pass
    assert summary.trials == 8 and confirmation["timed"] == len(confirmed)  # the confirmation is not a trial
    # a second search: its new single timings (lucky again) are confirmed against the choice so far
    again = tune(ValidJob.of_tasks([kernel_task(k)], host_target()), store,
                 SearchParams(**{**params, "confirm_rounds": 3, "trials": 4}), builder=FakeBuilder(), runner=runner)
    assert [c["after_source"] for c in again.confirmed] == ["default"] and not again.unconfirmed
    assert best_schedules(store, [task], parse_target("cpu"))[1][0].best.source == "default"


def test_the_confirmation_round_reports_its_progress_to_the_caller_and_the_job_row(tmp_path):
    """The round after the search takes a minute or two on a model: each task it starts and its
    end reach ``on_batch`` (phase "confirm", tasks done of total) and the job row, so a progress
    bar or the Search page does not stand still; a report that fails stops the search with that
    error, as a failed batch report does."""
    from search.job_spec import JobProgress
    from tests.fake_measure import LuckyRunner

    k = builtin_kernel("matmul", M=64, N=64, K=64)
    store, reports = Store(tmp_path / "p.db"), []
    job = store.create_job("search", {})
    tune(ValidJob.of_tasks([kernel_task(k)], host_target()), store,
         SearchParams(trials=4, per_batch=4, cost_model="random", **{**FAST, "confirm_rounds": 2}),
         SearchHooks(on_batch=reports.append, job_id=job.id), builder=FakeBuilder(), runner=LuckyRunner())
    phases = [r.phase for r in reports]
    assert phases[0] == "search" and phases[-2:] == ["confirm", "confirm"]
    assert [(r.confirm_done, r.confirm_total) for r in reports if r.phase == "confirm"] == [(0, 1), (1, 1)]
    progress = JobProgress.from_dict(store.job(job.id).progress)
    assert (progress.phase, progress.confirm_done, progress.confirm_total) == ("confirm", 1, 1)
    assert progress.trials == 4

    def refuses(report):
        if report.phase == "confirm":
            raise OSError("the progress bar is gone")

    with pytest.raises(Exception, match="the progress bar is gone"):
        tune(ValidJob.of_tasks([kernel_task(k)], host_target()), Store(tmp_path / "q.db"),
             SearchParams(trials=4, per_batch=4, cost_model="random", **{**FAST, "confirm_rounds": 2}),
             SearchHooks(on_batch=refuses), builder=FakeBuilder(), runner=LuckyRunner())


def test_a_schedule_that_fails_its_confirmation_no_longer_ranks(tmp_path):
    """A re-run that computes something else (or crashes) is recorded as that failure: the
    schedule's older, faster record no longer ranks, and the export takes the default."""
    from explorer.target import parse_target
    from explorer.workload import load_workload
    from export.choose import best_schedules
    from tests.fake_measure import LuckyRunner

    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from tests.fake_measure import DoneFuture

    class FailsAgain(LuckyRunner):
        def run(self, runner_inputs):
            results = super().run(runner_inputs)
            h = str(runner_inputs[0].artifact_path).split(":", 1)[1]
            if self.ran.count(h) > 1 and h != self.ran[0]:  # a search schedule's second run
                return [DoneFuture(RunnerResult(None, "run failed: the output differs"))]
            return results

    k = builtin_kernel("matmul", M=64, N=64, K=64)
    task = load_workload("matmul:M=64,N=64,K=64").tasks()[0]
    store = Store(tmp_path / "f.db")
    summary = tune(ValidJob.of_tasks([kernel_task(k)], host_target()), store,
                   SearchParams(trials=4, per_batch=4, cost_model="random", **{**FAST, "confirm_rounds": 2}),
                   builder=FakeBuilder(), runner=FailsAgain())
    failed = [r for r in store.records() if "confirmation" in r.environment and r.status != "ok"]
    assert failed and all(r.source == "search" and r.error for r in failed)
    assert summary.confirmed[0]["after_source"] == "default"
    assert best_schedules(store, [task], parse_target("cpu"))[1][0].best.source == "default"
    ranked = store.schedules(workload=task.key)
    assert {r.candidate for r in ranked} & {r.candidate for r in failed} == set()  # gone from the ranking


def test_the_confirmation_round_ends_at_the_deadline_and_says_which_tasks_it_left(tmp_path):
    import time

    from search.callbacks import SearchState
    from search.confirm_round import confirm_bests

    k = builtin_kernel("matmul", M=64, N=64, K=64)
    task = kernel_task(k)
    store = Store(tmp_path / "t.db")
    tune(ValidJob.of_tasks([task], host_target()), store,
         SearchParams(trials=4, per_batch=4, cost_model="random", **FAST), builder=FakeBuilder(), runner=FakeRunner())
    state = SearchState(store=store, tasks=[task], target_key=store.records()[0].target,
                        hardware=store.records()[0].hardware, job_id=None, total_trials=0, environment={})
    done, left = confirm_bests(state, None, FakeBuilder(), FakeRunner(), rounds=3, deadline=time.monotonic() - 1)
    assert done == [] and "time budget" in left[task.name]
    assert not any("confirmation" in r.environment for r in store.records())


def test_a_time_budget_keeps_a_share_for_the_confirmation_round():
    from search.tune import CONFIRM_S_PER_TASK, _confirm_reserve_s

    assert _confirm_reserve_s(60, 20, SearchParams()) == 20 * CONFIRM_S_PER_TASK  # an hour, ResNet-18
    assert _confirm_reserve_s(0.1, 1, SearchParams()) == pytest.approx(0.6)  # at most a tenth of the budget
    assert _confirm_reserve_s(60, 20, SearchParams(confirm_rounds=0)) == 0
