"""The UI in a real browser (Debian's chromium driven by Playwright)."""

from __future__ import annotations

import re

import pytest

from tests.browser import (apply_schedule_step, chromium_page, open_page, pick_and_settle, schedx_ui,
                           screenshot_dir, settle, wait_for_page_text)

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def ui_url():
    with schedx_ui() as url:
        yield url


@pytest.fixture
def page():
    with chromium_page() as pg:
        yield pg


def test_graph_text_diff_and_counts_views(ui_url, page, tmp_path):
    """The Graph & passes page's three views on ResNet-18, for the README's screenshots (the
    graph viewer's own tests are in tests/test_browser_graph.py)."""
    open_page(page, ui_url, "Graph & passes")
    assert page.get_by_role("button", name="Deploy").count() == 0  # Streamlit's own, not schedx's (issue 29)
    assert page.locator('[data-testid="stAppDeployButton"]').count() == 0
    pick_and_settle(page, "Model", "ResNet-18")
    after = page.locator('.sx-panel[data-side="after"]')
    after.locator("g.n").nth(60).wait_for(state="attached")
    assert after.locator("text.cl").first.text_content().startswith("fused_")  # a fused group
    page.locator(".sx-search").fill("layer2.0.relu2")
    page.locator(".sx-search").press("Enter")
    page.locator('.sx-panel[data-side="before"] .sx-info').wait_for()
    page.screenshot(path=str(screenshot_dir(tmp_path) / "passes-graph.png"), full_page=False)
    page.get_by_role("radio", name="TVMScript", exact=True).click()
    settle(page)
    page.get_by_text("Side by side").click()
    settle(page)
    page.locator('[data-testid="stExpander"] summary').filter(has_text="main: changed").first.click()
    page.locator("table.sbs").first.wait_for()
    wait_for_page_text(page, "fused_")
    page.screenshot(path=str(screenshot_dir(tmp_path) / "passes-textdiff.png"), full_page=False)
    page.get_by_role("radio", name="Counts & time", exact=True).click()
    page.locator(".sx-bars").first.wait_for()
    page.screenshot(path=str(screenshot_dir(tmp_path) / "passes-counts.png"), full_page=False)


def test_schedule_matmul_by_hand_and_measure(ui_url, page, tmp_path):
    open_page(page, f"{ui_url}/schedule", "Next step")
    apply_schedule_step(page, "split", "C/j  (", "None, 64")
    page.get_by_text("Steps (1 of 1)").wait_for()
    apply_schedule_step(page, "vectorize", "C/j_1  (")
    page.get_by_text("Steps (2 of 2)").wait_for()
    apply_schedule_step(page, "parallel", "C/i  (")
    page.get_by_text("Steps (3 of 3)").wait_for()
    wait_for_page_text(page, "T.vectorized(64)", "T.parallel(512)")
    page.get_by_role("button", name="Build & measure").click()
    metric = page.locator('[data-testid="stMetric"]').filter(has_text="GFLOPS").first
    metric.wait_for(timeout=180_000)
    metric.scroll_into_view_if_needed()
    gflops = float(metric.locator('[data-testid="stMetricValue"]').inner_text())
    assert gflops > 1.0
    assert "yes" in page.locator('[data-testid="stMetric"]').filter(has_text="verified").first.inner_text()
    page.screenshot(path=str(screenshot_dir(tmp_path) / "schedule.png"), full_page=True)


def test_start_a_search_from_the_ui_and_see_progress_and_leaderboard_rows(ui_url, page, tmp_path):
    open_page(page, f"{ui_url}/search", "Start a search")
    box = page.get_by_label("Workload", exact=True)
    box.fill("matmul:M=64,N=64,K=64")
    trials = page.get_by_label("Trials", exact=True)
    trials.fill("16")
    page.get_by_label("Per batch", exact=True).fill("8")
    page.get_by_label("Population", exact=True).fill("32")
    page.get_by_role("button", name="Start search").click()
    done = page.locator('[data-testid="stMetric"]').filter(has_text="status").filter(has_text="done")
    done.first.wait_for(timeout=240_000)
    assert "16/16" in page.locator('[data-testid="stMetric"]').filter(has_text="trials").first.inner_text()
    page.locator(".js-plotly-plot").first.wait_for()
    settle(page)
    # the job watched, from its picker down (the form above it fills a 1000-px window)
    page.get_by_role("combobox", name="Job", exact=True).evaluate("e => e.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(300)
    page.screenshot(path=str(screenshot_dir(tmp_path) / "search.png"), full_page=False)
    page.goto(f"{ui_url}/leaderboard")
    page.locator('[data-testid="stDataFrame"]').first.wait_for()
    settle(page)
    # the session's database holds other tests' records too (the first best one may be another
    # workload's): pick this search's best record, then read its caption; the search measures the
    # default schedule first, so the best may be it
    pick_and_settle(page, "Record", "matmul_M64_N64_K64_float32")
    page.get_by_text(re.compile(r"matmul_M64_N64_K64_float32 · (search|default) ·")).first.wait_for(timeout=60_000)
    page.locator('[data-testid="stDataFrame"]').first.wait_for()
    settle(page)
    page.screenshot(path=str(screenshot_dir(tmp_path) / "leaderboard.png"), full_page=False)
