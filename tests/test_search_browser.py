"""The search flow end to end in a real browser: start a search on ResNet-18 from the Search page,
close the tab, come back to live progress, stop it, resume it from the command line, and find
every trial once in the leaderboard."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from store import Store
from tests.browser import CHROMIUM_ARGS, ROOT, chromium_path, schedx_ui, screenshot_dir, wait_until

pytestmark = pytest.mark.browser


def _metric(page, label: str) -> str:
    return page.locator('[data-testid="stMetric"]').filter(has_text=label).first.inner_text()


@pytest.mark.slow  # about 3 minutes (a whole ResNet-18 search); the search form, follow and stop run in test_browser_ide
def test_resnet18_search_outlives_the_tab_stops_and_resumes_from_the_cli(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    db = tmp_path / "flow.db"
    with schedx_ui({"SCHEDX_DB": str(db)}) as url, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1100})
        page.set_default_timeout(120_000)
        page.goto(f"{url}/search")
        page.get_by_label("Workload", exact=True).fill("resnet18")
        page.get_by_label("Trials", exact=True).fill("2000")
        page.get_by_label("Per batch", exact=True).fill("8")
        page.get_by_label("Population", exact=True).fill("32")
        page.get_by_role("button", name="Start search").click()
        store = Store(db)
        job = wait_until(lambda: next(iter(store.jobs()), None), 60, "the job row")
        wait_until(lambda: store.count(job_id=job.id) >= 8, 300, "the first batch")

        page.close()  # the tab goes; the search goes on
        time.sleep(2)
        assert store.job(job.id).status == "running"
        page = browser.new_page(viewport={"width": 1600, "height": 1100})
        page.set_default_timeout(120_000)
        page.goto(f"{url}/search")
        page.locator('[data-testid="stMetric"]').filter(has_text="status").filter(has_text="running").first.wait_for()
        first_seen = _metric(page, "trials")
        # live: the page shows more trials as batches land, without being reloaded
        page.wait_for_function(
            "seen => [...document.querySelectorAll('[data-testid=\"stMetric\"]')]"
            ".some(m => m.innerText.includes('trials') && !m.innerText.includes(seen))",
            arg=first_seen.split("\n")[-1], timeout=180_000)
        page.locator(".js-plotly-plot").first.wait_for()
        page.screenshot(path=str(screenshot_dir(tmp_path) / "search-resnet18.png"), full_page=False)

        page.get_by_role("button", name="Stop this job").click()
        page.locator('[data-testid="stMetric"]').filter(has_text="status").filter(has_text="stopped").first.wait_for()
        stopped = store.job(job.id)
        assert stopped.status == "stopped"
        browser_trials = store.count(job_id=job.id)
        assert browser_trials >= 16

        resumed = subprocess.run(
            [sys.executable, "-m", "app.cli", "tune", "resnet18", "--trials", "16", "--per-batch", "8",
             "--population", "32", "--generations", "1", "--db", str(db), "--json"],
            cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        summary = json.loads(resumed.stdout[resumed.stdout.index("{"):])
        # the budget counts new measurements; on a model MetaSchedule ends on a whole batch
        assert summary["measured"] + summary["failed"] == summary["trials"] and 16 <= summary["trials"] < 16 + 8

        records = store.records()
        assert len(records) == browser_trials + summary["trials"]  # every trial is in the database, once
        seen: dict[str, set] = {}
        for r in records:
            chash = r.candidate
            assert chash not in seen.setdefault(r.workload_key, set()), "a candidate was measured twice"
            seen[r.workload_key].add(chash)
        assert all(r.verified is not False for r in records if r.status == "ok")

        page.goto(f"{url}/leaderboard")
        page.get_by_text("resnet18/").first.wait_for(state="attached", timeout=60_000)  # a table cell
        browser.close()
