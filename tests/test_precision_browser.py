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


@pytest.fixture(scope="module")
def int8_ui(tmp_path_factory):
    """One server for both widths, its database, the model and its quantized copy in a folder of
    their own (the second width's search finds the model quantized); each width's page is a session
    of its own and starts a job of its own."""
    folder = tmp_path_factory.mktemp("int8-search")
    model, db = folder / "tiny.onnx", folder / "s.db"
    onnx.save(tiny_cnn(), model)
    env = {"SCHEDX_DB": str(db), "XDG_CACHE_HOME": str(folder / "cache")}  # its quantized model, kept apart
    with schedx_ui(env) as url:
        yield url, model, db


@pytest.mark.parametrize("width,height", [(1100, 900), (1600, 1000)])
def test_an_int8_search_is_picked_with_the_mouse_and_started_from_the_search_page(int8_ui, tmp_path, width, height):
    url, model, db = int8_ui
    earlier = {j.id for j in Store(db).jobs()}  # the other width's job, where it ran first
    with chromium_page(width, height, timeout_ms=180_000) as page:
        open_page(page, f"{url}/search", "Start a search")
        choice = page.locator('[data-testid="stRadio"]').filter(has_text="Precision")
        choice.get_by_text("int8", exact=True).click()  # the Precision choice, by the mouse
        page.get_by_role("radio", name="int8", exact=True).wait_for(state="attached")
        wait_until(lambda: page.get_by_role("radio", name="int8", exact=True).is_checked(), 30, "int8 to be chosen")
        page.get_by_label("Workload", exact=True).fill(str(model))
        page.get_by_role("button", name="Start search").click()
        job = wait_until(lambda: next((j for j in Store(db).jobs() if j.id not in earlier), None), 120, "the job row")
        assert job.params["precision"] == "int8"
        page.get_by_text("at precision int8", exact=False).first.wait_for()  # the job's header says so
        page.screenshot(path=str(screenshot_dir(tmp_path) / f"search-int8-{width}.png"), full_page=False)
        page.get_by_role("button", name="Stop this job").click()
        wait_until(lambda: Store(db).job(job.id).status != "running", 60, "the job to stop")
    assert Store(db).job(job.id).status == "stopped"
