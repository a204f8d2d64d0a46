"""The Export page in a real browser (Debian's chromium through Playwright): build small_cnn for
this CPU, see it verified, download the bundle as a zip and look inside."""

from __future__ import annotations

import json
import re
import zipfile

import pytest

from tests.browser import CHROMIUM_ARGS, chromium_page, chromium_path, open_page, schedx_ui, screenshot_dir, server_log
from tests.cpu_marks import HAS_BF16

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def export_ui(tmp_path_factory):
    """One server for the file's exports, on a database that does not exist (every kernel gets its
    default schedule: an export stores no records, so it stays so); each test's page is a session of
    its own."""
    with schedx_ui(env={"SCHEDX_DB": str(tmp_path_factory.mktemp("export") / "empty.db")}) as url:
        yield url


def test_export_small_cnn_and_download_the_zip(export_ui, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    url = export_ui
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1100}, accept_downloads=True)
            page.set_default_timeout(180_000)
            open_page(page, f"{url}/export", "Kernels (8, 0 with records)")  # small_cnn is the default model
            page.get_by_role("button", name="Build & verify").click()
            button = page.get_by_role("button", name="Download small_cnn")
            button.wait_for()
            assert page.get_by_text("Layer by layer: all").count() == 1
            page.screenshot(path=str(screenshot_dir(tmp_path) / "export.png"), full_page=False)
            with page.expect_download() as info:
                button.click()
            download = info.value
            assert download.suggested_filename.endswith(".zip")
            path = tmp_path / download.suggested_filename
            download.save_as(path)
        finally:
            browser.close()
    with zipfile.ZipFile(path) as zf:
        names = {n.split("/", 1)[1] for n in zf.namelist()}
        assert {"lib.so", "params.bin", "manifest.json", "README.md", "run.py", "inputs.npz"} <= names
        manifest = json.loads(zf.read(next(n for n in zf.namelist() if n.endswith("manifest.json"))))
    assert manifest["workload"]["spec"] == "small_cnn" and manifest["verification"]["fresh_process"]["ok"]


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16 (avx512_bf16 not in its flags): a bf16 "
                                         "bundle cannot be verified here, and the choice is disabled")
@pytest.mark.parametrize("width,height", [(1100, 900), (1600, 1100)])
def test_export_small_cnn_at_bf16_says_what_stayed_fp32_and_the_tolerance(export_ui, tmp_path, width, height):
    with chromium_page(width, height, timeout_ms=180_000) as page:
        _choose_bf16_and_build(page, export_ui)
        page.get_by_role("button", name="Download small_cnn").wait_for()
        note = page.get_by_text("Precision: bf16").first
        note.wait_for()
        text = page.locator('[data-testid="stAlert"]').filter(has_text="Precision: bf16").inner_text()
        converted = re.search(r"(\d+) product\(s\) with constant weights computed in bf16", text)
        assert converted and int(converted[1]) >= 1 and "0.01 x each output" in text, text  # (as bf16_conv decides)
        assert "Kept in fp32" in text and "softmax" in text and "too short for bf16 to pay" in text
        assert page.get_by_text("1e-02 x max |ref|", exact=False).count() >= 1  # verified at bf16's rule
        page.screenshot(path=str(screenshot_dir(tmp_path) / f"export-bf16-{width}.png"), full_page=False)

def _choose_bf16_and_build(page, url: str) -> None:
    """Open the Export page, choose bf16 in the sidebar and click Build & verify, all by the mouse. Twice in
    the full parallel suite (never alone, nor beside two CPU-burning processes) the page never offered the
    button again within 180 s after the precision click (the rerun never reached the browser; the cause was
    not found): the page is opened afresh once, as a user would reload it, then the failure names what the
    page and the server showed."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in (1, 2):
        open_page(page, f"{url}/export", "Kernels (8, 0 with records)")
        sidebar = page.locator('section[data-testid="stSidebar"]')
        sidebar.get_by_text("bf16", exact=True).click()  # the Precision choice, by the mouse
        page.get_by_role("radio", name="bf16", exact=True).wait_for(state="attached")
        assert page.get_by_role("radio", name="bf16", exact=True).is_checked()
        try:
            page.get_by_role("button", name="Build & verify").click(timeout=120_000)
            return
        except PlaywrightTimeout:
            if attempt == 2:
                pytest.fail(f"Build & verify was not clickable within 120 s after choosing bf16, twice.\nThe page "
                            f"showed:\n{page.locator('body').inner_text(timeout=5_000)[-2000:]}\nThe server's log:\n"
                            f"{server_log(url)}")
