"""convs_on_tiled_rows: a convolution on a map whose rows the direct AMX bf16 kernel cannot tile
(TensorFlow's ResNet50V2 at 160 x 160: 20-, 10- and 5-pixel rows) is computed over rows it can (a
1x1 one over the map laid out as one padded row, a strided one with wider padded output rows); the
values stay those of the convolution, and a bf16 build for an AMX CPU takes the direct kernel with
no transposes left between the convolutions. The bias, activation, batch norm and residual add after
such a convolution are computed on its rows (explorer.passes.row_epilogue): in its kernel, with the
same numbers."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
import tvm
import tvm_ffi
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

from explorer.models import import_onnx, load_zoo
from explorer.passes.bf16_conv import bf16_convs
from explorer.passes.bf16_dense import bf16_products
from explorer.passes.conv_rows import MAX_STRIDED_PADDING, convs_on_tiled_rows, padded_width
from explorer.precision import bf16_module
from explorer.target import parse_target
from explorer.workload.fusion import fused_module
from tests.cpu_marks import NEEDS_AMX
from tvm.ir.instrument import pass_instrument


def _tf_pointwise_block(size: int, stride: int = 1) -> onnx.ModelProto:
    """What tf2onnx writes for Keras 1x1 convolutions: an NHWC input transposed to NCHW, a 1x1
    convolution with its batch-norm folded in (a bias) and a ReLU, a second 1x1 one, a residual add;
    ``stride`` 2: then a strided 3x3 convolution (ResNet50V2's last of a stage)."""
    rng = np.random.default_rng(0)
    out = size if stride == 1 else (size + 1) // 2
    w1 = rng.normal(0, 0.05, (256, 128, 1, 1)).astype(np.float32)
    w2 = rng.normal(0, 0.05, (128, 256, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["input"], ["x"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[1, 1], strides=[1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], kernel_shape=[1, 1], strides=[1, 1]),
             helper.make_node("Add", ["c2", "x"], ["sum"])]
    w3 = rng.normal(0, 0.05, (128, 128, 3, 3)).astype(np.float32)
    last = (helper.make_node("Conv", ["sum", "w3"], ["out"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
            if stride == 2 else helper.make_node("Identity", ["sum"], ["out"]))
    nodes.append(last)
    graph = helper.make_graph(
        nodes, "pointwise", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, size, size, 128])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 128, out, out])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(rng.normal(0, 0.1, 256).astype(np.float32), "b1"),
         numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(w3, "w3")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _preactivation_blocks(size: int, activation: str = "Relu") -> onnx.ModelProto:
    """Two of ResNet50V2's pre-activation bottleneck blocks on ``size``-wide maps, as tf2onnx writes
    them (the batch norms of the convolutions folded into biases): a shortcut 1x1 convolution and a
    main branch (1x1, bias, activation, 1x1, bias) summed; the sum's batch norm (a multiply-add by
    constants) and activation, a second main branch, summed with the first sum. ``activation``:
    ``Relu``, or ``Clip`` to 0..6 (a ReLU6, which the importer writes as TensorIR max and min)."""
    rng = np.random.default_rng(0)
    inits = {}

    def const(name: str, shape, scale: float = 0.05) -> str:
        inits[name] = numpy_helper.from_array(rng.normal(0, scale, shape).astype(np.float32), name)
        return name

    for name, value in (("lo", 0.0), ("hi", 6.0)):
        inits[name] = numpy_helper.from_array(np.array(value, np.float32), name)

    def act(x: str, out: str) -> list:
        return [helper.make_node(activation, [x] + (["lo", "hi"] if activation == "Clip" else []), [out])]

    def conv(x: str, out: str, cin: int, cout: int, bias: bool = True) -> list:
        names = [x, const(out + "_w", (cout, cin, 1, 1))] + ([const(out + "_b", cout, 0.1)] if bias else [])
        return [helper.make_node("Conv", names, [out], kernel_shape=[1, 1])]

    nodes = [helper.make_node("Transpose", ["input"], ["x"], perm=[0, 3, 1, 2]),
             *conv("x", "short", 128, 256, bias=False), *conv("x", "a1", 128, 128), *act("a1", "r1"),
             *conv("r1", "m1", 128, 256), helper.make_node("Add", ["short", "m1"], ["sum1"]),
             helper.make_node("Mul", ["sum1", const("scale", (1, 256, 1, 1), 0.5)], ["n1"]),
             helper.make_node("Add", ["n1", const("shift", (1, 256, 1, 1), 0.1)], ["n2"]), *act("n2", "pre"),
             *conv("pre", "a2", 256, 128), *act("a2", "r2"), *conv("r2", "m2", 128, 256),
             helper.make_node("Add", ["m2", "sum1"], ["out"])]
    graph = helper.make_graph(
        nodes, "preactivation", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, size, size, 128])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 256, size, size])], list(inits.values()))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _run(mod: tvm.IRModule, x: np.ndarray) -> np.ndarray:
    ex = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
    return relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


