"""In a real chromium, clicked with the mouse at 1100 and 1600 px: the Schedule page opens an AMX-BF16
convolution's default record on a CPU without AMX (the Leaderboard's "Open in Schedule page"), says what
the CPU lacks and what to do, shows the code built for the target it names (``cpu:sapphirerapids``,
compile only), and refuses to build for this machine without the page or its server dying (LLVM aborts
the process on tile code for a CPU without AMX); the Profile page shows OpenVINO's rows with their
outputs' error. AMX is hidden from this CPU's flags (``SCHEDX_CPU_FLAGS``): the same refusal on any
x86 host, AMX or not."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

from explorer.target import host_cpu
from explorer.target.environment import cpu_flags
from tests.browser import (chromium_page, describe_findings, open_page, pick_option, readability_findings, schedx_ui,
                           screenshot_dir, server_log, settle, wait_for_page_text)

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(host_cpu().arch != "x86_64", reason="AMX tiles are x86 instructions")]

SIZES = [(1100, 900), (1600, 1000)]
NO_AMX = " ".join(sorted(f for f in cpu_flags() if not f.startswith("amx")))  # this CPU, AMX hidden (if it has any)
SPR = "cpu:sapphirerapids"
MISSING = "this CPU has no amx-bf16, amx-tile"
WHAT_TO_DO = f"see its code built for {SPR} (compile only: the Schedule page's target picker)"


@pytest.fixture(scope="module")
def amx_record_db(tmp_path_factory):
    """A leaderboard database holding the default record a search stores for a bf16 convolution on AMX
    tiles (its trace only), made for ``cpu:sapphirerapids`` at 2 cores; the record's id and the length of
    the LLVM IR its ``pragma_import_llvm`` step imports (the longest text in the trace, which holds an
    annotation's text as a quoted literal)."""
    from explorer.kernels import make_kernel
    from explorer.schedule.defaults import default_schedule
    from explorer.target import parse_target
    from explorer.workload import kernel_task
    from search.records import task_workload
    from tests.default_records import add_default_record
    from tests.direct_bf16_conv import direct_conv_func

    db = tmp_path_factory.mktemp("amx") / "amx.db"
    kernel = make_kernel(direct_conv_func(1, 64, 7, 7, 256, 3, 1, 1), name="amx_conv", title="amx_conv",
                         source="test", spec="amx_conv", params={})
    task = kernel_task(kernel)
    _, choice = default_schedule(task.mod["main"], replace(parse_target(SPR).cpu_spec(), cores=2))
    with pytest.MonkeyPatch.context() as mp:  # the record's hardware: the machine the server plays
        mp.setenv("SCHEDX_CPU_FLAGS", NO_AMX)
        record_id = add_default_record(db, task_workload(task, source="search"), choice.trace)
    llvm_ir = max(_texts(choice.trace), key=len)
    assert llvm_ir[0] == llvm_ir[-1] == '"' and "@llvm.x86.tdpbf16ps" in llvm_ir, llvm_ir[:200]
    return db, record_id, len(llvm_ir) - 2


@pytest.fixture(scope="module")
def amx_ui(amx_record_db):
    """One server, AMX hidden from its CPU's flags, on the AMX record's database, for both widths
    (each width's page a session of its own; its log read for LLVM's abort after both)."""
    with schedx_ui({"SCHEDX_DB": str(amx_record_db[0]), "SCHEDX_CPU_FLAGS": NO_AMX}) as url:
        yield url


@pytest.fixture(scope="module")
def profile_ui(tmp_path_factory):
    """One server for both widths' profiles (a database of no records: nothing for an in-model
    decision to time), each width's page a session of its own."""
    pytest.importorskip("openvino", reason="openvino is not installed (pip install 'schedx[openvino]')")
    with schedx_ui({"SCHEDX_DB": str(tmp_path_factory.mktemp("profile") / "p.db")}) as url:
        yield url


def _texts(plain) -> list[str]:
    """Every string in a plain JSON value."""
    if isinstance(plain, str):
        return [plain]
    values = plain.values() if isinstance(plain, dict) else plain if isinstance(plain, (list, tuple)) else ()
    return [text for value in values for text in _texts(value)]


def _alive(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=5) as r:
        return r.status == 200


def _click_tab(page, name: str) -> None:
    page.get_by_role("tab", name=name, exact=True).click()
    settle(page)


def _measure_button(page):
    return page.get_by_role("button", name="Build & measure", exact=True)


def _refusal_panel(page):
    return page.locator('[data-testid="stAlert"]').filter(has_text="Cannot build or measure this schedule here")


def _unreadable(page, within: str) -> list[dict]:
    """Readability findings (tests/browser.py) in the elements whose text holds ``within`` (any case): the
    panels this file tests (at 1100 px the step form's loop picker cuts a model kernel's long loop names)."""
    return [f for f in readability_findings(page) if within.lower() in f["text"].lower()]


@pytest.mark.parametrize("width,height", SIZES)
def test_an_amx_record_is_refused_for_this_cpu_and_built_for_the_target_the_refusal_names(
        tmp_path, amx_record_db, amx_ui, width, height):
    _, record_id, llvm_chars = amx_record_db
    shots = screenshot_dir(tmp_path)
    url = amx_ui
    with chromium_page(width, height, timeout_ms=120_000) as page:
        open_page(page, f"{url}/leaderboard", "best records")
        page.get_by_role("button", name="Open in Schedule page").click()  # the record goes to the editor
        page.wait_for_url("**/schedule")
        page.get_by_text(f"steps on record:{record_id}.").first.wait_for()  # "Opened the record's 18 steps on ..."
        page.get_by_text("From the leaderboard: amx_conv").first.wait_for()  # its kernel, in the sidebar
        settle(page)
        # the step that imports the tile kernel's LLVM IR (~5000 characters) is listed in a few lines, not two screens
        imported = page.locator("li:not(:has(li))").filter(has_text="key=pragma_import_llvm")
        listed = imported.inner_text()
        assert f"({llvm_chars:,} characters)" in listed and len(listed) < 300, listed
        assert imported.bounding_box()["height"] < 200, imported.bounding_box()  # ~5 lines at 1100 px; 40 before
        imported.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / f"isa-refusal-steps-{width}.png"), full_page=False)
        # the steps file holds the value whole: as long as the record's
        page.get_by_text("Save or load the steps", exact=True).click()
        with page.expect_download() as download:
            page.get_by_role("button", name="Steps (JSON)", exact=True).click()
        settle(page)  # (a download button reruns the page)
        saved = json.loads(Path(download.value.path()).read_text())
        (value,) = [s["args"]["value"] for s in saved["steps"]
                    if s["primitive"] == "annotate" and s["args"].get("key") == "pragma_import_llvm"]
        assert len(value) == llvm_chars, (len(value), llvm_chars)

        # this machine (the picker's default): the refusal says what is missing and what to do
        panel = _refusal_panel(page)
        panel.wait_for()
        said = panel.inner_text()
        assert "this schedule uses AMX-BF16 tiles (llvm.x86.tdpbf16ps in schedx_amx_bf16" in said, said
        assert MISSING in said and WHAT_TO_DO in said and "measure it on a machine with AMX-BF16 tiles" in said, said
        assert _measure_button(page).is_disabled()
        _click_tab(page, "Assembly")  # the tabs that need LLVM say why there is nothing in them
        tab = page.get_by_role("tabpanel").filter(has_text="not built for llvm")
        assert MISSING in tab.first.inner_text()
        panel.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / f"isa-refusal-host-{width}.png"), full_page=False)
        findings = _unreadable(page, "amx")
        assert not findings, describe_findings(findings)

        # the target the refusal names, picked in the target picker: its code, compile only
        pick_option(page, "Target", SPR)
        settle(page, timeout_ms=180_000)
        _click_tab(page, "Assembly")
        wait_for_page_text(page, "llvm sapphirerapids 2c: ", " instructions; vector: ", timeout_ms=180_000)
        assert _refusal_panel(page).count() == 0
        assert page.get_by_text("not built for llvm").count() == 0
        assert page.get_by_text("Measuring needs a target this machine runs").first.is_visible()
        caption = page.get_by_text("Building for llvm sapphirerapids").first.inner_text()  # why, said once
        assert caption.count("which this CPU does not have") == 1 and "does not run here" not in caption, caption
        assert _measure_button(page).is_disabled()  # sapphirerapids does not run here: the caption says why
        page.get_by_role("tab", name="Assembly", exact=True).scroll_into_view_if_needed()
        page.screenshot(path=str(shots / f"isa-refusal-spr-{width}.png"), full_page=False)
        findings = _unreadable(page, "sapphirerapids")
        assert not findings, describe_findings(findings)

        # back to this machine: refused again, the page and its server alive and answering clicks
        pick_option(page, "Target", "cpu (this machine)", type_text=False)
        settle(page)
        _refusal_panel(page).wait_for()
        assert _measure_button(page).is_disabled()
        assert _refusal_panel(page).is_visible()
        _click_tab(page, "Lowered TIR")  # lowered without LLVM: the tile calls are there to read
        wait_for_page_text(page, "schedx_amx_bf16conv")
        _click_tab(page, "Loop nest")
        page.get_by_role("tabpanel").filter(has_text="for ").first.wait_for()
        assert _alive(url)
        log = server_log(url, chars=20_000)
        assert "LLVM ERROR" not in log and "Aborted" not in log, log
        body = page.locator("body").inner_text()
        assert "Aborted" not in body and "Connection error" not in body, body[-2000:]


