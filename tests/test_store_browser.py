"""The Leaderboard page in a real browser (Debian's chromium through Playwright) shows records
from the database that SCHEDX_DB names, and hands one to the Schedule page."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from tests.browser import CHROMIUM_ARGS, chromium_path, open_page, schedx_ui, screenshot_dir
from tests.store_cases import fill_demo

pytestmark = pytest.mark.browser


@contextmanager
def leaderboard_page(db, width: int = 1600):
    """The Leaderboard of the database ``db`` in a real browser, ``width`` px wide."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with schedx_ui(env={"SCHEDX_DB": str(db)}) as url, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": 1100})
            page.set_default_timeout(120_000)
            open_page(page, f"{url}/leaderboard", "best records")
            yield page
        finally:
            browser.close()


def test_leaderboard_shows_records(tmp_path):
    db = tmp_path / "demo.db"
    fill_demo(db)
    with leaderboard_page(db) as page:
        page.locator('[data-testid="stDataFrame"]').first.wait_for()
        chart = page.locator('[data-testid="stVegaLiteChart"]').first
        chart.locator("canvas, svg").first.wait_for()
        page.wait_for_timeout(500)
        svg = chart.inner_html()
        assert "matmul_512x512x512_float32" in svg and "conv2d_1x64x56x56" in svg  # the bars' labels
        assert ">search<" in svg and ">manual<" in svg  # the legend: coloured by source
        assert 'fill="#2563eb"' in svg and 'fill="#f97316"' in svg  # manual and search bars drawn
        page.screenshot(path=str(screenshot_dir(tmp_path) / "leaderboard.png"), full_page=False)
        # issue 29: the table was wider than its frame at 1600 px (its last columns behind a sideways scroll)
        frame = page.locator('[data-testid="stDataFrame"]').first
        box = frame.bounding_box()
        assert box["x"] + box["width"] <= 1600, box
        # the grid's own scroller: wider content means a sideways scroll (the resize handles poke out by design)
        scroll = frame.evaluate("el => { const s = el.querySelector('.dvn-scroller');"
                                " return [s.scrollWidth, s.clientWidth]; }")
        assert scroll[0] <= scroll[1], scroll
        page.get_by_role("button", name="Open in Schedule page").click()  # the record goes to the editor
        page.wait_for_url("**/schedule")


def _conv_silu_record(db, tmp_path) -> None:
    """A search record of efficientnet's 1x1 convolution with its SiLU (stored by the search's own
    workload maker, so flagged as largely element-wise work), above the demo's 200 GFLOPS ceiling."""
    from search.records import task_workload
    from store import Record, Store
    from tests.test_product_flops import conv_silu_onnx
    from explorer.workload import load_workload

    conv = next(t for t in load_workload(conv_silu_onnx(tmp_path)).tasks() if "conv2d" in t.name)
    workload = task_workload(conv, source="search")
    with Store(db) as store:
        demo = store.records()[0]
        store.add_workload(workload)
        store.add_record(Record(workload_key=workload.key, target=demo.target, hardware=demo.hardware, source="search",
                                status="ok", steps=[], trace=None, latencies=[workload.flops / 300e9],
                                median_s=workload.flops / 300e9, gflops=300.0, environment=demo.environment))


@pytest.mark.parametrize("width", [1100, 1600])
def test_the_roofline_draws_element_wise_work_apart_from_multiply_adds(tmp_path, width):
    """The Roofline chart, picked with the mouse: a conv+SiLU record at 300 counted GFLOPS sits above
    the 200 GFLOPS ceiling; its point is a hollow diamond in its own legend entry, and the caption
    says why that is no figure of the FMA units."""
    db = tmp_path / "demo.db"
    fill_demo(db)
    _conv_silu_record(db, tmp_path)
    with leaderboard_page(db, width) as page:
        page.locator('[data-testid="stDataFrame"]').first.wait_for()
        page.get_by_text("Roofline", exact=True).click()  # the chart picker's segment, with the mouse
        page.get_by_text("hollow diamond").wait_for()
        chart = page.locator('[data-testid="stVegaLiteChart"]').first
        chart.locator("svg").first.wait_for()
        page.wait_for_timeout(500)
        svg = chart.inner_html()
        assert "FLOPs counted" in svg and "largely element-wise ops" in svg and "multiply-adds" in svg
        assert "1 hollow diamond(s)" in page.get_by_text("hollow diamond").inner_text()
        chart.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot_dir(tmp_path) / f"roofline_{width}.png"), full_page=False)


def _search_record_db(path) -> int:
    """A database as `schedx tune matmul:...` leaves it: the task's workload (its module, no kernel
    spec) and a search record that holds only a MetaSchedule trace."""
    from explorer.target.environment import hardware_fingerprint
    from explorer.schedule.defaults import CpuSpec, default_schedule
    from explorer.workload import kernel_task, load_kernel
    from search.records import task_workload
    from store import Outcome, Record, Store

    kernel = load_kernel("matmul:M=64,N=64,K=64")
    _, choice = default_schedule(kernel.func, CpuSpec(vector_bits=256, registers=16, cores=2, arch="x86_64"))
    workload = task_workload(kernel_task(kernel), source="search")
    assert "spec" not in workload.shapes  # what made the Schedule page refuse it
    with Store(path) as store:
        store.add_workload(workload)
        return store.add_record(Record(
            workload_key=workload.key, target='{"kind": "llvm"}', hardware=hardware_fingerprint(), source="search",
            status=Outcome.OK, steps=[], trace=choice.trace, latencies=[1e-4], median_s=1e-4, gflops=5.0,
            environment={}))


def test_a_search_record_opens_in_the_schedule_page(tmp_path):
    """"Open in Schedule page" on a record schedx's own search made: its kernel (from the record's
    own module) and its trace as steps, not "came from an imported MetaSchedule database"."""
    db = tmp_path / "search.db"
    _search_record_db(db)
    with leaderboard_page(db) as page:
        page.get_by_role("button", name="Open in Schedule page").click()
        page.wait_for_url("**/schedule")
        page.get_by_text("Opened the record's").first.wait_for()
        assert page.get_by_text("imported MetaSchedule database").count() == 0
        page.get_by_text("From the leaderboard: matmul").first.wait_for()  # the sidebar holds its kernel
        page.get_by_text("Steps (").first.wait_for()
