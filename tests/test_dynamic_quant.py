"""ONNX Runtime's dynamic quantization (``quantize_dynamic``: DynamicQuantizeLinear, ConvInteger,
MatMulInteger, DynamicQuantizeLSTM) of a small CRNN imports, computes what ONNX Runtime does and
exports a bundle that verifies (ddddocr's class; it was refused at import, naming the four)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from explorer.models import import_onnx
from explorer.models.dynamic_quant import (
    has_dynamic_quantization,
    is_dynamically_quantized,
    layer_reference,
    rewrite_dynamic_quantization,
)
from tests.exporter_models import crnn, quantized_dynamically
from tests.onnx_cases import ort_run, tvm_run

pytest.importorskip("torch")
TOLERANCE = 3e-2  # export.flow.DYNAMIC_QUANT_TOLERANCE: relative to the output's largest value


@pytest.fixture(scope="module")
def float_crnn() -> onnx.ModelProto:
    return crnn()


@pytest.fixture(scope="module")
def dynamic_crnn(float_crnn, tmp_path_factory) -> onnx.ModelProto:
    model = quantized_dynamically(float_crnn, tmp_path_factory.mktemp("dq"))
    ops = {(n.domain, n.op_type) for n in model.graph.node}
    assert {("", "DynamicQuantizeLinear"), ("", "ConvInteger"), ("", "MatMulInteger"),
            ("com.microsoft", "DynamicQuantizeLSTM")} <= ops  # what ONNX Runtime's quantizer wrote
    return model


def _image(seed: int) -> dict[str, np.ndarray]:
    return {"image": np.random.default_rng(seed).standard_normal((1, 1, 16, 32)).astype("float32")}


@pytest.mark.parametrize("per_channel", [False, True])
def test_the_rewrite_computes_exactly_what_onnx_runtime_does(float_crnn, tmp_path, per_channel):
    """Without the LSTM (its own rewrite is a float LSTM), ONNX Runtime gives the same numbers
    for the model and its rewrite: the formula of DynamicQuantizeLinear, the zero points (per
    channel too) and the int32 bias the quantizer adds are ONNX Runtime's."""
    model = quantized_dynamically(float_crnn, tmp_path, per_channel=per_channel, ops=("Conv", "MatMul", "Gemm"))
    rewritten, notes = rewrite_dynamic_quantization(model)
    assert has_dynamic_quantization(model) and not has_dynamic_quantization(rewritten)
    assert notes and "ConvInteger" in notes[0]
    kinds = {(n.op_type, next((a.i for a in n.attribute if a.name == "to"), None)) for n in rewritten.graph.node}
    assert ("Cast", TensorProto.INT32) not in kinds  # the float twins are read, no sum goes through int32
    for seed in range(3):
        np.testing.assert_array_equal(ort_run(rewritten, _image(seed))[0], ort_run(model, _image(seed))[0])


