"""Issue 12's regressions in a real browser (Debian's chromium through Playwright): the Schedule
page shows the machine code a step makes for the chosen target; the Search form refuses a bad
workload in place, follows the job it starts and stops it with a clear status; the Export page's
verdict agrees with its checks."""

from __future__ import annotations

import time

import pytest

from explorer.target import host_cpu
from store import Store
from tests.browser import (apply_schedule_step, chromium_page, open_page, pick_and_settle, schedx_ui,
                           screenshot_dir, settle)

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    db = tmp_path_factory.mktemp("ide") / "ide.db"
    with schedx_ui({"SCHEDX_DB": str(db)}) as url:
        yield url, db


@pytest.fixture
def page():
    with chromium_page() as pg:
        yield pg


def test_the_assembly_tab_counts_the_vector_instructions_a_step_makes(ui, page, tmp_path):
    url, _ = ui
    open_page(page, f"{url}/schedule", "Next step")
    page.get_by_role("tab", name="Assembly").click()
    page.get_by_text("instructions", exact=False).first.wait_for()
    apply_schedule_step(page, "split", "C/j  (", "None, 16")
    apply_schedule_step(page, "vectorize", "C/j_1  (")
    page.get_by_text("Steps (2 of 2)").wait_for()
    page.get_by_role("tab", name="Assembly").click()
    width = host_cpu().vector_width
    caption = page.get_by_text(f"x {width}-bit", exact=False).first
    caption.wait_for()
    assert "FMA" in caption.inner_text() and "last step" in caption.inner_text()
    view = page.locator(".sa-root:visible")
    view.wait_for()
    assert view.count() == 1
    assert view.locator(".sa-line.fma").count() > 0  # the FMA lines are highlighted
    # Compiler Explorer's mapping: the update statement lights up its multiply-adds, and back
    update = view.locator('.sa-line[data-side="src"]').filter(has_text=" + A[")
    update.first.click()
    lit = view.locator('.sa-line.sel[data-side="asm"]')
    assert lit.count() > 0 and lit.filter(has_text="fma").count() > 0
    pane = view.locator(".sa-pane").nth(1).locator(".sa-lines").bounding_box()
    first = lit.first.bounding_box()  # the assembly scrolled to the lines lit, inside its own pane
    assert pane["y"] <= first["y"] <= pane["y"] + pane["height"] - first["height"], (pane, first)
    assert view.get_attribute("data-pinned").startswith("src:")
    update.first.click()  # released
    fma = view.locator('.sa-line.fma[data-side="asm"]').first
    fma.scroll_into_view_if_needed()
    fma.hover()
    assert " + A[" in view.locator('.sa-line.sel[data-side="src"]').first.inner_text()
    loop = view.locator('.sa-line.m[data-side="src"]').filter(has_text="for ").last  # a loop: its body shaded
    loop.scroll_into_view_if_needed()
    loop.hover()
    assert view.locator('.sa-line.in[data-side="src"]').count() > 0
    # and only its own instructions lit (its loop control: issue 52), not its body's multiply-adds
    assert view.locator('.sa-line.sel[data-side="asm"]').filter(has_text="fma").count() == 0
    page.screenshot(path=str(screenshot_dir(tmp_path) / "schedule-asm.png"), full_page=False)
    if host_cpu().arch == "x86_64":  # the same schedule for an older CPU: narrower vectors
        # scrolled up to the picker as a reader does (scrolled just into view, it sat under Streamlit's header)
        page.get_by_role("combobox", name="Target", exact=True).evaluate("e => e.scrollIntoView({block: 'center'})")
        pick_and_settle(page, "Target", "cpu:x86-64-v2")
        page.get_by_role("tab", name="Assembly").click()
        page.get_by_text("x 128-bit", exact=False).first.wait_for()


def test_the_search_form_validates_follows_and_stops(ui, page):
    url, db = ui
    page.goto(f"{url}/search")
    box = page.get_by_label("Workload", exact=True)
    box.fill("matmul:M=abc")
    page.get_by_role("button", name="Start search").click()
    page.get_by_text("must be a whole number").first.wait_for()
    assert Store(db).jobs() == []
    box.fill("matmul:M=64,N=64,K=64")
    page.get_by_label("Trials", exact=True).fill("5000")
    page.get_by_role("button", name="Start search").click()
    deadline = time.time() + 60
    while time.time() < deadline and not Store(db).jobs():
        time.sleep(0.3)
    assert Store(db).jobs(), "the job row"
    page.locator('[data-testid="stMetric"]').filter(has_text="status").filter(has_text="running").first.wait_for()
    trials = page.locator('[data-testid="stMetric"]').filter(has_text="trials").first
    assert "/5000" in trials.inner_text()  # the page shows the job just started (the AppTest checks the picker)
    page.get_by_role("button", name="Stop this job").click()
    page.locator('[data-testid="stMetric"]').filter(has_text="status").filter(has_text="stopped").first.wait_for(
        timeout=60_000)
    settle(page)
    eta = page.locator('[data-testid="stMetric"]').filter(has_text="ETA").first.inner_text()
    assert eta.strip().endswith("-")
    assert page.get_by_text("RuntimeError").count() == 0


def test_the_export_verdict_agrees_with_its_checks(ui, page):
    url, _ = ui
    page.goto(f"{url}/export")
    page.get_by_text("Kernels (").first.wait_for()
    page.locator('section[data-testid="stSidebar"]').get_by_text("Kernel", exact=True).click()
    settle(page)
    kernel = page.get_by_label("Kernel spec", exact=True)
    kernel.fill("matmul:M=32,N=32,K=32")
    kernel.press("Enter")
    settle(page)
    pick_and_settle(page, "Target", "cuda:sm_90")
    page.get_by_role("button", name="Build & verify").click()
    page.get_by_text("not run here").first.wait_for(timeout=180_000)
    # the page renders top to bottom: the verdict shows before the download button does
    page.get_by_role("button", name="(built, not run on this machine)").wait_for(timeout=60_000)
    assert page.get_by_text("NOT VERIFIED").count() == 0
    assert page.get_by_role("button", name="(built, not run on this machine)").count() == 1
