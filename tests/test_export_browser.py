"""The Export page in a real browser (Debian's chromium through Playwright): build small_cnn for
this CPU, see it verified, download the bundle as a zip and look inside."""

from __future__ import annotations

import json
import zipfile

import pytest

from tests.browser import CHROMIUM_ARGS, chromium_path, open_page, schedx_ui, screenshot_dir

pytestmark = pytest.mark.browser


def test_export_small_cnn_and_download_the_zip(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    with schedx_ui(env={"SCHEDX_DB": str(tmp_path / "empty.db")}) as url, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1100}, accept_downloads=True)
            page.set_default_timeout(180_000)
            open_page(page, f"{url}/export", "Kernels (9, 0 with records)")  # small_cnn is the default model
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
