"""ONNX Runtime's dynamically quantized LSTM (com.microsoft DynamicQuantizeLSTM, what
quantize_dynamic makes of every LSTM) imports as an LSTM of its dequantized weights, and its
bundle verifies against ONNX Runtime within the activations' quantization (it was refused as an
unsupported operator)."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from explorer.models.dynamic_lstm import dequantize_dynamic_lstm, has_dynamic_lstm
from explorer.workload import load_workload


def _lstm(path, hidden=24, features=16, seq=10, bidirectional=True):
    rng = np.random.default_rng(0)
    dirs = 2 if bidirectional else 1
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (dirs, 4 * hidden, features)).astype("float32"), "W"),
             numpy_helper.from_array(rng.normal(0, 0.3, (dirs, 4 * hidden, hidden)).astype("float32"), "R"),
             numpy_helper.from_array(rng.normal(0, 0.1, (dirs, 8 * hidden)).astype("float32"), "B")]
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y", "y_h", "y_c"], hidden_size=hidden,
                            direction="bidirectional" if bidirectional else "forward")
    graph = helper.make_graph([node], "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, 1, features])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [seq, dirs, 1, hidden])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folder = tmp_path_factory.mktemp("dq")
    src = _lstm(folder / "lstm.onnx")
    out = folder / "lstm_int8.onnx"
    quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8)
    model = onnx.load(str(out))
    assert has_dynamic_lstm(model)  # what ONNX Runtime made of the LSTM
    return out, model


def test_the_dequantized_lstm_computes_what_onnx_runtime_does_within_the_activations_quantization(quantized):
    path, model = quantized
    rewritten, notes = dequantize_dynamic_lstm(model)
    assert not has_dynamic_lstm(rewritten) and [n.op_type for n in rewritten.graph.node] == ["LSTM"]
    assert notes and "DynamicQuantizeLSTM" in notes[0]
    x = {"x": np.random.default_rng(1).normal(0, 1, (10, 1, 16)).astype("float32")}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    got = ort.InferenceSession(rewritten.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    assert np.abs(got - want).max() <= 3e-2 * np.abs(want).max()


def test_it_imports(quantized):
    workload = load_workload(str(quantized[0]))
    assert workload.tasks() and any("DynamicQuantizeLSTM" in n for n in workload.notes)


@pytest.mark.heavy
def test_its_bundle_verifies(quantized, tmp_path):
    from export import export_workload

    report = export_workload(load_workload(str(quantized[0])), "cpu", tmp_path / "b", layers=False)
    assert report.ok and report.verified, report.verdict
    assert report.manifest["tolerance"] == pytest.approx(3e-2)
