"""A convolution (depthwise, or a direct bf16 one) hands its only reader, a direct bf16 convolution,
its output already rounded to bf16 (:mod:`explorer.passes.bf16_conv_bits`): the graph and the fused
kernels on any host, and on an AMX CPU the same numbers as the consumer rounding it itself."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

from explorer.passes import bf16_conv
from explorer.passes.bf16_conv_bits import BITS_NAME
from explorer.passes.bf16_conv_nhwc import INPUT_NAME
from explorer.target import parse_target
from explorer.workload import load_workload
from tests.test_bf16_kernels import NEEDS_AMX


def _block(hidden: int = 192, project: int = 64, *, residual: bool = False) -> onnx.ModelProto:
    """MobileNetV2's inverted residual at 14x14: 1x1 32 -> ``hidden`` (fp32: K 32), depthwise 3x3 +
    bias + relu6, 1x1 ``hidden`` -> ``project`` (bf16: K >= 128); ``residual``: the depthwise
    output also added to the block's output (a second reader; ``project`` == ``hidden``)."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.normal(0, 0.2, (hidden, 32, 1, 1)).astype("float32"), "we"),
             numpy_helper.from_array(rng.normal(0, 0.3, (hidden, 1, 3, 3)).astype("float32"), "wd"),
             numpy_helper.from_array(rng.normal(0, 0.1, hidden).astype("float32"), "bd"),
             numpy_helper.from_array(rng.normal(0, 0.1, (project, hidden, 1, 1)).astype("float32"), "wp"),
             numpy_helper.from_array(np.float32(0), "lo"), numpy_helper.from_array(np.float32(6), "hi")]
    nodes = [helper.make_node("Conv", ["x", "we"], ["e"]), helper.make_node("Clip", ["e", "lo", "hi"], ["er"]),
             helper.make_node("Conv", ["er", "wd", "bd"], ["d"], group=hidden, pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["d", "lo", "hi"], ["dr"]), helper.make_node("Conv", ["dr", "wp"], ["p"])]
    out = "p"
    if residual:
        nodes.append(helper.make_node("Add", ["p", "dr"], ["y"]))
        out = "y"
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 14, 14])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, project, 14, 14])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _basic_block(channels: int = 64, size: int = 14) -> onnx.ModelProto:
    """ResNet's basic block: 3x3 conv + bias + relu, 3x3 conv + bias, the block's input added, relu
    (both convolutions direct bf16 kernels on AMX: K = 9 x ``channels``)."""
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array(rng.normal(0, 0.05, (channels, channels, 3, 3)).astype("float32"), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.1, channels).astype("float32"), "b1"),
             numpy_helper.from_array(rng.normal(0, 0.05, (channels, channels, 3, 3)).astype("float32"), "w2"),
             numpy_helper.from_array(rng.normal(0, 0.1, channels).astype("float32"), "b2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "x"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    shape = [1, channels, size, size]
    graph = helper.make_graph(nodes, "basic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _path(tmp_path, model: onnx.ModelProto) -> str:
    path = tmp_path / "block.onnx"
    onnx.save(model, path)
    return str(path)


def _kernels(path: str) -> dict[str, str]:
    from explorer.precision import for_precision

    workload, _ = for_precision(load_workload(path), parse_target("cpu:sapphirerapids"), "bf16")
    return {gv.name_hint: f.script() for gv, f in workload.fused_module().functions_items()
            if isinstance(f, tvm.tirx.PrimFunc)}


def test_the_depthwise_kernel_writes_bf16_bits_and_the_projection_reads_them_without_a_packing_pass(tmp_path):
    kernels = _kernels(_path(tmp_path, _block()))
    depthwise = [n for n in kernels if BITS_NAME in n]
    project = [n for n in kernels if "conv2d_nhwc_bf16" in n]
    assert len(depthwise) == 1 and "group_conv2d" in kernels[depthwise[0]], sorted(kernels)
    assert '"uint16"' in kernels[depthwise[0]].split("\n")[4]  # its output: the bits (2 bytes a value)
    assert len(project) == 1 and INPUT_NAME not in kernels[project[0]]  # 192 channels, whole tile rows: read as is


def test_a_projection_whose_channels_need_padding_keeps_a_packing_pass_that_only_pads(tmp_path):
    kernels = _kernels(_path(tmp_path, _block(hidden=144, project=32)))  # 144 channels padded to 160
    assert any(BITS_NAME in n for n in kernels), sorted(kernels)
    project = next(s for n, s in kernels.items() if "conv2d_nhwc_bf16" in n)
    packing = project.split(f'T.sblock("{INPUT_NAME}")')[1].split("T.sblock(")[0]
    assert "T.if_then_else" in packing and "reinterpret" not in packing  # zeros past 144 channels, no rounding


def test_a_depthwise_output_with_a_second_reader_stays_fp32(tmp_path):
    kernels = _kernels(_path(tmp_path, _block(project=192, residual=True)))
    assert not any(BITS_NAME in n for n in kernels), sorted(kernels)
    project = next(s for n, s in kernels.items() if "conv2d_nhwc_bf16" in n)
    assert INPUT_NAME in project  # the projection rounds its fp32 input itself


def test_a_direct_kernel_read_only_by_the_next_one_writes_bits_after_its_bias_and_relu(tmp_path):
    kernels = _kernels(_path(tmp_path, _basic_block()))
    convs = {n: s for n, s in kernels.items() if "conv2d_nhwc_bf16" in n}
    first = [n for n in convs if BITS_NAME in n]
    assert len(convs) == 2 and len(first) == 1 and "relu" in first[0], sorted(kernels)  # fused: no kernel of its own
    assert not any(n.startswith(BITS_NAME) for n in kernels), sorted(kernels)
    assert '"uint16"' in convs[first[0]].split("\n")[4]  # conv1 + bias + relu writes the bits
    second = next(s for n, s in convs.items() if n != first[0])
    packing = second.split(f'T.sblock("{INPUT_NAME}")')[1].split("T.sblock(")[0]
    assert "T.if_then_else" in packing and "reinterpret" not in packing  # conv2 pads the bits, no rounding
    own = convs[first[0]].split(f'T.sblock("{INPUT_NAME}")')[1].split("T.sblock(")[0]
    assert "reinterpret" in own  # the block's input (read by the residual add too) rounded by conv1 itself


@NEEDS_AMX
@pytest.mark.parametrize("model", [_block, _basic_block], ids=["depthwise", "direct"])
def test_rounding_in_the_producer_gives_the_numbers_of_rounding_in_the_consumer(tmp_path, monkeypatch, model):
    from export.flow import export_workload
    from export.runner.running import run_bundle

    path = _path(tmp_path, model())
    outputs = {}
    for rounds in (True, False):
        monkeypatch.setattr(bf16_conv, "PRODUCER_ROUNDS", rounds)
        report = export_workload(path, "cpu", tmp_path / f"b{rounds}", precision="bf16", layers=False)
        assert report.verified, report.verdict
        outputs[rounds] = run_bundle(tmp_path / f"b{rounds}")[1][0]
    assert np.array_equal(outputs[True], outputs[False])


@pytest.mark.parametrize("flat", [False, True], ids=["rows", "flat"])
def test_a_padded_kernel_reading_bits_pads_them_without_rounding(flat):
    from tvm import te

    from explorer.passes.bf16_conv_nhwc import conv2d_nhwc_bf16, conv2d_nhwc_bf16_flat, pack_nhwc_weights

    x = te.placeholder((1, 7, 7, 32), "uint16", "x")
    w = te.placeholder(pack_nhwc_weights(np.zeros((32, 32, 3, 3), np.float32), 32).shape, "uint16", "w")
    y = (conv2d_nhwc_bf16_flat(x, w, padding=(1, 1), out_hw=(7, 7)) if flat
         else conv2d_nhwc_bf16(x, w, padding=(1, 1), out_hw=(7, 7)))
    text = te.create_prim_func([x, w, y]).script()
    packing = text.split(f'T.sblock("{INPUT_NAME}")')[1].split("T.sblock(")[0]
    assert "T.if_then_else" in packing and "reinterpret" not in packing  # the border's zeros, the bits as they are
