"""The Search page under AppTest: empty database, a finished job's charts, starting and stopping."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from explorer.kernels import builtin_kernel
from explorer.target import host_target
from search.params import SearchParams
from explorer.workload import kernel_task
from search.job_spec import ValidJob
from search.tune import SearchHooks, tune
from store import Store
from tests.fake_measure import FakeBuilder, FakeRunner
from tests.bf16_models import mlp_path  # noqa: F401 - the fixture: a model whose matmuls become bf16
from tests.cpu_marks import HAS_BF16

pytestmark = pytest.mark.heavy  # real builds or searches: left out of make test-fast

PAGE = str(Path(__file__).resolve().parent.parent / "app" / "ui" / "search_page.py")


def _page(db) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=300)
    at.session_state["db_path"] = str(db)
    return at


def test_empty_database_says_how_to_start(tmp_path):
    at = _page(tmp_path / "empty.db").run()
    assert not at.exception
    assert any("No search yet" in i.value for i in at.info)


def test_a_job_shows_progress_charts_and_failures(tmp_path):
    db = tmp_path / "jobs.db"
    store = Store(db)
    job = store.create_job("tune", {"workload": "matmul:M=64,N=64,K=64", "params": {"per_batch": 8}})
    tune(ValidJob.of_tasks([kernel_task(builtin_kernel("matmul", M=64, N=64, K=64))], host_target()), store,
         SearchParams(trials=16, per_batch=8, population=32, generations=1, init_min_unmeasured=8),
         SearchHooks(job_id=job.id), builder=FakeBuilder(), runner=FakeRunner(fail_every=5))
    store.update_job(job.id, status="done")
    at = _page(db).run()
    assert not at.exception and not at.error
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["status"] == "done" and metrics["trials"] == "16/16"
    assert len(at.get("plotly_chart")) >= 3
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    assert len(titles) == len(set(titles)) and "trials over time" in titles, titles  # no chart twice
    assert any("Failed candidates" in m.value for m in at.markdown)
    # Optuna Dashboard's trial table and parameter view: every trial, and the sampled decisions of
    # the fastest schedules read against the default
    assert any(e.label.startswith("Every trial of this job (") for e in at.expander)
    assert any("Decisions of the fastest schedules" in m.value for m in at.markdown)
    decisions = next(h.proto.body for h in at.get("html") if "sx-dec" in h.proto.body)
    assert "tile loop 1" in decisions and "GFLOPS" in decisions
    timed_default = [r for r in store.records(job_id=job.id) if r.source == "default" and r.gflops and r.trace]
    if timed_default:  # (the fake runner fails every fifth run: the default's may be one of them)
        first = decisions.split('<th class="default">')[1]
        assert first.startswith(f"#{max(timed_default, key=lambda r: r.gflops).id} default<")  # the baseline first
        assert "the default" in decisions  # each winner read against it
    trials = next(d.value for d in at.dataframe if "schedule" in d.value.columns)  # named, never None
    assert set(trials["schedule"]) <= {"default", "MetaSchedule sketch"} | {
        r.environment.get("default_variant") for r in store.records(job_id=job.id)}


def test_start_and_stop_a_search_from_the_page(tmp_path):
    db = tmp_path / "start.db"
    at = _page(db).run()
    at.text_input(key="search_workload").input("matmul:M=64,N=64,K=64")
    at.number_input(key="search_trials").set_value(400)
    at.button[0].click().run()  # the form's submit button
    assert not at.exception and not at.error
    store = Store(db)
    job = store.jobs()[-1]
    assert job.status == "running" and job.pid
    at.run()
    stop = next(b for b in at.button if b.label == "Stop this job")
    stop.click().run()
    deadline = time.time() + 30
    while time.time() < deadline and Store(db).job(job.id).status == "running":
        time.sleep(0.5)
    assert Store(db).job(job.id).status == "stopped"


def test_the_form_refuses_invalid_workloads_before_any_job_starts(tmp_path):
    db = tmp_path / "bad.db"
    for bad, words in (("nosuchop", "nosuchop"), ("matmul:M=abc", "whole number"), ("matmul:M=8,Q=3", "no parameter Q")):
        at = _page(db).run()
        at.text_input(key="search_workload").input(bad)
        at.button[0].click().run()
        assert not at.exception
        assert at.error and words in at.error[0].value, [e.value for e in at.error]
        assert Store(db).jobs() == []  # nothing started


def test_the_picker_follows_the_job_just_started_and_a_stopped_job_has_no_eta(tmp_path):
    db = tmp_path / "follow.db"
    store = Store(db)
    old = store.create_job("tune", {"workload": "matmul:M=32,N=32,K=32", "params": {"trials": 8}})
    store.update_job(old.id, status="done")
    at = _page(db).run()
    assert at.selectbox(key="job_pick").value == old.id
    at.text_input(key="search_workload").input("matmul:M=64,N=64,K=64")
    at.number_input(key="search_trials").set_value(400)
    at.button[0].click().run()
    new = Store(db).jobs()[-1]
    assert new.id != old.id and at.selectbox(key="job_pick").value == new.id
    at.run()
    next(b for b in at.button if b.label == "Stop this job").click().run()
    deadline = time.time() + 30
    while time.time() < deadline and Store(db).job(new.id).status == "running":
        time.sleep(0.5)
    at.run()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["status"] == "stopped" and metrics["ETA"] == "-"
    assert not any(e.value.strip().endswith(":") for e in at.error)  # no empty reason


def test_a_model_job_shows_every_task_and_the_job_history(tmp_path):
    from explorer.workload import load_workload

    db = tmp_path / "model.db"
    store = Store(db)
    job = store.create_job("tune", {"workload": "small_cnn", "params": {"per_batch": 8}})
    tune(ValidJob.of_tasks(load_workload("small_cnn").tasks()[:3], host_target()), store,
         SearchParams(trials=24, per_batch=8, population=32, generations=1, init_min_unmeasured=8),
         SearchHooks(job_id=job.id), builder=FakeBuilder(), runner=FakeRunner())
    store.update_job(job.id, status="done")
    at = _page(db).run()
    assert not at.exception and not at.error
    picker = at.selectbox(key="search_task_pick")
    assert picker.options[0] == "all tasks" and len(picker.options) == 4
    rows = at.dataframe[0].value
    assert set(rows.columns) >= {"task", "trials", "best GFLOPS"} and len(rows) == 3
    picker.set_value(picker.options[1]).run()
    assert not at.exception and len(at.get("plotly_chart")) >= 2
    assert any("All jobs" in e.label for e in at.expander)


def test_the_form_checks_a_models_shapes_before_any_job_starts(tmp_path):
    import onnx

    from tests.conftest import tiny_cnn

    path = tmp_path / "batchless.onnx"
    onnx.save(tiny_cnn(batch="N"), path)
    db = tmp_path / "shapes.db"
    for shapes, words in (("", "N"), ("input:2xabc", "abc")):
        at = _page(db).run()
        at.text_input(key="search_workload").input(str(path))
        at.text_input(key="search_shapes").input(shapes)
        at.button[0].click().run()
        assert not at.exception
        assert at.error and words in at.error[0].value, [e.value for e in at.error]
        assert Store(db).jobs() == []
    at = _page(db).run()
    at.text_input(key="search_workload").input(str(path))
    at.text_input(key="search_shapes").input("input:2x3x16x16")
    at.number_input(key="search_trials").set_value(400)
    at.button[0].click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    job = Store(db).jobs()[-1]
    assert job.params["shapes"] == "input:2x3x16x16", job.params
    at.run()
    next(b for b in at.button if b.label == "Stop this job").click().run()
    deadline = time.time() + 30
    while time.time() < deadline and Store(db).job(job.id).status == "running":
        time.sleep(0.5)
    assert Store(db).job(job.id).status == "stopped"


def test_elapsed_ticks_between_batches_and_a_minutes_budget_starts_from_the_form(tmp_path):
    """A running job's elapsed time counts from its start (the job row changes only per batch);
    the form takes a time budget as the CLI's --minutes does; the picker's label holds nothing
    that goes stale (status and trials are live in the header)."""
    import os
    import sqlite3
    from datetime import datetime, timedelta, timezone

    from search.job_spec import JobSpec
    from search.params import UNLIMITED_TRIALS

    db = tmp_path / "tick.db"
    store = Store(db)
    job = store.create_job("tune", {"workload": "matmul:M=32,N=32,K=32", "params": {"trials": 48}})
    store.update_job(job.id, status="running", pid=os.getpid())
    started = (datetime.now(timezone.utc) - timedelta(seconds=45)).isoformat()
    with sqlite3.connect(db) as conn:  # a job that started 45 s ago and has written no batch yet
        conn.execute("UPDATE jobs SET created = ? WHERE id = ?", [started, job.id])
    at = _page(db).run()
    metrics = {m.label: m.value for m in at.metric}
    label = at.selectbox(key="job_pick").options[0]
    assert "running" not in label and "/48" not in label, label
    assert metrics["trials"] == "0/48" and int(metrics["elapsed"].split()[0]) >= 44, metrics
    store.update_job(job.id, status="stopped")

    at.text_input(key="search_workload").input("matmul:M=64,N=64,K=64")
    at.number_input(key="search_trials").set_value(0)
    at.number_input(key="search_minutes").set_value(2.0)
    at.button[0].click().run()
    new = Store(db).jobs()[-1]
    spec = JobSpec.from_dict(new.params)
    assert spec.params.minutes == 2.0 and spec.params.trials == UNLIMITED_TRIALS
    at.run()
    assert {m.label: m.value for m in at.metric}["trials"].endswith("/2 min")
    from search.jobs import stop_job

    stop_job(Store(db), new.id, timeout=60)


def test_elapsed_does_not_go_back_when_a_job_stops(tmp_path):
    """Issue 52: elapsed read 44 s while the job ran and 36 s once it had stopped (the row's clock,
    then the search's own, which starts once TVM is imported): one clock, from the row's creation
    to its end."""
    import sqlite3
    from datetime import datetime, timedelta, timezone

    db = tmp_path / "clock.db"
    store = Store(db)
    job = store.create_job("tune", {"workload": "matmul:M=32,N=32,K=32", "params": {"trials": 48}})
    store.update_job(job.id, status="stopped", progress={"trials": 16, "total": 48, "elapsed_s": 36.0})
    ended = datetime.now(timezone.utc)
    with sqlite3.connect(db) as conn:  # created 44 s before it stopped
        conn.execute("UPDATE jobs SET created = ?, updated = ? WHERE id = ?",
                     [(ended - timedelta(seconds=44)).isoformat(), ended.isoformat(), job.id])
    at = _page(db).run()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["status"] == "stopped" and metrics["elapsed"] == "44 s" and metrics["ETA"] == "-", metrics


def test_bf16_is_left_out_with_the_reason_where_the_cpu_lacks_it(tmp_path, monkeypatch):
    from explorer.target.environment import cpu_flags

    monkeypatch.setenv("SCHEDX_CPU_FLAGS", " ".join(f for f in cpu_flags() if "bf16" not in f and "amx" not in f))
    at = _page(tmp_path / "nobf16.db").run()
    assert not at.exception
    choice = at.radio(key="search_precision")
    assert list(choice.options) == ["fp32", "int8"] and choice.value == "fp32"  # int8 needs no bf16 instructions
    assert any("bf16 is not available" in c.value and "AVX512-BF16 or AMX-BF16" in c.value for c in at.caption)


def _start_then_stop(at: AppTest, db, workload: str, precision: str) -> None:
    """Start a search of ``workload`` at ``precision`` from the page, see its header say the
    precision, then stop it from the page."""
    at.text_input(key="search_workload").input(workload)
    at.number_input(key="search_trials").set_value(400)
    at.button[0].click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    job = Store(db).jobs()[-1]
    assert job.params["precision"] == precision
    at.run()
    assert any(f"at precision **{precision}**" in c.value for c in at.caption)
    next(b for b in at.button if b.label == "Stop this job").click().run()
    deadline = time.time() + 30
    while time.time() < deadline and Store(db).job(job.id).status == "running":
        time.sleep(0.5)
    assert Store(db).job(job.id).status == "stopped"


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16 (avx512_bf16 not in its flags): the "
                                         "page disables bf16")
def test_a_bf16_search_starts_from_the_page_and_a_single_kernel_is_refused(tmp_path, mlp_path):
    db = tmp_path / "bf16.db"
    at = _page(db).run()
    at.radio(key="search_precision").set_value("bf16").run()
    at.text_input(key="search_workload").input("matmul:M=64,N=64,K=64")
    at.button[0].click().run()
    assert at.error and "is a single kernel" in at.error[0].value and Store(db).jobs() == []
    _start_then_stop(at, db, mlp_path, "bf16")


def test_an_int8_search_starts_from_the_page_on_the_quantized_models_kernels(tmp_path, mlp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # its quantized model, in a private cache
    db = tmp_path / "int8.db"
    at = _page(db).run()
    at.radio(key="search_precision").set_value("int8").run()
    _start_then_stop(at, db, mlp_path, "int8")
