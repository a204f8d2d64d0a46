"""The Schedule page under AppTest: pick a kernel, apply steps from the form, undo, measure."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.heavy  # real builds or searches: left out of make test-fast

PAGE = str(Path(__file__).resolve().parent.parent / "app" / "ui" / "schedule.py")


def small_matmul() -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=300).run()
    assert not at.exception
    for p, v in (("M", 64), ("N", 64), ("K", 32)):
        at.sidebar.number_input(key=f"param_matmul_{p}").set_value(v)
    return at.run()


def apply(at: AppTest, primitive: str, **args) -> AppTest:
    at.selectbox(key="next_primitive").set_value(primitive).run()
    for name, value in args.items():
        widget = at.get_by_key(f"arg_{primitive}_{name}") if hasattr(at, "get_by_key") else None
        key = f"arg_{primitive}_{name}"
        if name == "factors":
            at.text_input(key=key).input(value)
        elif name == "loops":
            at.multiselect(key=key).set_value(value)
        else:
            at.selectbox(key=key).set_value(value)
        del widget
    at.button(key="apply_step").click().run()
    return at


def code(at: AppTest) -> str:
    return next(h.proto.body for h in at.get("html") if "sx-code" in h.proto.body)


def test_apply_undo_and_errors_keep_the_schedule():
    at = small_matmul()
    assert "matmul:M=64,N=64,K=32" in at.caption[0].value
    apply(at, "split", loop="C/i", factors="None, 16")
    assert not at.error and "Steps (1 of 1)" in [s.value for s in at.subheader]
    assert "i_0" in code(at) and 'class="hl"' in code(at)
    apply(at, "vectorize", loop="C/k")  # a reduction loop: TVM refuses
    assert at.error and "unchanged" in at.error[0].value
    assert "Steps (1 of 1)" in [s.value for s in at.subheader]
    at.button(key="undo").click().run()
    assert "Steps (0 of 1)" in [s.value for s in at.subheader]
    at.button(key="redo").click().run()
    assert "Steps (1 of 1)" in [s.value for s in at.subheader]


def test_measure_shows_gflops_and_peak():
    at = small_matmul()
    apply(at, "split", loop="C/j", factors="None, 16")
    apply(at, "vectorize", loop="C/j_1")
    apply(at, "parallel", loop="C/i")
    at.button(key="measure").click().run()
    assert not at.exception and not at.error
    metrics = {m.label: m.value for m in at.metric}
    assert float(metrics["GFLOPS"]) > 0 and metrics["verified"] == "yes" and metrics["% of peak"].endswith("%")
    assert at.get("plotly_chart")


def test_fused_kernel_from_a_model():
    at = AppTest.from_file(PAGE, default_timeout=300).run()
    at.sidebar.radio(key="kernel_source").set_value("From a model").run()
    at.sidebar.selectbox(key="kernel_model").set_value("small_cnn").run()
    assert not at.exception and not at.error
    assert "small_cnn/" in at.caption[0].value


def test_a_models_int8_kernels_are_those_of_its_quantized_model(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # its quantized model, in a private cache
    at = AppTest.from_file(PAGE, default_timeout=300).run()
    at.sidebar.radio(key="kernel_source").set_value("From a model").run()
    at.sidebar.selectbox(key="kernel_model").set_value("small_cnn").run()
    at.sidebar.radio(key="schedule_precision").set_value("int8").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    fused = at.sidebar.selectbox(key="kernel_fused")
    assert any("conv2d_nhwc_int8" in k for k in fused.options), fused.options  # (shown without the model's name)
    assert fused.value.startswith("small_cnn.int8/")


def test_measurements_go_to_the_leaderboard_and_records_open_as_steps(tmp_path):
    from store import Store

    db = tmp_path / "ui.db"
    at = small_matmul()
    at.session_state["db_path"] = str(db)
    apply(at, "split", loop="C/j", factors="None, 16")
    apply(at, "vectorize", loop="C/j_1")
    at.button(key="measure").click().run()
    assert not at.exception
    with Store(db) as store:
        records = store.records()
    assert sorted(len(r.steps) for r in records) == [0, 2]  # the unscheduled baseline, then the schedule
    assert {r.source for r in records} == {"manual"}
    manual = next(r for r in records if r.steps)
    assert [s["primitive"] for s in manual.steps] == ["split", "vectorize"] and manual.gflops > 0

    fresh = AppTest.from_file(PAGE, default_timeout=300)
    fresh.session_state["db_path"] = str(db)
    fresh.session_state["open_record"] = manual.id
    fresh.run()
    assert not fresh.exception and not fresh.error
    assert any("Opened the record's 2 steps" in s.value for s in fresh.success)
    assert "Steps (2 of 2)" in [s.value for s in fresh.subheader]


def test_a_default_record_opens_as_the_steps_of_its_trace(tmp_path):
    """A default schedule the search measured is stored with its trace only (a tail of rows:
    loop_partition, caches that share a name); the Leaderboard's "open" shows it as steps that
    rebuild it, with the partitioned nest in the loop tree."""
    from explorer.target.environment import hardware_fingerprint
    from explorer.schedule.defaults import CpuSpec, default_schedule
    from explorer.workload import load_kernel
    from search.records import store_workload
    from store import Record, Store

    spec = "conv2d_nhwc:N=1,C=16,H=14,W=14,K=16,R=3,S=3,stride=1,pad=1"
    kernel = load_kernel(spec)
    _, choice = default_schedule(kernel.func, CpuSpec(vector_bits=256, registers=16, cores=2, arch="x86_64"))
    assert "the last 4 in 4x16" in choice.steps[0], choice
    db = tmp_path / "defaults.db"
    workload = store_workload(kernel.func, shapes={"spec": spec})
    with Store(db) as store:
        store.add_workload(workload)
        record_id = store.add_record(Record(
            workload_key=workload.key, target='{"kind": "llvm"}', hardware=hardware_fingerprint(), source="default",
            status="ok", steps=[], trace=choice.trace, latencies=[1e-4], median_s=1e-4, gflops=None, environment={}))

    at = AppTest.from_file(PAGE, default_timeout=300)
    at.session_state["db_path"] = str(db)
    at.session_state["open_record"] = record_id
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    opened = next(s.value for s in at.success if "Opened the record's" in s.value)
    assert spec in opened
    nest = next(c.value for c in at.code if "_partition" in c.value)
    assert "#0 [SSSS]" in nest and "#1 [SSSS]" in nest


def test_split_offers_only_loops_with_something_to_split_and_their_factors():
    """A loop of one iteration was offered to split (with factors it cannot take); the factors
    field now names the chosen loop's extent and its exact factors."""
    at = AppTest.from_file(PAGE, default_timeout=300).run()
    for p, v in (("M", 1), ("N", 56), ("K", 16)):
        at.sidebar.number_input(key=f"param_matmul_{p}").set_value(v)
    at.run()
    at.selectbox(key="next_primitive").set_value("split").run()
    options = at.selectbox(key="arg_split_loop").options
    assert options and not any(o.split()[0].endswith("/i") for o in options), options  # i: M = 1
    at.selectbox(key="arg_split_loop").set_value("C/j").run()
    assert "56 iterations" in at.text_input(key="arg_split_factors").help
    assert "2, 4, 7, 8, 14, 28" in at.text_input(key="arg_split_factors").help


def test_the_assembly_tab_opens_at_the_hot_loop():
    at = small_matmul()
    apply(at, "split", loop="C/j", factors="None, 16")
    apply(at, "vectorize", loop="C/j_1")
    captions = [c.value for c in at.caption]
    # the whole listing beside the script, linked line by line, opened at the hot loop
    assert any("opened at the hot loop (lines" in c and "FMA" in c for c in captions), captions


def test_the_last_step_shows_before_and_after_side_by_side():
    """The step's change was a highlight in the new script only; now also the two side by side."""
    at = small_matmul()
    apply(at, "split", loop="C/j", factors="None, 16")
    at.toggle(key="script_sbs").set_value(True).run()
    import html
    import re

    table = next(h.proto.body for h in at.get("html") if "<table" in h.proto.body and "sbs" in h.proto.body)
    text = html.unescape(re.sub(r"<[^>]+>", "", table))
    assert "for i, j, k in T.grid(64, 64, 32)" in text and "j_1" in text  # the loops before the split, and after
