"""Issue 51, item 3: the Schedule page takes a model's kernels at bf16 (the kernels `schedx export
--precision bf16` builds), picked with the mouse in a real chromium at 1100 and 1600 px; a bf16
kernel builds, verifies and is measured like any other."""

from __future__ import annotations

import pytest

from tests.browser import chromium_page, open_page, pick_option, schedx_ui, screenshot_dir, settle
from tests.cpu_marks import HAS_BF16

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def bf16_ui(tmp_path_factory):
    """One server for both widths: the model's bf16 kernels are extracted once (its cache), each
    width's page still picks, builds and measures its kernel in a session of its own."""
    with schedx_ui({"SCHEDX_DB": str(tmp_path_factory.mktemp("bf16-schedule") / "s.db")}) as url:
        yield url


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16 (avx512_bf16 not in its flags): the bf16 choice "
                                         "is disabled here and a bf16 kernel cannot run")
@pytest.mark.parametrize("width,height", [(1100, 900), (1600, 1000)])
def test_a_models_bf16_kernel_is_picked_built_and_measured(bf16_ui, tmp_path, width, height):
    with chromium_page(width, height, timeout_ms=240_000) as page:
        open_page(page, f"{bf16_ui}/schedule", "Next step")
        sidebar = page.locator('section[data-testid="stSidebar"]')
        sidebar.get_by_text("From a model", exact=True).click()
        settle(page)
        pick_option(page, "Model", "Small CNN")
        settle(page)
        sidebar.get_by_text("bf16", exact=True).click()  # the Precision choice, by the mouse
        settle(page)
        assert page.get_by_role("radio", name="bf16", exact=True).is_checked()
        pick_option(page, "Fused kernel (most FLOPs first)", "dense_bf16")  # the classifier, in bf16
        settle(page)
        page.get_by_role("button", name="Build & measure").click()
        page.locator('[data-testid="stMetric"]').filter(has_text="verified").first.wait_for(timeout=300_000)
        verified = page.locator('[data-testid="stMetric"]').filter(has_text="verified").first.inner_text()
        assert verified.split()[-1] == "yes", verified
        code = "\n".join(page.locator('[data-testid="stCode"]').all_inner_texts())
        assert "block bf16_pack" in code  # the bf16 product: its activations packed to bf16 bits first
        page.screenshot(path=str(screenshot_dir(tmp_path) / f"schedule-bf16-{width}.png"), full_page=False)


def test_the_bf16_choice_is_left_out_with_the_reason_where_the_cpu_lacks_it(tmp_path, monkeypatch):
    from explorer.target.environment import cpu_flags

    flags = " ".join(f for f in cpu_flags() if "bf16" not in f and not f.startswith("amx"))
    with schedx_ui({"SCHEDX_DB": str(tmp_path / "s.db"), "SCHEDX_CPU_FLAGS": flags}) as url, \
            chromium_page(1600, 1000, timeout_ms=240_000) as page:
        open_page(page, f"{url}/schedule", "Next step")
        page.locator('section[data-testid="stSidebar"]').get_by_text("From a model", exact=True).click()
        settle(page)
        assert page.get_by_role("radio", name="bf16", exact=True).count() == 0  # not offered; int8 still is
        assert page.get_by_role("radio", name="int8", exact=True).is_enabled()
        assert page.get_by_text("bf16 is not available").first.is_visible()
