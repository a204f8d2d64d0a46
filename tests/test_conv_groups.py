"""convs_by_group: a grouped convolution whose groups are each a convolution the direct AMX bf16
kernel takes (ResNeSt's split attention: 2 groups of 32-256 channels) is computed as one
convolution per group, side by side; the values stay those of the grouped convolution, and a bf16
build for an AMX CPU runs the groups on the direct kernel (no Winograd, no fp32 grouped kernel)
with no transpose left between them. ResNeXt's 32 narrow groups stay as they are."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

from explorer.models import import_onnx
from explorer.passes.conv_groups import MAX_GROUPS, convs_by_group
from explorer.precision import bf16_module
from explorer.target import parse_target
from explorer.workload.fusion import fused_module
from tests.cpu_marks import NEEDS_AMX


def _split_attention_conv(channels: int, groups: int, size: int = 14, *, stride: int = 1,
                          shared: bool = False) -> onnx.ModelProto:
    """A 1x1 convolution to ``channels``, then a grouped 3x3 one (``groups`` groups, twice the
    channels out, ``stride``), its batch norm and a ReLU: the start of a ResNeSt block; ``shared``:
    the grouped convolution's input also read by a ReLU, a second output."""
    rng = np.random.default_rng(0)
    out = (size - 1) // stride + 1
    per = channels // groups
    inits = [numpy_helper.from_array(rng.normal(0, 0.1, (channels, 32, 1, 1)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.05, (2 * channels, per, 3, 3)).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 2 * channels).astype(np.float32), "scale"),
             numpy_helper.from_array(rng.normal(0, 0.1, 2 * channels).astype(np.float32), "shift"),
             numpy_helper.from_array(np.zeros(2 * channels, np.float32), "mean"),
             numpy_helper.from_array(np.ones(2 * channels, np.float32), "var")]
    nodes = [helper.make_node("Conv", ["input", "w1"], ["c1"], kernel_shape=[1, 1]),
             helper.make_node("Conv", ["c1", "w2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                              strides=[stride, stride], group=groups),
             helper.make_node("BatchNormalization", ["c2", "scale", "shift", "mean", "var"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["out"])]
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 2 * channels, out, out])]
    if shared:
        nodes.append(helper.make_node("Relu", ["c1"], ["c1_relu"]))
        outputs.append(helper.make_tensor_value_info("c1_relu", TensorProto.FLOAT, [1, channels, size, size]))
    graph = helper.make_graph(
        nodes, "split_attention", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 32, size, size])],
        outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _run(mod: tvm.IRModule, x: np.ndarray) -> list[np.ndarray]:
    ex = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x))
    return [got.numpy()] if isinstance(got, tvm.runtime.Tensor) else [t.numpy() for t in got]


@pytest.mark.parametrize("channels, groups, size, stride, shared", [
    (64, 2, 14, 1, False),
    (64, 2, 28, 2, False),  # stride 2: 28 x 28 in, 14 x 14 out
    (128, 4, 14, 1, False),
    (64, 2, 14, 1, True),  # the input also read by a ReLU, a second output
])
def test_a_grouped_convolution_as_one_convolution_per_group_computes_the_same_values(channels, groups, size,
                                                                                      stride, shared):
    mod = import_onnx(_split_attention_conv(channels, groups, size, stride=stride, shared=shared)).mod
    split, count = convs_by_group(mod)
    assert count == 1
    text = split["main"].script()
    assert f"groups={groups}" not in text and text.count("R.nn.conv2d(") == groups + 1 and "R.concat" in text
    x = np.random.default_rng(1).normal(size=(1, 32, size, size)).astype(np.float32)
    got, expected = _run(split, x), _run(mod, x)
    assert len(got) == len(expected) == (2 if shared else 1)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("channels, groups", [(128, 32), (8, 2)])
def test_narrow_groups_are_left_as_they_are(channels, groups):
    """ResNeXt's 32 groups of 4 channels; 2 groups of 4 channels (a reduction of 36, too short for bf16)."""
    mod = import_onnx(_split_attention_conv(channels, groups)).mod
    assert convs_by_group(mod) == (mod, 0)


def test_groups_that_would_each_convert_are_split_only_up_to_max_groups():
    """Groups of 32 -> 64 channels, each a bf16 convolution: MAX_GROUPS of them split, twice as many
    (one kernel call each) left as they are."""
    most = import_onnx(_split_attention_conv(32 * MAX_GROUPS, MAX_GROUPS)).mod
    assert convs_by_group(most)[1] == 1
    many = import_onnx(_split_attention_conv(32 * 2 * MAX_GROUPS, 2 * MAX_GROUPS)).mod
    assert convs_by_group(many) == (many, 0)


def test_a_bf16_build_for_an_amx_cpu_runs_each_group_on_the_direct_kernel():
    mod = import_onnx(_split_attention_conv(64, 2)).mod
    built, converted, _ = bf16_module(mod, parse_target("cpu:sapphirerapids"))
    assert converted == 2  # the two groups (the 1x1 convolution's 32 channels are too short for bf16)
    kernels = [gv.name_hint for gv, f in fused_module(built).functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    convs = [k for k in kernels if "conv2d" in k]
    assert sum("conv2d_nhwc_bf16" in k for k in convs) == 2, kernels
    assert not any("winograd" in k or "matmul" in k for k in kernels), kernels
    # the groups' slices and outputs stay NHWC: only the input's and the output's transposes are left
    assert sum("transpose" in k for k in kernels) <= 2, kernels
    plain, _, _ = bf16_module(mod, parse_target("cpu:cooperlake"))  # no AMX tiles: the grouped conv as it was
    assert "groups=2" in plain["main"].script()


@NEEDS_AMX
def test_export_of_a_split_attention_conv_at_bf16_verifies_on_this_amx_cpu(tmp_path):
    from app.cli import cli

    path = tmp_path / "split_attention.onnx"
    onnx.save(_split_attention_conv(64, 2), path)
    result = CliRunner().invoke(cli, ["export", str(path), "-o", str(tmp_path / "bundle"), "--no-db",
                                      "--precision", "bf16"], obj={})
    assert result.exit_code == 0, result.output
    assert "verified" in result.output.lower(), result.output
