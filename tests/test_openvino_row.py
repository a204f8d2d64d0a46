"""OpenVINO as an anchor (export.openvino_row): the same outputs as ONNX Runtime on a tiny model,
both rows (f32 and its default precision) timed in alternated rounds beside the other contenders,
each stating its outputs' error by schedx's verification rule, and one line saying how to add it
where it is not installed."""

from __future__ import annotations

import json
import sys
import types
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from benchmarks.bench_corpus import row_text, summary
from benchmarks.bench_models import show_model
from explorer.models.ort_run import ort_outputs
from explorer.models.qdq import INT8_STEPS
from explorer.precision import BF16_TOLERANCE
from export.bench import ORT_ROW, BenchReport, alternate, ort_row
from export.openvino_row import (
    BOUNDS,
    MISSING_NOTE,
    OV_DEFAULT_ROW,
    OV_F32_ROW,
    OpenVinoModel,
    compile_openvino,
    openvino_anchors,
    openvino_contenders,
    openvino_error,
    openvino_outputs,
    openvino_row,
)
from export.rows import OutputError
from export.runner.compare import compare_outputs
from export.verify import verification_rule
from tests.onnx_cases import ort_run, random_feeds
from tests.quantized_models import ort_quantize, small_mlp

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


@needs_openvino
@pytest.mark.parametrize("row, precision", [(OV_F32_ROW, "f32"), (OV_DEFAULT_ROW, None)])
def test_each_row_states_the_error_compare_outputs_gives_at_schedx_bound_for_its_precision(row, precision):
    model = tiny_model()
    refs = ort_outputs(model, INPUTS, threads=1)
    rule = verification_rule(model)  # the softmax output judged as an export's verification judges it
    assert rule.activations == ("Softmax", None) and rule.rtol == 1e-4 and rule.reference == "ONNX Runtime fp32"
    compiled = compile_openvino(model, threads=1, precision=precision)
    got = openvino_row(compiled, row, INPUTS, runs=3, budget_s=1.0, references=refs, rule=rule)
    schedx_name, bound = BOUNDS[compiled.precision]
    assert bound == {"fp32": 1e-4, "bf16": BF16_TOLERANCE, "fp16": 1e-2}[schedx_name]
    check = compare_outputs(compiled.request()(INPUTS), refs, rtol=bound, activations=list(rule.activations))
    e = got.error
    assert (e.max_rel_error, e.max_abs_error, e.within) == (check["max_rel_error"], check["max_abs_error"],
                                                           check["verified"])
    assert e.precision == schedx_name and e.bound == bound and e.reference == "ONNX Runtime fp32"
    if e.max_rel_error <= bound:  # the plain bound holds: nothing more to say
        assert e.within and e.text() == (f"error {e.max_rel_error:.2e} of max|ref| against ONNX Runtime fp32 (within "
                                         f"schedx's {schedx_name} bound {bound:.0e})")
    assert json.loads(json.dumps(got.to_dict()))["error"]["max_rel_error"] == e.max_rel_error


@needs_openvino
def test_a_row_over_schedx_bound_says_so_and_why_in_the_table_and_the_json():
    model = tiny_model()
    off = [r * 1.05 for r in ort_outputs(model, INPUTS, threads=1)]  # a reference 5% away: over fp32's 1e-4
    anchors, notes = openvino_contenders(model, INPUTS, threads=1, references=off)
    rows, _ = alternate(anchors, rounds=2, runs=3, budget_s=1.0)  # the first round's error kept in the pooled row
    f32 = rows[OV_F32_ROW]
    assert f32.rounds == 2 and not f32.error.within and 0.04 < f32.error.max_rel_error < 0.06
    table = BenchReport("tiny", 1, list(rows.values()), notes).table()
    line = next(ln for ln in table.splitlines() if ln.startswith("openvino f32 "))
    assert (f"error {f32.error.max_rel_error:.2e} of max|ref| against ONNX Runtime fp32 (over schedx's fp32 bound "
            f"1e-04: output 0 differs from the reference at ") in line and "; OpenVINO " in line
    assert BenchReport("tiny", 1, list(rows.values())).to_dict()["rows"][0]["error"]["within"] is False


