"""A constant Pad as tf2onnx writes it (Keras' ZeroPadding2D before the stem's max-pool) becomes
``R.nn.pad`` (ConstantPadToRelaxOp), transposes move through it (SinkTransposes), and the pool runs
NHWC right after the NHWC convolution; other pads and kernels that only look like one stay. (A pad
of a transposed map alone: tests/test_sink_transposes.py.)"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax, te, topi

from explorer.models import import_onnx
from explorer.passes.constant_pad import ConstantPadToRelaxOp
from explorer.passes.pipelines import INFERENCE_PASSES, _sequential
from tests.onnx_cases import ort_run, random_feeds, tvm_run

CHANNELS = 8


def _tf2onnx_stem(mode: str = "constant", value: float | None = None) -> onnx.ModelProto:
    """NHWC input -> Transpose -> Conv 3x3 s2 -> Pad (pads an int64 input, opset 13) -> MaxPool 3x3 s2 ->
    BatchNormalization -> Relu -> Conv 1x1 -> Transpose back to NHWC, as tf2onnx exports ResNet50V2."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.2, (CHANNELS, 3, 3, 3)).astype("float32"), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.1, CHANNELS).astype("float32"), "b1"),
             numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], "int64"), "pads"),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, CHANNELS).astype("float32"), "gamma"),
             numpy_helper.from_array(rng.normal(0, 0.1, CHANNELS).astype("float32"), "beta"),
             numpy_helper.from_array(rng.normal(0, 0.1, CHANNELS).astype("float32"), "mean"),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, CHANNELS).astype("float32"), "var"),
             numpy_helper.from_array(rng.normal(0, 0.1, (CHANNELS, CHANNELS, 1, 1)).astype("float32"), "w2")]
    pad_inputs = ["c1", "pads"]
    if value is not None:
        inits.append(numpy_helper.from_array(np.array(value, "float32"), "value"))
        pad_inputs.append("value")
    nodes = [helper.make_node("Transpose", ["input"], ["t"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["t", "w1", "b1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Pad", pad_inputs, ["p"], mode=mode),
             helper.make_node("MaxPool", ["p"], ["mp"], kernel_shape=[3, 3], strides=[2, 2]),
             helper.make_node("BatchNormalization", ["mp", "gamma", "beta", "mean", "var"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["c2"]),
             helper.make_node("Transpose", ["c2"], ["out"], perm=[0, 2, 3, 1])]
    graph = helper.make_graph(
        nodes, "tf2onnx_stem", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 32, 32, 3])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8, 8, CHANNELS])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _kernels(mod: tvm.IRModule) -> list[tuple[str, relax.Var, list]]:
    """(kernel name, bound var, input vars) of each call_tir in ``main``, in order."""
    out = []
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            if isinstance(b.value, relax.Call) and isinstance(b.value.args[0], tvm.ir.GlobalVar):
                out.append((b.value.args[0].name_hint, b.var, list(b.value.args[1].fields)))
    return out


@pytest.mark.parametrize("value", [None, 0.5], ids=["zero", "half"])
def test_a_tf2onnx_pad_before_a_pool_leaves_no_transpose_and_the_pool_reads_nhwc(value):
    model = _tf2onnx_stem(value=value)
    loaded = import_onnx(model)
    with tvm.target.Target({"kind": "llvm"}):
        built = _sequential(INFERENCE_PASSES, "inference")(loaded.mod)
    kernels = _kernels(built)
    producer = {var: (name, args) for name, var, args in kernels}
    pool_name, _, pool_args = next(k for k in kernels if "max_pool2d" in k[0])
    pad_name, pad_args = producer[pool_args[0]]
    conv_name, _ = producer[pad_args[0]]
    assert pad_name == "pad" and "conv2d" in conv_name, [k[0] for k in kernels]  # no transpose between them
    assert [int(d) for d in pool_args[0].ty.shape] == [1, 18, 18, CHANNELS]  # the pool reads NHWC
    assert not [name for name, _, _ in kernels if name.startswith(("transpose", "fused_transpose"))]
    feeds = random_feeds(model, 1)
    got = tvm_run(SimpleNamespace(mod=built, info=loaded.info), feeds)[0]
    np.testing.assert_allclose(got, ort_run(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_a_reflect_pad_stays_as_it_was():
    mod = import_onnx(_tf2onnx_stem(mode="reflect")).mod
    assert "R.call_tir" in mod.script()
    assert ConstantPadToRelaxOp(mod).same_as(mod)


def _call_te(compute, name: str) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 6, 6), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.call_te(compute, x, primfunc_name_hint=name))
        bb.emit_func_output(out)
    return bb.get()