def test_a_map_is_padded_to_the_narrowest_row_whose_tiles_take_at_least_14_pixels():
    assert padded_width(100) == 112  # 10 x 10: two tiles of 14 a call (104 would take 8-pixel tiles)
    assert padded_width(25) == 28 and padded_width(400) == 400  # 5 x 5; 20 x 20 is 25 tiles of 16
    assert padded_width(7) == 7  # a 7-pixel tile, nothing better within a seventh more
    assert padded_width(5) is None  # no tile fits 5 pixels, and none within a seventh more
    # a strided convolution's output rows: 20 -> 28 (two tiles of 14), 10 -> 14, 5 -> 7
    assert [padded_width(w, MAX_STRIDED_PADDING) for w in (20, 10, 5)] == [28, 14, 7]


@pytest.mark.parametrize("size, stride", [(10, 1), (5, 1), (20, 2)])
def test_convolutions_over_padded_rows_compute_the_same_values(size, stride):
    mod = import_onnx(_tf_pointwise_block(size, stride)).mod
    rows, count = convs_on_tiled_rows(mod)
    assert count == 2 + (stride == 2)  # no tile divides 20 pixels: the 1x1 ones as a row of 400, the 3x3 onto 14
    assert "R.reshape" in rows["main"].script() and "R.strided_slice" in rows["main"].script()
    x = np.random.default_rng(1).normal(size=(1, size, size, 128)).astype(np.float32)
    np.testing.assert_allclose(_run(rows, x), _run(mod, x), rtol=1e-5, atol=1e-5)


def test_a_map_the_direct_kernel_tiles_already_is_left_as_it_is():
    mod = import_onnx(_tf_pointwise_block(14)).mod  # 14-pixel rows: one tile of 14
    assert convs_on_tiled_rows(mod) == (mod, 0)


