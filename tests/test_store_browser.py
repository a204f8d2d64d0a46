"""The Leaderboard page in a real browser (Debian's chromium through Playwright) shows records
from the database that SCHEDX_DB names, and hands one to the Schedule page."""

from __future__ import annotations

import pytest

from tests.browser import CHROMIUM_ARGS, chromium_path, open_page, schedx_ui, screenshot_dir
from tests.test_store_page import fill_demo

pytestmark = pytest.mark.browser


def test_leaderboard_shows_records(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    db = tmp_path / "demo.db"
    fill_demo(db)
    with schedx_ui(env={"SCHEDX_DB": str(db)}) as url, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1100})
            page.set_default_timeout(120_000)
            open_page(page, f"{url}/leaderboard", "best records")
            page.locator('[data-testid="stDataFrame"]').first.wait_for()
            chart = page.locator('[data-testid="stVegaLiteChart"]').first
            chart.locator("canvas, svg").first.wait_for()
            page.wait_for_timeout(500)
            svg = chart.inner_html()
            assert "matmul_512x512x512_float32" in svg and "conv2d_1x64x56x56" in svg  # the bars' labels
            assert ">search<" in svg and ">manual<" in svg  # the legend: coloured by source
            assert 'fill="#2563eb"' in svg and 'fill="#f97316"' in svg  # manual and search bars drawn
            page.screenshot(path=str(screenshot_dir(tmp_path) / "leaderboard.png"), full_page=False)
            page.get_by_role("button", name="Open in Schedule page").click()  # the record goes to the editor
            page.wait_for_url("**/schedule")
        finally:
            browser.close()