def test_a_call_tir_that_is_not_topis_pad_stays_even_when_named_pad():
    def doubled_pad(x):  # a pad's shape, bounds and fill value, but it scales what it copies
        return te.compute((1, 4, 8, 8), lambda n, c, h, w: tvm.tirx.if_then_else(
            tvm.tirx.all(h >= 1, h < 7, w >= 1, w < 7), x[n, c, h - 1, w - 1] * 2.0, tvm.tirx.const(0.0, "float32")),
            name="PadInput")

    mod = _call_te(doubled_pad, "pad")
    assert ConstantPadToRelaxOp(mod).same_as(mod)
    topis = _call_te(lambda x: topi.nn.pad(x, [0, 0, 1, 0], [0, 0, 1, 2], 0.0), "anything")
    script = ConstantPadToRelaxOp(topis).script()
    assert "R.call_tir" not in script and "pad_width=[0, 0, 0, 0, 1, 1, 0, 2]" in script, script



@pytest.mark.parametrize("shape,before,after,dtype,value", [
    ((1, 8, 40, 40), [0, 0, 16, 16], [0, 0, 0, 0], "float32", 0.0),  # all before: once past a search's cut
    ((1, 8, 10, 10), [0, 0, 15, 15], [0, 0, 15, 15], "float32", 0.0),
    ((2, 3, 5), [1, 0, 2], [0, 4, 1], "int8", -3),  # 3-d, batch and channel axes, an integer fill
])
def test_the_widths_and_value_are_read_from_the_function_in_one_comparison(shape, before, after, dtype, value):
    from explorer.passes.constant_pad import topi_pad_widths

    x = te.placeholder(shape, dtype, name="A")
    func = te.create_prim_func([x, topi.nn.pad(x, before, after, value)], index_dtype_override="int64")
    func = func.without_attr("global_symbol")  # as the importer's call_tir carries it
    out_shape = [s + b + a for s, b, a in zip(shape, before, after)]
    assert topi_pad_widths(func, list(shape), out_shape, dtype) == (before, after, value)


def test_a_fill_a_float_cannot_hold_and_a_shape_only_known_at_run_time_stay():
    from explorer.passes.constant_pad import topi_pad_widths

    x = te.placeholder((4, 4), "int64", name="A")
    big = 2 ** 62 + 1  # R.nn.pad's value is a float: it would round to 2^62
    func = te.create_prim_func([x, topi.nn.pad(x, [1, 1], [1, 1], tvm.tirx.const(big, "int64"))],
                               index_dtype_override="int64")
    assert topi_pad_widths(func, [4, 4], [6, 6], "int64") is None

    x = te.placeholder((4, 4), "float32", name="A")
    pad = te.create_prim_func([x, topi.nn.pad(x, [1, 1], [1, 1], 0.0)], index_dtype_override="int64")
    bb = relax.BlockBuilder()
    s = relax.Var("s", relax.ShapeType(ndim=2))
    v = relax.Var("v", relax.TensorType(s, "float32"))  # a shape held in a variable, not an expression
    with bb.function("main", [v, s]):
        gv = bb.add_func(pad.without_attr("global_symbol"), "pad")
        bb.emit_func_output(bb.emit(relax.call_tir(gv, (v,), relax.TensorType((6, 6), "float32"))))
    mod = bb.get()
    assert ConstantPadToRelaxOp(mod).same_as(mod)  # left alone (the same module), no error