@pytest.mark.parametrize("size, stride", [(10, 1), (20, 2)])
def test_a_bf16_build_for_an_amx_cpu_takes_the_direct_kernel_with_no_transpose_left(size, stride):
    mod = import_onnx(_tf_pointwise_block(size, stride)).mod
    built, converted, kept = bf16_module(mod, parse_target("cpu:sapphirerapids"))
    assert converted == 2 + (stride == 2) and kept == ()
    fused = fused_module(built)
    kernels = [gv.name_hint for gv, f in fused.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    convs = [k for k in kernels if "conv2d" in k]
    assert len(convs) == converted and all("conv2d_nhwc_bf16" in k for k in convs), kernels  # direct, no im2col
    # NHWC from the input on: the one transpose left is the output's to NCHW (alone, or fused with what precedes it)
    assert sum("transpose" in k for k in kernels) == 1, kernels
    plain, _, _ = bf16_module(mod, parse_target("cpu:cooperlake"))  # AVX512-BF16 without tiles: im2col, as before
    assert "R.strided_slice" not in plain["main"].script()


@pass_instrument
class _FoldCount:
    """How many times batch norms are folded into convolutions under it."""

    def __init__(self) -> None:
        self.folds = 0

    def run_before_pass(self, mod: tvm.IRModule, info: tvm.transform.PassInfo) -> None:
        self.folds += info.name == "FoldBatchnormToConv2D"


def _counting_folds(build):
    count = _FoldCount()
    with tvm.transform.PassContext(instruments=[count]):
        return build(), count.folds


def _batch_norm_block(size: int = 10) -> onnx.ModelProto:
    """A 1x1 conv -> batch norm -> ReLU -> strided 3x3 conv -> batch norm on ``size``-wide maps (rows
    the direct kernel cannot tile: both convolutions go on tiled rows, after their batch norms fold)."""
    rng = np.random.default_rng(0)

    def norm(c: int, name: str) -> list:
        return [numpy_helper.from_array(v.astype("float32"), name + part) for part, v in
                (("s", rng.uniform(0.5, 1.5, c)), ("b", rng.normal(0, .1, c)), ("m", rng.normal(0, .1, c)),
                 ("v", rng.uniform(0.5, 1.5, c)))]

    inits = [numpy_helper.from_array(rng.normal(0, .05, (256, 128, 1, 1)).astype("float32"), "w1"),
             numpy_helper.from_array(rng.normal(0, .05, (128, 256, 3, 3)).astype("float32"), "w2"),
             *norm(256, "n1"), *norm(128, "n2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], kernel_shape=[1, 1]),
             helper.make_node("BatchNormalization", ["c1", "n1s", "n1b", "n1m", "n1v"], ["b1"]),
             helper.make_node("Relu", ["b1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c2", "n2s", "n2b", "n2m", "n2v"], ["out"])]
    half = (size + 1) // 2
    graph = helper.make_graph(nodes, "bn_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128, size, size])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 128, half, half])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


# convolutions put on tiled rows (no batch norms); batch norms (rows tiled as they are); both
@pytest.mark.parametrize("model", ["tf_block", "small_cnn", "batch_norm_block"])
def test_a_bf16_build_for_an_amx_cpu_folds_batch_norms_once_and_builds_what_both_rewrites_alone_build(model):
    onnx_model = {"tf_block": _tf_pointwise_block, "batch_norm_block": _batch_norm_block}.get(model)
    mod = import_onnx(onnx_model(10)).mod if onnx_model else load_zoo("small_cnn").mod
    if model == "batch_norm_block":
        assert convs_on_tiled_rows(mod)[1] == 2
    (built, converted, _), folds = _counting_folds(lambda: bf16_module(mod, parse_target("cpu:sapphirerapids")))
    assert folds == 1 and converted > 0
    # each rewrite called alone folds the batch norms itself, and the two then make the same module
    alone, folds = _counting_folds(lambda: bf16_convs(convs_on_tiled_rows(mod)[0], amx=True)[0])
    assert folds == 2
    assert tvm_ffi.structural_equal(built, bf16_products(alone, isa="amx", fast_vectors=False)[0], map_free_vars=True)


@NEEDS_AMX
@pytest.mark.parametrize("block", ["pointwise", "preactivation"])
def test_export_of_the_tf_block_at_bf16_verifies_on_this_amx_cpu(tmp_path, block):
    from app.cli import cli

    path = tmp_path / f"{block}.onnx"
    onnx.save(_tf_pointwise_block(10) if block == "pointwise" else _preactivation_blocks(10), path)
    result = CliRunner().invoke(cli, ["export", str(path), "-o", str(tmp_path / "bundle"), "--no-db",
                                      "--precision", "bf16"], obj={})
    assert result.exit_code == 0, result.output
    assert "verified" in result.output.lower(), result.output


@pytest.mark.parametrize("activation", ["Relu", "Clip"])
def test_the_bias_activation_and_residual_adds_after_convolutions_on_rows_join_their_kernels(activation):
    mod = import_onnx(_preactivation_blocks(10, activation)).mod
    built, converted, _ = bf16_module(mod, parse_target("cpu:sapphirerapids"))
    assert converted == 5
    kernels = [gv.name_hint for gv, f in fused_module(built).functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    steps = ("add", "relu", "maximum", "minimum", "multiply")
    # before: each convolution's slice and reshape, then its bias and activation (and the sums) a kernel apart
    assert not [k for k in kernels if "reshape" in k and any(s in k for s in steps)], kernels
    act = "relu" if activation == "Relu" else "maximum"
    # the main branches' first convolutions: bias and activation in the kernel, before the padded pixels go
    assert sum("conv2d_nhwc_bf16" in k and f"_add_{act}" in k and k.endswith("strided_slice") for k in kernels) == 2
    # both residual sums in a convolution's kernel, on its sliced row
    assert sum("conv2d_nhwc_bf16" in k and "strided_slice1_add" in k for k in kernels) == 2, kernels
    # what stays a kernel of its own: the output's layout, and the rows as maps (views); the sum's batch norm
    # (the sum is read by it and the next sum, the batch norm by the next convolution alone) is computed in that
    # convolution's packing (explorer.passes.layout_into_conv)
    alone = sorted(k for k in kernels if "conv2d" not in k)
    assert [k for k in alone if k.rstrip("0123456789") != "reshape"] == ["fused_reshape1_transpose"], kernels
    norm = f"fused_multiply_add3_{act}1" + ("_minimum1" if act == "maximum" else "") + "_conv2d_nhwc_bf16"
    assert sum(k.startswith(norm) for k in kernels) == 1, kernels


@pytest.mark.parametrize("activation", ["Relu", "Clip"])
def test_steps_computed_on_the_rows_give_the_numbers_they_gave_on_the_maps(activation):
    mod = import_onnx(_preactivation_blocks(10, activation)).mod
    rows, count = convs_on_tiled_rows(mod)
    assert count == 5
    # every step on the rows: none on a 10 x 10 map (NCHW) any more
    step = re.compile(r"R\.Tensor\(\(1, \d+, 10, 10\).* = R\.(add|multiply|nn\.relu|maximum|minimum|call_tir)\(")
    on_maps = [line for line in rows["main"].script().splitlines() if step.search(line)]
    assert not on_maps, on_maps
    x = np.random.default_rng(1).normal(size=(1, 10, 10, 128)).astype(np.float32)
    np.testing.assert_array_equal(_run(rows, x), _run(mod, x))


@pytest.mark.parametrize("size, stride", [(10, 2), (20, 2)])
def test_steps_after_a_strided_convs_wider_rows_give_the_numbers_they_gave(size, stride):
    """A strided convolution's rows padded on the right (10 -> 14: a slice, no reshape): its bias and
    ReLU computed on the padded rows, the extra columns cut off after, the same numbers."""
    mod = import_onnx(_tf_pointwise_block(size, stride)).mod
    rows, count = convs_on_tiled_rows(mod)
    assert count >= 1
    x = np.random.default_rng(2).normal(size=(1, size, size, 128)).astype(np.float32)
    np.testing.assert_array_equal(_run(rows, x), _run(mod, x))
