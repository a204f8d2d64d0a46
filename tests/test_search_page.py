"""The Search page under AppTest: empty database, a finished job's charts, starting and stopping."""

from __future__ import annotations

import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

from explorer.kernels import builtin_kernel
from explorer.target import host_target
from search.params import SearchParams
from explorer.workload import kernel_task
from search.tune import tune
from store import Store
from tests.fake_measure import FakeBuilder, FakeRunner

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
    tune([kernel_task(builtin_kernel("matmul", M=64, N=64, K=64))], store=store, target=host_target(),
         params=SearchParams(trials=16, per_batch=8, population=32, generations=1, init_min_unmeasured=8),
         builder=FakeBuilder(), runner=FakeRunner(fail_every=5), job_id=job.id)
    store.update_job(job.id, status="done")
    at = _page(db).run()
    assert not at.exception and not at.error
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["status"] == "done" and metrics["trials"] == "16/16"
    assert len(at.get("plotly_chart")) >= 3
    assert any("Failed candidates" in m.value for m in at.markdown)


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
