"""int8 models: QDQ models from ONNX Runtime's quantizer import into TVM and match ONNX Runtime
within the int8 tolerance; QOperator models are rewritten to QDQ; ``schedx quantize`` reports."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from explorer.models import import_onnx
from explorer.models.qdq import (
    INT8_STEPS,
    int8_tolerance,
    is_quantized,
    output_steps,
    rewrite_qoperators,
)
from explorer.models.quantize import QuantizeError, needs_reduced_range, quantize_model, samples_from
from tests.conftest import tiny_cnn
from tests.onnx_cases import ort_run, random_feeds, tvm_run
from tests.quantized_models import ort_quantize, small_mlp


def _within_int8_tolerance(model, loaded, seeds=(11, 12, 13), steps=1):
    """TVM's output within ``steps`` output quantization steps of ONNX Runtime's (tiny nets: 1)."""
    tolerance = int8_tolerance(model, steps)
    assert list(tolerance) == [model.graph.output[0].name]
    limit = next(iter(tolerance.values()))
    worst = 0.0
    for seed in seeds:
        feeds = random_feeds(model, seed)
        got, want = tvm_run(loaded, feeds)[0], ort_run(model, feeds)[0]
        assert got.shape == want.shape
        worst = max(worst, float(np.abs(got - want).max()))
    assert worst <= limit, f"TVM and ONNX Runtime differ by {worst / (limit / steps):.1f} quantization steps"
    return worst


@pytest.mark.parametrize("per_channel", [True, False])
def test_qdq_conv_net_from_the_quantizer_imports_and_matches(tmp_path, per_channel):
    model = ort_quantize(tiny_cnn(), tmp_path, per_channel=per_channel)
    assert is_quantized(model) and any(n.op_type == "QuantizeLinear" for n in model.graph.node)
    loaded = import_onnx(model)
    assert "quantize" in loaded.mod.script() or "dequantize" in loaded.mod.script()
    _within_int8_tolerance(model, loaded)
    [(name, step)] = output_steps(model).items()
    assert int8_tolerance(model)[name] == pytest.approx(INT8_STEPS * step)  # the default for whole models


def test_qdq_matmul_net_imports_and_matches(tmp_path):
    model = ort_quantize(small_mlp(), tmp_path)
    _within_int8_tolerance(model, import_onnx(model))


def test_qoperator_form_is_rewritten_to_qdq(tmp_path):
    model = ort_quantize(tiny_cnn(), tmp_path, fmt="QOperator")
    ops = {(n.domain, n.op_type) for n in model.graph.node}
    assert ("", "QLinearConv") in ops and ("com.microsoft", "QGemm") in ops
    rewritten, notes = rewrite_qoperators(model)
    assert notes and not any(n.op_type in ("QLinearConv", "QGemm") for n in rewritten.graph.node)
    for seed in (1, 2):  # the rewrite computes what the fused integer operators compute
        feeds = random_feeds(model, seed)
        step = next(iter(output_steps(rewritten).values()))
        assert np.abs(ort_run(rewritten, feeds)[0] - ort_run(model, feeds)[0]).max() <= step
    loaded = import_onnx(model)
    assert any("QOperator" in n for n in loaded.info.notes)
    _within_int8_tolerance(rewritten, loaded)


def test_quantize_model_reports_side_by_side(tmp_path):
    out = tmp_path / "small.int8.onnx"
    qmodel, report = quantize_model(small_mlp(), calibrate=4, eval_samples=3, runs=3, budget_s=0.2, output=out)
    assert out.is_file() and onnx.load(out).graph.node
    assert report.calibration_samples == 4 and report.eval_samples == 3 and report.calibration_data == "random"
    assert report.quantized_nodes > 0 and report.float_bytes > 0 and report.int8_bytes > 0
    assert report.float_ms > 0 and report.int8_ms > 0
    assert 0 < report.max_abs_error and report.max_rel_error < 0.2  # int8 loses a little, not everything
    assert report.top1_agreement is not None
    d = report.to_dict()
    assert json.loads(json.dumps(d))["size_ratio"] == pytest.approx(report.float_bytes / report.int8_bytes, rel=1e-3)
    loaded = import_onnx(qmodel)  # what schedx quantize writes, TVM imports
    _within_int8_tolerance(qmodel, loaded, seeds=(5,))


def test_quantize_model_with_given_data():
    x = np.random.default_rng(9).standard_normal((6, 2, 16)).astype("float32")
    _, report = quantize_model(small_mlp(), calibrate=4, data={"x": x}, data_label="x.npz", eval_samples=2, runs=3,
                               budget_s=0.1)
    assert report.calibration_samples == 4 and report.eval_samples == 2 and report.calibration_data == "x.npz"


def test_samples_and_bad_data_are_explained():
    assert len(samples_from({"x": np.zeros((2, 16))}, {"x": (2, 16)})) == 1
    assert len(samples_from({"x": np.zeros((5, 2, 16))}, {"x": (2, 16)})) == 5
    with pytest.raises(QuantizeError, match=r"expected \[2, 16\]"):
        samples_from({"x": np.zeros((3, 3))}, {"x": (2, 16)})
    with pytest.raises(QuantizeError, match="no array for input"):
        samples_from({"y": np.zeros((2, 16))}, {"x": (2, 16)})


def test_an_already_quantized_model_is_refused(tmp_path):
    with pytest.raises(QuantizeError, match="already quantized"):
        quantize_model(ort_quantize(small_mlp(), tmp_path), calibrate=1)


def test_quantize_command_json(tmp_path):
    from app.cli import cli

    src, out = tmp_path / "mlp.onnx", tmp_path / "q.onnx"
    onnx.save(small_mlp(), src)
    result = CliRunner().invoke(cli, ["quantize", str(src), "--calibrate", "3", "--eval", "2", "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["output"] == str(out) and out.is_file() and report["calibration_samples"] == 3
    text = CliRunner().invoke(cli, ["quantize", str(src), "--calibrate", "2", "--eval", "1", "-o", str(out)])
    assert text.exit_code == 0 and "size" in text.stdout and "accuracy lost" in text.stdout


def test_an_int8_output_is_judged_in_quantization_steps_whatever_the_graph_names_it(tmp_path):
    """Issue 27: the output's step was looked up by the Relax module's name for it ("output"), not
    the ONNX graph's ("logits"), so an int8 MobileNetV2 (output "classifier") was judged at float
    tolerance and marked NOT VERIFIED one quantization step off."""
    from explorer.models.qdq import INT8_STEPS
    from explorer.workload import load_workload
    from export.verify import verification_rule

    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["logits"])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 8])],
                              [numpy_helper.from_array(np.array(0.25, "float32"), "scale"),
                               numpy_helper.from_array(np.array(0, "uint8"), "zero")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "qdq.onnx")
    workload = load_workload(str(tmp_path / "qdq.onnx"))
    rule = verification_rule(workload.onnx_model, output_count=len(workload.outputs))
    assert rule.output_atol == (INT8_STEPS * 0.25,) and rule.reference == "ONNX Runtime" and rule.rtol == 1e-4


@pytest.mark.parametrize("flags, reduced", [("avx2 fma avx_vnni", True), ("avx2 fma", True),
                                            ("avx2 avx512f avx512bw avx512_vnni", False)],
                         ids=["AVX-VNNI only", "no VNNI", "AVX-512 VNNI"])
def test_weights_are_7_bit_wherever_the_int8_kernels_add_products_in_pairs(monkeypatch, flags, reduced):
    """schedx's int8 micro-kernels use VNNI's AVX-512 form only: on a CPU with AVX-VNNI alone, full
    8-bit weights kept every convolution off the micro-kernel (none fits the pairwise int16 sum)."""
    import platform

    from explorer.target.environment import FLAGS_OVERRIDE

    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("reduce_range is an x86 matter")
    monkeypatch.setenv(FLAGS_OVERRIDE, flags)
    assert needs_reduced_range("uint8") is reduced
    assert needs_reduced_range("int8") is False
