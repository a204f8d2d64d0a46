"""TransposedConvAsPixelShuffle: a transposed convolution with kernel == stride (upsampling heads)
becomes a 1x1 convolution and a pixel shuffle, with the same outputs as ONNX Runtime."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from explorer.workload import load_workload


def _head(path, kernel=2, stride=2):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, kernel, kernel)).astype("float32"), "w"),
             numpy_helper.from_array(rng.normal(0, 0.3, (3,)).astype("float32"), "b")]
    out = (16 - 1) * stride + kernel
    nodes = [helper.make_node("ConvTranspose", ["input", "w", "b"], ["t"], strides=[stride, stride],
                              kernel_shape=[kernel, kernel]),
             helper.make_node("Sigmoid", ["t"], ["out"])]
    graph = helper.make_graph(nodes, "up", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 8, 16, 16])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, out, out])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


def test_kernel_equal_to_stride_becomes_a_1x1_convolution(tmp_path):
    tasks = [t.name.split("/")[-1] for t in load_workload(_head(tmp_path / "up.onnx")).tasks()]
    assert not any("conv2d_transpose" in t for t in tasks), tasks
    assert any("conv2d" in t for t in tasks), tasks
    kept = [t.name for t in load_workload(_head(tmp_path / "up3.onnx", kernel=3, stride=2)).tasks()]
    assert any("conv2d_transpose" in t for t in kept), kept  # overlapping taps: left to TOPI


@pytest.mark.heavy
@pytest.mark.parametrize("kernel", [2, 4])
def test_the_rewritten_head_matches_onnx_runtime(tmp_path, kernel):
    from export import export_workload

    workload = load_workload(_head(tmp_path / "up.onnx", kernel=kernel, stride=kernel))
    report = export_workload(workload, "cpu", tmp_path / "b", layers=False)
    assert report.ok and report.verified, report.verdict