def test_dynamic_quantize_linear_of_zeros_and_of_a_one_sided_range():
    """ONNX Runtime's corner cases: an all-zero input gets scale 1 (not a division by zero), an
    input that is all positive or all negative still has 0 in its range."""
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    graph = helper.make_graph([node], "dql", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [6]),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
                               helper.make_tensor_value_info("z", TensorProto.UINT8, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    rewritten, _ = rewrite_dynamic_quantization(model)
    loaded = import_onnx(model)
    for x in ([0, 0, 0, 0, 0, 0], [0.5, 1.5, 2.5, 3.0, 7.0, 1.0], [-3, -2.5, -0.5, -1.0, -7.1, -2.0],
              [-1.0, 0.25, 3.3, -2.6, 0.0, 9.99]):
        feeds = {"x": np.array(x, "float32")}
        want = ort_run(model, feeds)
        for got in (ort_run(rewritten, feeds), tvm_run(loaded, feeds)):
            for g, w in zip(got, want):
                np.testing.assert_array_equal(np.asarray(g).reshape(w.shape), w)


def test_a_dynamically_quantized_crnn_imports_and_agrees_with_onnx_runtime(dynamic_crnn):
    assert is_dynamically_quantized(dynamic_crnn)
    loaded = import_onnx(dynamic_crnn)
    assert any("ConvInteger" in n for n in loaded.info.notes) and any("DynamicQuantizeLSTM" in n
                                                                      for n in loaded.info.notes)
    for seed in range(2):
        want = ort_run(dynamic_crnn, _image(seed))[0]
        got = tvm_run(loaded, _image(seed))[0]
        assert np.abs(got - want).max() <= TOLERANCE * np.abs(want).max()
        # against the same model with its LSTM in float (what schedx computes), far closer
        floats = ort_run(layer_reference(dynamic_crnn), _image(seed))[0]
        assert np.abs(got - floats).max() <= 1e-3 * np.abs(floats).max()


def test_an_integer_operator_with_weights_computed_at_run_time_is_rewritten_too():
    """MatMulInteger of two activations (no constant to fold): casts and subtractions of the zero
    points at run time, a zero point per column of B."""
    nodes = [helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"], name="mmi")]
    graph = helper.make_graph(nodes, "mmi", [helper.make_tensor_value_info("a", TensorProto.UINT8, [3, 5]),
                                             helper.make_tensor_value_info("b", TensorProto.UINT8, [5, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [3, 4])],
                              [numpy_helper.from_array(np.array(7, "uint8"), "az"),
                               numpy_helper.from_array(np.array([1, 128, 200, 0], "uint8"), "bz")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    rng = np.random.default_rng(0)
    feeds = {"a": rng.integers(0, 256, (3, 5)).astype("uint8"), "b": rng.integers(0, 256, (5, 4)).astype("uint8")}
    want = ort_run(model, feeds)[0]
    np.testing.assert_array_equal(ort_run(rewrite_dynamic_quantization(model)[0], feeds)[0], want)
    np.testing.assert_array_equal(tvm_run(import_onnx(model), feeds)[0], want)


@pytest.mark.heavy
def test_its_bundle_verifies(dynamic_crnn, tmp_path):
    from export import export_workload
    from explorer.workload import load_workload

    path = tmp_path / "crnn_dynamic.onnx"
    onnx.save(dynamic_crnn, str(path))
    report = export_workload(load_workload(str(path)), "cpu", tmp_path / "b")
    assert report.ok and report.verified, report.verdict
    assert report.manifest["tolerance"] == pytest.approx(TOLERANCE)
    assert report.layers is not None and report.layers.ok


def test_onnx_runtimes_fused_forms_are_rewritten_too(dynamic_crnn, tmp_path):
    """A model saved after ONNX Runtime's graph optimizations (``optimized_model_filepath``) holds
    com.microsoft DynamicQuantizeMatMul where the quantizer wrote DynamicQuantizeLinear ->
    MatMulInteger -> Cast -> Mul."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    opts.log_severity_level = 3
    ort.InferenceSession(dynamic_crnn.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    model = onnx.load(str(tmp_path / "optimized.onnx"))
    assert "DynamicQuantizeMatMul" in {n.op_type for n in model.graph.node if n.domain == "com.microsoft"}
    assert is_dynamically_quantized(model)
    loaded = import_onnx(model)
    want = ort_run(layer_reference(model), _image(0))[0]
    np.testing.assert_allclose(tvm_run(loaded, _image(0))[0], want, rtol=0, atol=1e-3 * np.abs(want).max())


def test_matmul_integer_to_float_is_the_integer_product_scaled():
    nodes = [helper.make_node("MatMulIntegerToFloat", ["a", "b", "sa", "sb", "za", "zb", "bias"], ["y"],
                              domain="com.microsoft", name="mmitf")]
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.integers(0, 256, (5, 4)).astype("uint8"), "b"),
             numpy_helper.from_array(np.array(0.02, "float32"), "sa"),
             numpy_helper.from_array(np.array([0.1, 0.2, 0.3, 0.4], "float32"), "sb"),
             numpy_helper.from_array(np.array(3, "uint8"), "za"),
             numpy_helper.from_array(np.array([128, 0, 7, 255], "uint8"), "zb"),
             numpy_helper.from_array(rng.standard_normal(4).astype("float32"), "bias")]
    graph = helper.make_graph(nodes, "mmitf", [helper.make_tensor_value_info("a", TensorProto.UINT8, [3, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=8)
    feeds = {"a": rng.integers(0, 256, (3, 5)).astype("uint8")}
    want = ort_run(model, feeds)[0]
    np.testing.assert_allclose(ort_run(rewrite_dynamic_quantization(model)[0], feeds)[0], want, rtol=1e-6)
    np.testing.assert_allclose(tvm_run(import_onnx(model), feeds)[0], want, rtol=1e-6)


def test_an_onnx_runtime_fusion_schedx_lacks_is_refused_with_its_nodes_and_what_to_do():
    from explorer.errors import UnsupportedOperatorError

    node = helper.make_node("QAttention", ["x"], ["y"], domain="com.microsoft", name="attention_0")
    graph = helper.make_graph([node], "qa", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=8)
    with pytest.raises(UnsupportedOperatorError, match="'attention_0'.*without ONNX Runtime's graph optimizations"):
        import_onnx(model)
