"""DropDeadConvTaps: the taps of a dilated convolution that only ever read padding are dropped,
and the model still computes the same outputs."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from explorer.passes.conv_taps import live_taps
from explorer.workload import load_workload


def test_live_taps_along_one_axis():
    # DeepLabV3's ASPP on a 16x16 map: dilation 24 reaches only the centre tap, dilation 12 all three
    assert live_taps(16, 3, 1, 24, 24, 24) == (1, 1)
    assert live_taps(16, 3, 1, 12, 12, 12) is None
    assert live_taps(16, 3, 1, 1, 1, 1) is None  # an ordinary 3x3 conv
    assert live_taps(4, 5, 1, 3, 6, 6) == (1, 3)  # the outer taps fall outside a 4-pixel map


def _aspp(path, dilation):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, 0.3, (8, 6, 3, 3)).astype("float32"), "w")
    nodes = [helper.make_node("Conv", ["input", "w"], ["c"], dilations=[dilation, dilation],
                              pads=[dilation] * 4),
             helper.make_node("Relu", ["c"], ["out"])]
    graph = helper.make_graph(nodes, "aspp", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 6, 8, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8, 8, 8])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


def test_a_dilated_conv_on_a_small_map_becomes_a_1x1_conv(tmp_path):
    workload = load_workload(_aspp(tmp_path / "aspp.onnx", 12))
    conv = next(t for t in workload.tasks() if "conv2d" in t.name)
    assert conv.flops == 2 * 8 * 8 * 8 * 6 + 8 * 8 * 8  # one tap (and the relu), not nine
    kept = load_workload(_aspp(tmp_path / "aspp2.onnx", 2))  # dilation 2 on 8x8: every tap reads the input
    assert next(t for t in kept.tasks() if "conv2d" in t.name).flops == 2 * 8 * 8 * 8 * 6 * 9 + 8 * 8 * 8


@pytest.mark.heavy
def test_the_rewritten_conv_still_matches_onnx_runtime(tmp_path):
    from export import export_workload

    report = export_workload(load_workload(_aspp(tmp_path / "aspp.onnx", 12)), "cpu", tmp_path / "b", layers=False)
    assert report.ok and report.verified, report.verdict
