"""The Export page on its own under AppTest: tasks with their preselected records, a pick changed,
build and verify, warnings, the zip to download."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from explorer.target.environment import hardware_fingerprint
from explorer.schedule.steps import Step
from explorer.schedule.trace import steps_to_trace
from explorer.target import canonical_target, host_target
from explorer.workload import load_workload
from search.records import store_workload
from store import Record, Store
from tests.cpu_marks import HAS_BF16

pytestmark = pytest.mark.heavy  # real builds or searches: left out of make test-fast

PAGE = str(Path(__file__).resolve().parent.parent / "app" / "ui" / "export_page.py")
STEPS = [{"primitive": "reorder", "args": {"loops": ["conv2d_nhwc/nn", "conv2d_nhwc/yy", "conv2d_nhwc/xx",
                                                     "conv2d_nhwc/ry", "conv2d_nhwc/rx", "conv2d_nhwc/rc",
                                                     "conv2d_nhwc/ff"]}},
         {"primitive": "parallel", "args": {"loop": "conv2d_nhwc/yy"}}]
TASK = "small_cnn/fused_conv2d1_add1_relu1"  # conv + folded batch-norm + relu


def _page(db: Path) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=300).run()
    at.sidebar.text_input(key="ex_db").set_value(str(db)).run()
    return at


def _db_with_two_records(path: Path) -> tuple[int, int]:
    mod = load_workload("small_cnn").fused_module()
    func = mod[TASK.split("/")[1]]
    trace = steps_to_trace(func, [Step(s["primitive"], s["args"]) for s in STEPS])
    with Store(path) as store:
        key = store.add_workload(store_workload(func, name=TASK, kind="model_task"))
        common = dict(workload_key=key, target=canonical_target(host_target()), hardware=hardware_fingerprint(),
                      status="ok", gflops=None, environment={}, verified=True)
        fast = store.add_record(Record(source="search", steps=[], trace=trace, latencies=[1e-4], median_s=1e-4,
                                       **common))
        slow = store.add_record(Record(source="manual", steps=STEPS, trace=None, latencies=[3e-4], median_s=3e-4,
                                       **common))
    return fast, slow


def test_builds_small_cnn_and_offers_the_zip(tmp_path):
    at = _page(tmp_path / "none.db")
    assert not at.exception and not at.error
    assert any("No database at" in c.value for c in at.caption)
    assert at.dataframe and len(at.dataframe[0].value) == 8
    at.button(key="ex_build").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.success and "small_cnn for llvm" in at.success[0].value and "verified:" in at.success[0].value
    assert any("have no record" in w.value for w in at.warning)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["verified"] == "yes" and float(metrics["max rel error"]) < 1e-4
    assert any("Layer by layer: all" in i.value for i in at.info)
    download = at.get("download_button")
    assert download and "small_cnn" in download[0].proto.label


def test_best_record_is_preselected_and_a_pick_can_change_it(tmp_path):
    db = tmp_path / "records.db"
    fast, slow = _db_with_two_records(db)
    at = _page(db)
    assert not at.exception
    pick = at.selectbox(key=f"ex_pick_{TASK}")
    assert pick.value == fast and pick.options[-1] == "default schedule"
    assert "1 with records" in at.subheader[0].value
    table = at.dataframe[0].value
    assert table.loc[table["kernel"] == TASK, "schedule"].item() == f"record {fast}"
    pick.set_value(slow).run()
    checkbox = at.checkbox(key="ex_in_model")
    assert checkbox.value  # on by default: an export never ships a record that loses in the model ...
    checkbox.uncheck().run()  # ... unless the user says to apply the picks as chosen
    at.button(key="ex_build").click().run()
    assert not at.exception and at.success
    manifest = at.session_state["ex_result"]["report"].manifest
    assert manifest["records"] == {TASK: slow}
    data = at.session_state["ex_result"]["zip"]
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert any(n.endswith("/manifest.json") for n in names) and any(n.endswith("/lib.so") for n in names)


def test_cuda_target_shows_the_gpu_checks(tmp_path):
    at = _page(tmp_path / "none.db")
    at.sidebar.radio(key="ex_source").set_value("Kernel").run()
    at.sidebar.text_input(key="ex_kernel").set_value("matmul:M=64,N=64,K=64").run()
    at.sidebar.selectbox(key="ex_target_kind_pick").set_value("cuda:sm_90").run()
    at.button(key="ex_build").click().run()
    assert not at.exception
    assert any("every PrimFunc thread-bound" in i.value for i in list(at.info) + list(at.error))
    assert any("dlight" in w.value for w in at.warning)
    # no GPU here: the verdict says the bundle was built, not run, and why
    assert any("not run here" in w.value and "no CUDA GPU" in w.value for w in at.warning)


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16 (avx512_bf16 not in its flags): the "
                                         "page disables bf16")
def test_bf16_lists_the_bf16_kernels_and_a_single_kernel_disables_it(tmp_path):
    at = _page(tmp_path / "none.db")
    at.sidebar.radio(key="ex_precision").set_value("bf16").run()
    assert not at.exception and not at.error
    assert "small_cnn/fused_dense_bf16_strided_slice_add3" in list(at.dataframe[0].value["kernel"])
    at.sidebar.radio(key="ex_source").set_value("Kernel").run()
    choice = at.sidebar.radio(key="ex_precision")
    assert choice.disabled and choice.value == "fp32"
    assert any("bf16 is not available" in c.value and "is a single kernel" in c.value for c in at.sidebar.caption)


def test_int8_builds_the_quantized_models_int8_kernels_and_says_what_quantizing_cost(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # its quantized model, in a private cache
    at = _page(tmp_path / "none.db")
    at.sidebar.radio(key="ex_precision").set_value("int8").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    kernels = list(at.dataframe[0].value["kernel"])
    assert any(k.startswith("small_cnn.int8/") and "conv2d_nhwc_int8" in k for k in kernels), kernels
    at.button(key="ex_build").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    note = next(i.value for i in at.info if "Precision: int8" in i.value)
    assert "calibrated on 16 random sample(s)" in note and "against ONNX Runtime running the int8 model" in note
    assert any("verified" in s.value for s in at.success), [s.value for s in at.success]


def test_bad_input_is_shown_not_raised(tmp_path):
    at = _page(tmp_path / "none.db")
    at.sidebar.radio(key="ex_source").set_value("Kernel").run()
    at.sidebar.text_input(key="ex_kernel").set_value("matmul:Q=1").run()
    assert not at.exception and at.error and "has no parameter Q" in at.error[0].value
    at.sidebar.text_input(key="ex_kernel").set_value("matmul:M=8,N=8,K=8").run()
    at.sidebar.selectbox(key="ex_target_kind_pick").set_value("other…").run()
    at.sidebar.text_input(key="ex_target_kind_text").set_value("cpu:nocpu").run()
    assert at.error and "LLVM does not know the CPU" in at.error[0].value


def test_any_model_with_symbolic_dims_loads_with_the_shapes_given(tmp_path):
    import onnx

    from tests.conftest import tiny_cnn

    path = tmp_path / "batchless.onnx"
    onnx.save(tiny_cnn(batch="N"), path)
    at = _page(tmp_path / "none.db")
    at.sidebar.text_input(key="ex_model_spec").set_value(str(path)).run()
    assert not at.exception
    assert at.error and "N" in at.error[0].value, "a symbolic dim without shapes is named in the error"
    at.sidebar.text_input(key="ex_model_shapes").set_value("input:2x3x16x16").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.dataframe and len(at.dataframe[0].value) >= 1
    at.button(key="ex_build").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.success and "verified:" in at.success[0].value


def test_the_in_model_check_drops_a_record_slower_than_the_default_there(tmp_path, one_round_in_model_check):
    """The checkbox runs `schedx export --check-in-model`'s check before the build: the plain
    parallel loop nest the picked record is loses to the default schedule inside the model."""
    db = tmp_path / "records.db"
    _, slow = _db_with_two_records(db)
    at = _page(db)
    at.selectbox(key=f"ex_pick_{TASK}").set_value(slow).run()
    at.checkbox(key="ex_in_model").check().run()
    at.button(key="ex_build").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.session_state["ex_result"]["report"].manifest["records"] == {}
    assert any(TASK in w.value and "inside the model" in w.value for w in at.warning), [w.value for w in at.warning]
