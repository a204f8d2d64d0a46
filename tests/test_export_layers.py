"""Layer by layer: TVM and ONNX Runtime agree on every layer of a sound model, and the check
names the layer someone perturbed."""

from __future__ import annotations

import copy

import numpy as np
from onnx import numpy_helper

from export.layers import compare_layers
from explorer.models import build_onnx, sample_inputs


def _perturbed(model, node_name: str, delta: float = 1.0):
    bad = copy.deepcopy(model)
    node = next(n for n in bad.graph.node if n.name == node_name)
    weight = node.input[1]
    for i, init in enumerate(bad.graph.initializer):
        if init.name == weight:
            values = numpy_helper.to_array(init).copy()
            values.flat[0] += delta
            bad.graph.initializer[i].CopyFrom(numpy_helper.from_array(values, weight))
    return bad


def test_every_layer_agrees_on_a_sound_model():
    report = compare_layers(build_onnx("small_cnn"), sample_inputs("small_cnn"))
    assert report.ok and report.first_bad is None and not report.error
    assert [r.op_type for r in report.layers][:3] == ["Conv", "BatchNormalization", "Relu"]
    assert max(r.max_rel_error for r in report.layers) < 1e-5


def test_the_perturbed_layer_is_the_first_bad_one():
    model = build_onnx("small_cnn")
    conv2 = [n.name for n in model.graph.node if n.op_type == "Conv"][1]
    report = compare_layers(model, sample_inputs("small_cnn"), tvm_model=_perturbed(model, conv2))
    assert not report.ok
    assert report.first_bad.node == conv2 and report.first_bad.op_type == "Conv"
    before = report.layers[: [r.node for r in report.layers].index(conv2)]
    assert before and all(r.ok for r in before)  # everything upstream still agrees
    assert conv2 in report.summary()


def test_a_model_tvm_cannot_import_reports_an_error_instead_of_raising():
    model = build_onnx("small_cnn")
    report = compare_layers(model, {"input": np.zeros((2, 3, 5, 5), "float32")})
    assert report.error and not report.ok and "did not run" in report.summary()


def test_the_layer_where_the_error_first_grows_is_judged_by_its_own_scale():
    """A sigmoid map near 1e-4 off by 1e-7 passes the layer check (normalised by max(1, |ref|))
    but is where the error first passes 1e-4 of the layer's own values; a zero tensor that differs
    by denormal noise is not."""
    from export.layers import LayerReport, LayerResult

    layers = (LayerResult("conv", "Conv", "c", 1e-5, 1e-6, True, 10.0),
              LayerResult("relu", "Relu", "r", 1e-40, 1e-40, True, 0.0),
              LayerResult("sig", "Sigmoid", "y", 1.3e-7, 1.3e-7, True, 7.45e-4))
    report = LayerReport(tolerance=1e-4, layers=layers)
    assert report.ok and report.first_growth.node == "sig"
    assert "first passes 1e-04 of a layer's own largest value at sig (Sigmoid" in report.summary()
    quiet = LayerReport(tolerance=1e-4, layers=layers[:2])
    assert quiet.first_growth is None and "no layer's error passes" in quiet.growth()