def _tiny_onnx(path) -> str:
    import onnx

    from tests.conftest import tiny_cnn

    onnx.save(tiny_cnn(), path)
    return str(path)


@pytest.mark.parametrize("width,height", SIZES)
def test_the_profile_page_shows_openvinos_rows_with_their_error(profile_ui, tmp_path, width, height):
    """The cheapest real path the page offers: a 6-node ONNX model typed as the spec (small_cnn costs a
    whole-model build); profiled by the button, OpenVINO's rows beside TVM's with their outputs' error."""
    model = _tiny_onnx(tmp_path / "tiny.onnx")
    url = profile_ui
    with chromium_page(width, height, timeout_ms=120_000) as page:
        open_page(page, f"{url}/profile", "Profiled runs")
        box = page.get_by_label("or any model spec", exact=True)
        box.click()
        page.keyboard.type(model)
        page.keyboard.press("Enter")
        settle(page)
        page.get_by_role("button", name="Profile", exact=True).click()
        caption = page.get_by_text("OpenVINO's outputs by schedx's verification rule:").first
        caption.wait_for(timeout=120_000)
        settle(page)
        said = caption.inner_text()
        assert "openvino f32 error " in said and " against ONNX Runtime fp32 (within schedx's fp32 bound 1e-04)" \
            in said, said
        assert "openvino default (" in said, said  # the default precision's row, with its own bound
        ratios = page.locator('[data-testid="stMetric"]').filter(has_text="TVM / openvino")
        ratios.first.wait_for()
        shown = ratios.all_inner_texts()  # TVM against each row: a ratio with its interval
        assert len(shown) == 2 and all(t.strip().endswith(")") for t in shown), shown
        caption.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot_dir(tmp_path) / f"profile-openvino-{width}.png"), full_page=False)
        findings = _unreadable(page, "openvino")
        assert not findings, describe_findings(findings)