def _softmax_nudged(refs: list[np.ndarray]) -> list[np.ndarray]:
    """The reference with one softmax value moved by 60% of what the Softmax rule allows it (and
    over what fp32's plain bound allows any element of that output)."""
    y = refs[0].copy()
    flat = y.reshape(-1)
    i = int(np.argmax(flat * (1 - flat)))  # the value the Softmax rule allows the most
    logs = np.log(flat[flat > 0])
    nudge = 0.6 * 1e-4 * float(logs.max() - logs.min()) * 2 * flat[i] * (1 - flat[i])
    assert nudge > 1.5e-4 * float(flat.max())  # over the plain bound, whatever OpenVINO's own error
    flat[i] += nudge
    return [y, *refs[1:]]


@needs_openvino
def test_a_softmax_output_within_only_by_the_activation_rule_says_so():
    model = tiny_model()
    refs = _softmax_nudged(ort_outputs(model, INPUTS, threads=1))
    compiled = compile_openvino(model, threads=1, precision="f32")
    outputs = compiled.request()(INPUTS)
    rule = verification_rule(model)
    e = openvino_error(compiled, outputs, refs, rule)
    assert e.within and e.max_rel_error > e.bound == 1e-4  # the figure over the bound, the verdict within
    assert e.text().startswith(f"error {e.max_rel_error:.2e} of max|ref| against ONNX Runtime fp32 (within schedx's "
                               "rule, though over its fp32 bound 1e-04: output 0 is nearest its bound at ")
    assert "as the Softmax of an input of scale" in e.why
    without = openvino_error(compiled, outputs, refs, replace(rule, activations=()))  # the plain bound alone
    assert not without.within and without.text().startswith(f"error {without.max_rel_error:.2e} of max|ref| against "
                                                            "ONNX Runtime fp32 (over schedx's fp32 bound 1e-04: ")


@needs_openvino
def test_outputs_that_do_not_line_up_are_over_with_why_and_json_without_infinity():
    model = tiny_model()
    refs = ort_outputs(model, INPUTS, threads=1)
    compiled = compile_openvino(model, threads=1, precision="f32")
    outputs, rule = compiled.request()(INPUTS), verification_rule(model)
    missing = openvino_error(compiled, outputs, [*refs, refs[1]], rule)  # the reference has an output more
    assert not missing.within and missing.why == "2 outputs, the reference has 3"
    assert missing.text().endswith("(over schedx's fp32 bound 1e-04: 2 outputs, the reference has 3)")
    shape = openvino_error(compiled, outputs, [refs[0], refs[1].reshape(-1)], rule)  # another shape: no figure
    assert not shape.within and shape.max_rel_error is None and shape.max_abs_error is None
    assert shape.text() == "no error figure against ONNX Runtime fp32 (over schedx's fp32 bound 1e-04: output 1: " \
                           "shape (2, 8), expected (16,))"
    assert json.loads(json.dumps(shape.to_dict(), allow_nan=False))["max_rel_error"] is None


def test_a_quantized_model_is_held_to_its_quantization_steps_against_onnx_runtime(tmp_path):
    """An int8 (QDQ) model: ONNX Runtime runs it quantized (no "fp32"), each output within a few of
    its quantization steps as schedx's export verifies it; OpenVINO's bf16 at bf16's bound or more."""
    model = ort_quantize(small_mlp(), tmp_path)
    rule = verification_rule(model)
    assert rule.reference == "ONNX Runtime" and rule.rtol == 1e-4 and len(rule.output_atol) == 1
    step = rule.output_atol[0] / INT8_STEPS  # the output's quantization step
    ref = ort_run(model, random_feeds(model))[0]
    bf16 = OpenVinoModel(compiled=None, precision="bf16", compile_s=0.0, version="test")  # its precision alone is read
    e = openvino_error(bf16, [ref + 4 * step], [ref], rule)  # 4 steps off: within 8, over bf16's 1e-2 of max|ref|
    assert e.within and e.bound == BF16_TOLERANCE and e.precision == "bf16" and e.max_rel_error > e.bound
    assert e.text().startswith(f"error {e.max_rel_error:.2e} of max|ref| against ONNX Runtime (within schedx's rule, "
                               "though over its bf16 bound 1e-02: ") and "quantization steps" in e.why
    assert not openvino_error(bf16, [ref + 9 * step], [ref], rule).within  # past the steps: over
    other = OpenVinoModel(compiled=None, precision="i8", compile_s=0.0, version="test")  # no schedx bound: fp32's
    assert (openvino_error(other, [ref], [ref], rule).text()
            == "error 0.00e+00 of max|ref| against ONNX Runtime (within schedx's i8 bound 1e-04)")


