"""TransposedConvAsPixelShuffle: a transposed convolution (any stride, kernel, padding, output
padding, groups; 1-D, 2-D and 3-D) becomes a stride-1 convolution over all its phases, a pixel shuffle
and a crop, with the same outputs as ONNX Runtime's ConvTranspose."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from explorer.models import import_onnx
from explorer.passes.upsampling_conv import TransposedConvAsPixelShuffle
from explorer.workload import load_workload
from tests.onnx_cases import ort_run, random_feeds, tvm_run


def _upsampler(*, size=(16, 16), channels=(8, 3), kernel=2, stride=2, pads=0, output_padding=0, group=1,
               dilation=1) -> onnx.ModelProto:
    """ConvTranspose (+ bias) then Sigmoid, NCHW / NCW as exported."""
    dims = len(size)
    cin, cout = channels
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (cin, cout // group) + (kernel,) * dims).astype("float32"), "w"),
             numpy_helper.from_array(rng.normal(0, 0.3, (cout,)).astype("float32"), "b")]
    attrs = dict(strides=[stride] * dims, kernel_shape=[kernel] * dims, group=group, dilations=[dilation] * dims,
                 pads=[pads] * 2 * dims if isinstance(pads, int) else list(pads))
    if output_padding:
        attrs["output_padding"] = [output_padding] * dims
    nodes = [helper.make_node("ConvTranspose", ["input", "w", "b"], ["t"], **attrs),
             helper.make_node("Sigmoid", ["t"], ["out"])]
    graph = helper.make_graph(nodes, "up", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                          [1, cin, *size])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


CASES = {
    "kernel_equals_stride": {},
    "dcgan_4x4_s2_p1": dict(kernel=4, pads=1),
    "decoder_3x3_s2_p1_op1": dict(kernel=3, pads=1, output_padding=1),
    "odd_5x5_s3_asymmetric": dict(kernel=5, stride=3, pads=(2, 0, 1, 1), size=(7, 9)),
    "stride_1": dict(kernel=3, stride=1, pads=1),
    "grouped": dict(kernel=4, pads=1, group=2, channels=(8, 6)),
    "depthwise": dict(kernel=4, pads=1, group=8, channels=(8, 8)),
    "kernel_below_stride": dict(kernel=2, stride=3, size=(5, 6)),
    "1d_vocoder_16_s8_p4": dict(kernel=16, stride=8, pads=4, size=(12,)),
    "1d_3_s2_op1": dict(kernel=3, pads=1, output_padding=1, size=(10,)),
    "3d_volumetric_unet_2_s2": dict(size=(4, 5, 6)),
    "3d_3_s2_p1_op1": dict(kernel=3, pads=1, output_padding=1, size=(3, 4, 5), channels=(4, 2)),
}


@pytest.mark.parametrize("case", CASES)
def test_the_rewrite_computes_onnx_runtimes_transposed_convolution(case):
    model = _upsampler(**CASES[case])
    loaded = import_onnx(model)
    rewritten = TransposedConvAsPixelShuffle(loaded.mod)
    script = rewritten.script()
    assert "_transpose(" not in script and any(f"R.nn.conv{d}d(" in script for d in (1, 2, 3)), script
    feeds = random_feeds(model)
    (want,) = ort_run(model, feeds)
    (got,) = tvm_run(dataclasses.replace(loaded, mod=rewritten), feeds)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_dilated_transposed_convolutions_are_left_to_topi():
    loaded = import_onnx(_upsampler(kernel=3, pads=1, dilation=2))
    assert TransposedConvAsPixelShuffle(loaded.mod).same_as(loaded.mod)


def test_the_schedx_pipeline_has_no_transposed_convolution_task(tmp_path):
    path = tmp_path / "up.onnx"
    onnx.save(_upsampler(kernel=4, pads=1, size=(28, 28), channels=(64, 32)), path)
    names = [t.name.split("/")[-1] for t in load_workload(str(path)).tasks()]
    assert not any("conv2d_transpose" in n for n in names), names
    assert any("conv2d" in n for n in names), names


@pytest.mark.heavy
@pytest.mark.parametrize("case", ["kernel_equals_stride", "dcgan_4x4_s2_p1", "decoder_3x3_s2_p1_op1",
                                  "1d_vocoder_16_s8_p4"])
def test_the_rewritten_upsampler_exports_and_verifies(tmp_path, case):
    from export import export_workload

    path = tmp_path / "up.onnx"
    onnx.save(_upsampler(**CASES[case]), path)
    report = export_workload(load_workload(str(path)), "cpu", tmp_path / "b", layers=False)
    assert report.ok and report.verified, report.verdict
