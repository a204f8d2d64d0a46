"""The Search page's Precision choice in a real chromium, clicked with the mouse at 1100 and 1600
px: int8 (offered on any CPU) starts a search on the quantized model's kernels, which the job's
header says, and the job stops from the page."""

from __future__ import annotations

import onnx
import pytest

from store import Store
from tests.browser import chromium_page, open_page, schedx_ui, screenshot_dir, wait_until
from tests.conftest import tiny_cnn

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("width,height", [(1100, 900), (1600, 1000)])
def test_an_int8_search_is_picked_with_the_mouse_and_started_from_the_search_page(tmp_path, width, height):
    model, db = tmp_path / "tiny.onnx", tmp_path / "s.db"
    onnx.save(tiny_cnn(), model)
    env = {"SCHEDX_DB": str(db), "XDG_CACHE_HOME": str(tmp_path / "cache")}  # its quantized model, kept apart
    with schedx_ui(env) as url, chromium_page(width, height, timeout_ms=180_000) as page:
        open_page(page, f"{url}/search", "Start a search")
        choice = page.locator('[data-testid="stRadio"]').filter(has_text="Precision")
        choice.get_by_text("int8", exact=True).click()  # the Precision choice, by the mouse
        page.get_by_role("radio", name="int8", exact=True).wait_for(state="attached")
        wait_until(lambda: page.get_by_role("radio", name="int8", exact=True).is_checked(), 30, "int8 to be chosen")
        page.get_by_label("Workload", exact=True).fill(str(model))
        page.get_by_role("button", name="Start search").click()
        job = wait_until(lambda: next(iter(Store(db).jobs()), None), 120, "the job row")
        assert job.params["precision"] == "int8"
        page.get_by_text("at precision int8", exact=False).first.wait_for()  # the job's header says so
        page.screenshot(path=str(screenshot_dir(tmp_path) / f"search-int8-{width}.png"), full_page=False)
        page.get_by_role("button", name="Stop this job").click()
        wait_until(lambda: Store(db).job(job.id).status != "running", 60, "the job to stop")
    assert Store(db).job(job.id).status == "stopped"