@needs_openvino
def test_a_reference_onnx_runtime_cannot_compute_leaves_the_rows_without_error_and_a_note():
    as_double = {"x": INPUTS["x"].astype("f8")}  # ONNX Runtime refuses doubles for a float input; OpenVINO casts
    anchors, notes = openvino_contenders(tiny_model(), as_double, threads=1)
    assert list(anchors) == [OV_F32_ROW, OV_DEFAULT_ROW] and len(notes) == 1
    assert notes[0].startswith("OpenVINO: ONNX Runtime could not compute the reference, so OpenVINO's rows state no "
                               "error (") and "\n" not in notes[0]
    row = anchors[OV_F32_ROW](3, 0.5)
    assert row.error is None and row.median_s > 0 and row.remarks() == row.note


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


def _error(rel: float, within: bool, precision: str = "bf16", bound: float = 1e-2, why: str = "") -> dict:
    e = OutputError(rel * 10, rel, precision, bound, within, "ONNX Runtime fp32", why)
    return e.to_dict() | {"text": e.text()}


def test_corpus_rows_and_summary_state_openvino_error_by_schedx_rule():
    results = [{"name": "mobilenet", "imports": True, "verified": True, "ratio_2t": 1.0, "ratio_1t": 1.0,
                "openvino_error": {"openvino default (bf16)": _error(1.7e-2, False)}},
               {"name": "resnet", "imports": True, "verified": True, "ratio_2t": 1.0, "ratio_1t": 1.0,
                "openvino_error": {"openvino default (bf16)": _error(3.1e-3, True)}}]
    assert row_text(results[0]).splitlines()[-1] == ("    openvino default (bf16) error 1.70e-02 of max|ref| against "
                                                     "ONNX Runtime fp32 (over schedx's bf16 bound 1e-02)")
    assert ("openvino default (bf16) against ONNX Runtime: worst error 1.70e-02 of max|ref| (mobilenet), 1/2 "
            "over schedx's rule for the model at bf16") in summary(results, None)
    results[1]["openvino_error"]["openvino default (bf16)"] |= {"max_abs_error": None, "max_rel_error": None}
    assert ("openvino default (bf16) against ONNX Runtime: worst error no error figure (resnet), 1/2 over schedx's "
            "rule for the model at bf16") in summary(results, None)  # no figure (a shape apart) counts as the worst


def test_bench_models_prints_the_error_beside_the_openvino_median(capsys):
    show_model({"model": "mobilenet_v2", "tasks": 3, "default_export_s": 1.0, "median_ms": {"tvm default": 2.0,
                "openvino default (bf16)": 1.5}, "ci_ms": {}, "comparisons": [], "ratios": {}, "top5": [],
                "output_error": {"openvino default (bf16)": _error(1.7e-2, False)}})
    lines = {ln.split("  ")[1]: ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("  ")}
    assert lines["openvino default (bf16)"].endswith(" 1.50 ms  error 1.70e-02 of max|ref| against ONNX Runtime fp32 "
                                                     "(over schedx's bf16 bound 1e-02)")
    assert lines["tvm default"].endswith(" 2.00 ms")  # a row with no error measured: the median alone


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
    errors = {r["name"]: r["error"] for r in data["rows"]}  # OpenVINO's outputs by schedx's rule; others: not measured
    assert errors["openvino f32"]["precision"] == "fp32" and errors["openvino f32"]["within"], errors
    assert errors[ORT_ROW] is None and errors["tvm default"] is None


@pytest.mark.heavy  # builds small_cnn
def test_schedx_bench_without_openvino_says_how_to_add_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)
    data = _bench_json()
    assert not any(r["name"].startswith("openvino") for r in data["rows"])
    assert MISSING_NOTE in data["notes"] and ORT_ROW in [r["name"] for r in data["rows"]]
