"""OpenVINO as an anchor (export.openvino_row): the same outputs as ONNX Runtime on a tiny model,
both rows (f32 and its default precision) timed in alternated rounds beside the other contenders,
and one line saying how to add it where it is not installed."""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from benchmarks.bench_corpus import summary
from explorer.models.ort_run import ort_outputs
from export.bench import ORT_ROW, alternate, ort_row
from export.openvino_row import (
    MISSING_NOTE,
    OV_DEFAULT_ROW,
    OV_F32_ROW,
    openvino_anchors,
    openvino_contenders,
    openvino_outputs,
)

try:
    import openvino  # noqa: F401

    HAVE_OPENVINO = True
except ImportError:
    HAVE_OPENVINO = False
needs_openvino = pytest.mark.skipif(not HAVE_OPENVINO, reason="openvino is not installed (pip install "
                                                              "'schedx[openvino]'; the dev extra pulls it)")


def tiny_model() -> onnx.ModelProto:
    """x (2x16) @ w (16x8) + b, ReLU, softmax: two outputs (the ReLU's and the softmax's)."""
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, [16, 8], rng.standard_normal((16, 8)).astype("f4").ravel())
    b = helper.make_tensor("b", TensorProto.FLOAT, [8], rng.standard_normal(8).astype("f4"))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Softmax", ["r"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8]),
                               helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 8])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


INPUTS = {"x": np.random.default_rng(1).standard_normal((2, 16)).astype("f4")}


@needs_openvino
def test_openvino_gives_the_outputs_of_onnx_runtime():
    model = tiny_model()
    want = ort_outputs(model, INPUTS, threads=1)
    f32 = openvino_outputs(model, INPUTS, threads=1)  # INFERENCE_PRECISION_HINT f32
    assert len(f32) == len(want) == 2
    for got, ref in zip(f32, want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    # the default precision is bf16 on AMX / AVX512-BF16 CPUs: 8 bits of mantissa, so a bf16
    # tolerance (2% of the output's range), never fp32's
    for got, ref in zip(openvino_outputs(model, INPUTS, threads=1, precision=None), want):
        np.testing.assert_allclose(got, ref, rtol=0, atol=2e-2 * max(1.0, float(np.abs(ref).max())))


@needs_openvino
def test_both_rows_run_in_the_alternated_rounds_with_intervals():
    model = tiny_model()
    anchors, notes = openvino_contenders(model, INPUTS, threads=1)
    assert notes == [] and list(anchors) == [OV_F32_ROW, OV_DEFAULT_ROW]
    contenders = {ORT_ROW: lambda n, b: ort_row(model, INPUTS, threads=1, runs=n, budget_s=b), **anchors}
    rows, comparisons = alternate(contenders, rounds=2, runs=6, budget_s=2.0,
                                  pairs=[(ORT_ROW, a) for a in anchors])
    assert rows[OV_F32_ROW].name == "openvino f32"
    assert rows[OV_DEFAULT_ROW].name.startswith("openvino default (")  # the precision it read back
    for row in rows.values():
        assert row.rounds == 2 and row.runs >= 6 and row.ci_low_s <= row.median_s <= row.ci_high_s
    assert [(c.a, c.b) for c in comparisons] == [(ORT_ROW, rows[a].name) for a in anchors]
    assert all(c.low <= c.ratio <= c.high for c in comparisons)


@needs_openvino
def test_anchors_compare_tvm_runs_with_each_row():
    anchors, notes = openvino_anchors(tiny_model(), INPUTS, [1e-3] * 5, threads=1, runs=3, tvm_name="tvm")
    assert notes == [] and [a.row.name.split(" (")[0] for a in anchors] == [OV_F32_ROW, OV_DEFAULT_ROW]
    for a in anchors:
        assert a.versus.a == "tvm" and a.versus.b == a.row.name and a.versus.low <= a.versus.ratio <= a.versus.high
        assert json.dumps(a.to_dict())


def test_without_openvino_the_rows_are_absent_with_one_line_saying_how_to_add_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)  # `import openvino` now raises ImportError
    anchors, notes = openvino_contenders(tiny_model(), INPUTS, threads=1)
    assert anchors == {} and notes == [MISSING_NOTE]
    assert "\n" not in MISSING_NOTE and "pip install 'schedx[openvino]'" in MISSING_NOTE
    anchors, notes = openvino_anchors(tiny_model(), INPUTS, [1e-3] * 3, threads=1)
    assert anchors == () and notes == [MISSING_NOTE]


def test_a_model_openvino_cannot_compile_is_a_note_not_a_crash(monkeypatch):
    import export.openvino_row as ov_row

    def refuse(*args, **kwargs):
        raise RuntimeError("Unsupported operator: Frobnicate\nmore lines")
    fake = types.ModuleType("openvino")
    fake.Core = lambda: None
    monkeypatch.setitem(sys.modules, "openvino", fake)  # installed or not, the compile is what fails here
    monkeypatch.setattr(ov_row, "compile_openvino", refuse)
    anchors, notes = openvino_contenders(tiny_model(), INPUTS, threads=1)
    assert anchors == {} and notes == ["OpenVINO: cannot compile this model, so no OpenVINO rows (Unsupported "
                                       "operator: Frobnicate)"]


def test_corpus_summary_gains_the_openvino_ratios():
    results = [{"name": "a", "imports": True, "verified": True, "ratio_2t": 1.0, "ratio_1t": 1.0, "ratio_ov_f32": 0.9,
                "ratio_ov_default": 2.0, "openvino_default": "openvino default (bf16)"},
               {"name": "b", "imports": True, "verified": True, "ratio_2t": 1.2, "ratio_1t": 1.1, "ratio_ov_f32": 1.3,
                "ratio_ov_default": 4.1, "openvino_default": "openvino default (bf16)"}]
    lines = summary(results, 100.0)
    assert "tvm / openvino f32 at 2 threads: median 1.10x, worst 1.30x (b), 1/2 <= 1.0x" in lines
    assert "tvm / openvino default (bf16) at 2 threads: median 3.05x, worst 4.10x (b), 0/2 <= 1.0x" in lines
    missing = [{"name": "a", "imports": True, "ratio_2t": 1.0, "ratio_1t": 1.0, "openvino_note": MISSING_NOTE}]
    assert MISSING_NOTE in summary(missing, None)


def _bench_json(*extra: str) -> dict:
    from click.testing import CliRunner

    from app.cli import cli

    result = CliRunner().invoke(cli, ["bench", "small_cnn", "--no-db", "--runs", "3", "--rounds", "1", "--json",
                                      *extra])
    assert result.exit_code == 0, result.output
    out = getattr(result, "stdout", result.output)
    return json.loads(out[out.index("{"):])


@pytest.mark.heavy  # builds small_cnn
@needs_openvino
def test_schedx_bench_shows_both_openvino_rows():
    data = _bench_json()
    names = [r["name"] for r in data["rows"]]
    assert "openvino f32" in names and any(n.startswith("openvino default (") for n in names), names
    pairs = [(c["a"], c["b"]) for c in data["comparisons"]]
    assert ("tvm default", "openvino f32") in pairs and ("tvm default", ORT_ROW) in pairs
    assert not any("OpenVINO" in n for n in data["notes"])


@pytest.mark.heavy  # builds small_cnn
def test_schedx_bench_without_openvino_says_how_to_add_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)
    data = _bench_json()
    assert not any(r["name"].startswith("openvino") for r in data["rows"])
    assert MISSING_NOTE in data["notes"] and ORT_ROW in [r["name"] for r in data["rows"]]
