"""SinkTransposes: transposes move below elementwise ops and pools until they meet their inverse;
the values stay the same (exactly: only the layout changes), a quantized CNN's int8 kernels are no
longer separated by transposes, and float models are left as they were."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

from explorer.models import import_onnx
from explorer.passes.sink_transposes import SinkTransposes
from tests.onnx_cases import ort_run, random_feeds, tvm_run
from tests.quantized_models import ort_quantize


def _nhwc_kernel_in_nchw_graph() -> tvm.IRModule:
    """An NHWC value put back in NCHW, pooled, quantized per channel, biased, activated, and
    transposed to NHWC again; one branch (a reshape) still wants the NCHW pool."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 8, 16), "float32"))
    rng = np.random.default_rng(0)
    with bb.function("main", [x]):
        with bb.dataflow():
            nchw = bb.emit(relax.op.permute_dims(x, [0, 3, 1, 2]))
            pool = bb.emit(relax.op.nn.max_pool2d(nchw, [3, 3], [2, 2], [1, 1, 1, 1], layout="NCHW"))
            scale = relax.const(rng.uniform(0.01, 0.05, 16).astype("float32"))
            zero = relax.const(np.zeros(16, "int8"))
            q = bb.emit(relax.op.quantize(pool, scale, zero, axis=1, out_dtype="int8"))
            dq = bb.emit(relax.op.dequantize(q, scale, zero, axis=1, out_dtype="float32"))
            bias = relax.const(rng.normal(0, 1, (1, 16, 1, 1)).astype("float32"))
            act = bb.emit(relax.op.nn.relu(relax.op.add(dq, bias)))
            back = bb.emit(relax.op.permute_dims(act, [0, 2, 3, 1]))
            flat = bb.emit(relax.op.reshape(pool, (1, 256)))
            out = bb.emit_output(relax.Tuple([back, flat]))
        bb.emit_func_output(out)
    return bb.get()


def _run(mod: tvm.IRModule, x: np.ndarray) -> list[np.ndarray]:
    ex = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x))
    return [o.numpy() for o in out]


def test_transposes_sink_below_pools_and_elementwise_ops_and_cancel():
    mod = _nhwc_kernel_in_nchw_graph()
    sunk = SinkTransposes(mod)
    script = sunk.script()
    assert 'layout="NHWC"' in script and "axis=3" in script  # the pool and the per-channel quantize follow
    # left: the one the reshape needs (NCHW pool) and, dead code dropped, nothing before the NHWC output
    assert script.count("R.permute_dims") == 1, script
    x = np.random.default_rng(1).standard_normal((1, 8, 8, 16)).astype("float32")
    for want, got in zip(_run(mod, x), _run(sunk, x)):
        np.testing.assert_array_equal(got, want)


def test_a_graph_without_transposes_to_move_is_returned_as_it_was():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.relu(x))
        bb.emit_func_output(out)
    mod = bb.get()
    assert SinkTransposes(mod).same_as(mod)


def _residual_cnn() -> onnx.ModelProto:
    """conv -> relu -> max-pool -> conv -> add (residual) -> relu -> global pool -> gemm; the
    convolutions with biases (QOperator form makes each an int32 input of QLinearConv)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.2, (16, 3, 3, 3)).astype("float32"), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.1, (16, 16, 3, 3)).astype("float32"), "w2"),
             numpy_helper.from_array(rng.normal(0, 0.1, 16).astype("float32"), "b1"),
             numpy_helper.from_array(rng.normal(0, 0.1, 16).astype("float32"), "b2"),
             numpy_helper.from_array(rng.normal(0, 0.2, (10, 16)).astype("float32"), "w3"),
             numpy_helper.from_array(np.zeros(10, "float32"), "b3")]
    nodes = [helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "p1"], ["a2"]),
             helper.make_node("Relu", ["a2"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["out"], transB=1)]
    graph = helper.make_graph(nodes, "res", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("fmt, per_channel", [("QDQ", True), ("QDQ", False), ("QOperator", True)],
                         ids=["per-channel", "per-tensor", "qoperator"])
def test_a_quantized_cnn_keeps_its_int8_kernels_in_nhwc_and_matches_onnx_runtime(tmp_path, fmt, per_channel):
    """QOperator form (QLinearConv with an int32 bias, QLinearAdd) too: its bias came in as
    ``dequantize(constant)``, unfolded, which kept the bias add, and every transpose after it, in place."""
    from explorer.passes.pipelines import INFERENCE_PASSES, _sequential
    from explorer.target import host_target

    if not host_target().cpu_spec().int8_dot:
        pytest.skip("this CPU has no int8 dot product schedx uses: the QDQ graph stays float")
    model = ort_quantize(_residual_cnn(), tmp_path, fmt=fmt, per_channel=per_channel)
    loaded = import_onnx(model)
    passes = list(INFERENCE_PASSES[:INFERENCE_PASSES.index("LegalizeOps")])
    with tvm.target.Target({"kind": "llvm"}):
        before = _sequential([p for p in passes if p != "SinkTransposes"], "before")(loaded.mod)
        after = _sequential(passes, "after")(loaded.mod)
    assert before.script().count("R.permute_dims") >= 4  # each int8 conv between two transposes
    assert after.script().count("R.permute_dims") <= 2, after.script()  # the input's, and the pooled output's
    step = float(np.max(np.abs(ort_run(model, random_feeds(model, 1))[0]))) / 127  # the output's scale, at most
    for seed in (1, 2):
        feeds = random_feeds(model, seed)
        got = tvm_run(SimpleNamespace(mod=after, info=loaded.info), feeds)[0]
        want = tvm_run(SimpleNamespace(mod=before, info=loaded.info), feeds)[0]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)  # same computation, other layout
        assert np.abs(got - ort_run(model, feeds)[0]).max() <= 2 * step


def test_a_concatenation_of_parts_transposed_alike_runs_before_the_transpose():
    """A U-Net joins its upsampled map (written NHWC, transposed to NCHW) and its skip (a leaky
    ReLU of an NHWC conv, transposed too) on the channel axis, and the next conv wants NHWC: the
    concatenation runs on the NHWC parts (axis 3), and no transpose is left."""
    bb = relax.BlockBuilder()
    up = relax.Var("up", relax.TensorType((1, 8, 8, 16), "float32"))
    skip = relax.Var("skip", relax.TensorType((1, 8, 8, 4), "float32"))
    with bb.function("main", [up, skip]):
        with bb.dataflow():
            a = bb.emit(relax.op.permute_dims(up, [0, 3, 1, 2]))
            b = bb.emit(relax.op.nn.leakyrelu(relax.op.permute_dims(skip, [0, 3, 1, 2]), 0.2))
            joined = bb.emit(relax.op.concat([a, b], axis=1))
            out = bb.emit_output(relax.op.permute_dims(joined, [0, 2, 3, 1]))
        bb.emit_func_output(out)
    mod = bb.get()
    sunk = SinkTransposes(mod)
    script = sunk.script()
    assert "R.permute_dims" not in script and "axis=3" in script, script
    rng = np.random.default_rng(2)
    feeds = [rng.standard_normal((1, 8, 8, 16)).astype("float32"), rng.standard_normal((1, 8, 8, 4)).astype("float32")]

    def run(m):
        ex = tvm.compile(m, target=tvm.target.Target({"kind": "llvm"}))
        return relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(f) for f in feeds]).numpy()
    np.testing.assert_array_equal(run(sunk), run(mod))


def test_a_pad_of_a_transposed_map_pads_the_map_and_keeps_its_values():
    """pad(permute_dims(y, NHWC -> NCHW), uneven widths) becomes permute_dims(pad(y, the widths moved), ...)."""
    bb = relax.BlockBuilder()
    y = relax.Var("y", relax.TensorType((1, 5, 6, 4), "float32"))
    with bb.function("main", [y]):
        with bb.dataflow():
            nchw = bb.emit(relax.op.permute_dims(y, [0, 3, 1, 2]))
            padded = bb.emit(relax.op.nn.pad(nchw, [0, 0, 0, 0, 1, 2, 3, 0], "constant", 0.25))
            out = bb.emit_output(relax.Tuple([relax.op.permute_dims(padded, [0, 2, 3, 1])]))
        bb.emit_func_output(out)
    mod = bb.get()
    sunk = SinkTransposes(mod)
    script = sunk.script()
    assert "R.permute_dims" not in script and "pad_width=[0, 0, 1, 2, 3, 0, 0, 0]" in script, script
    x = np.random.default_rng(3).standard_normal((1, 5, 6, 4)).astype("float32")
    for want, got in zip(_run(mod, x), _run(sunk, x)):
        np.testing.assert_array_equal(got, want)


def test_a_pad_read_by_a_kernel_keeps_the_transpose_above_it():
    """The pad before a quantized conv's NHWC kernel (QDQToInt8Kernels writes permute_dims then R.nn.pad):
    the conv takes no transpose further, so moving one below the pad would only move it onto the larger map."""
    bb = relax.BlockBuilder()
    y = relax.Var("y", relax.TensorType((1, 4, 6, 6), "float32"))
    w = relax.const(np.ones((3, 3, 4, 8), "float32"))
    with bb.function("main", [y]):
        with bb.dataflow():
            nhwc = bb.emit(relax.op.permute_dims(y, [0, 2, 3, 1]))
            padded = bb.emit(relax.op.nn.pad(nhwc, [0, 0, 1, 1, 1, 1, 0, 0], "constant", 3.0))
            out = bb.emit_output(relax.op.nn.conv2d(padded, w, data_layout="NHWC", kernel_layout="HWIO"))
        bb.emit_func_output(out)
    mod = bb.get()
    assert SinkTransposes(mod).same_as(mod)


def _run_many(mod: tvm.IRModule, *xs: np.ndarray) -> np.ndarray:
    ex = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
    return relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(x) for x in xs]).numpy()


def _global_pool_of_nhwc_map(keepdims: bool) -> tvm.IRModule:
    """A CNN's end as schedx computes it: the NHWC map transposed back to NCHW, averaged over H and W
    (ONNX GlobalAveragePool), flattened for the classifier."""
    bb = relax.BlockBuilder()
    y = relax.Var("y", relax.TensorType((1, 7, 7, 16), "float32"))
    with bb.function("main", [y]):
        with bb.dataflow():
            nchw = bb.emit(relax.op.permute_dims(y, [0, 3, 1, 2]))
            pooled = bb.emit(relax.op.mean(nchw, [2, 3], keepdims))
            out = bb.emit_output(relax.op.reshape(pooled, (1, 16)))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("keepdims", [True, False])
def test_a_global_average_pool_reduces_the_nhwc_map_and_no_transpose_is_left(keepdims):
    mod = _global_pool_of_nhwc_map(keepdims)
    sunk = SinkTransposes(mod)
    script = sunk.script()
    assert "R.permute_dims" not in script and "R.mean(y, axis=[1, 2]" in script, script
    x = np.random.default_rng(4).standard_normal((1, 7, 7, 16)).astype("float32")
    np.testing.assert_allclose(_run_many(sunk, x), _run_many(mod, x), rtol=1e-6)


def test_a_reduction_that_keeps_axes_out_of_order_keeps_a_transpose_of_what_is_left():
    """sum over H of an NHWC map seen as NCHW: (N, C, W) is left, y's order (N, W, C): one small transpose."""
    bb = relax.BlockBuilder()
    y = relax.Var("y", relax.TensorType((2, 3, 4, 5), "float32"))
    with bb.function("main", [y]):
        with bb.dataflow():
            nchw = bb.emit(relax.op.permute_dims(y, [0, 3, 1, 2]))
            out = bb.emit_output(relax.op.sum(nchw, [2], False))
        bb.emit_func_output(out)
    mod = bb.get()
    sunk = SinkTransposes(mod)
    script = sunk.script()
    assert "R.sum(y, axis=[1]" in script and "R.permute_dims(lv, axes=[0, 2, 1])" in script, script
    x = np.random.default_rng(5).standard_normal((2, 3, 4, 5)).astype("float32")
    np.testing.assert_allclose(_run_many(sunk, x), _run_many(mod, x), rtol=1e-6)

def test_an_identity_transpose_vanishes_and_the_convolution_keeps_its_epilogue():
    """ConvertLayout leaves permute_dims(x, [0, 1, 2, 3]) after converted convs (Keras MobileNetV3):
    a reshape there (kInjective) splits relu off the conv's kernel; the identity must simply go."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 8, 16), "float32"))
    w = relax.const(np.random.default_rng(0).standard_normal((3, 3, 16, 16)).astype("float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            c = bb.emit(relax.op.nn.conv2d(x, w, padding=1, data_layout="NHWC", kernel_layout="HWIO"))
            i = bb.emit(relax.op.permute_dims(c, [0, 1, 2, 3]))
            out = bb.emit_output(relax.op.nn.relu(i))
        bb.emit_func_output(out)
    sunk = SinkTransposes(bb.get())
    assert "R.reshape" not in sunk.script() and "R.permute_dims" not in sunk.script(), sunk.script()
    with tvm.target.Target({"kind": "llvm"}):
        fused = relax.transform.FuseTIR()(relax.transform.FuseOps()(relax.transform.AnnotateTIROpPattern()(
            relax.transform.LegalizeOps()(sunk))))
    names = [gv.name_hint for gv, f in fused.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert names == ["fused_conv2d_relu"], names


def test_a_squeeze_excitation_gate_lets_both_map_transposes_cancel():
    """map = permute(y, NCHW); gate = sigmoid(permute(g, NCHW)) (1, C, 1, 1); permute(map * gate, NHWC):
    the gate's transpose moves only unit axes, but turned into a reshape it no longer matches the map's,
    and the multiply (and two transposes of the whole map) stay in NCHW."""
    bb = relax.BlockBuilder()
    y = relax.Var("y", relax.TensorType((1, 8, 8, 16), "float32"))
    g = relax.Var("g", relax.TensorType((1, 1, 1, 16), "float32"))
    with bb.function("main", [y, g]):
        with bb.dataflow():
            m = bb.emit(relax.op.permute_dims(y, [0, 3, 1, 2]))
            gate = bb.emit(relax.op.sigmoid(bb.emit(relax.op.permute_dims(g, [0, 3, 1, 2]))))
            out = bb.emit_output(relax.op.permute_dims(bb.emit(relax.op.multiply(m, gate)), [0, 2, 3, 1]))
        bb.emit_func_output(out)
    mod = bb.get()
    sunk = SinkTransposes(mod)
    assert "R.permute_dims" not in sunk.script() and "R.reshape" not in sunk.script(), sunk.script()
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((1, 8, 8, 16)).astype("float32"), rng.standard_normal((1, 1, 1, 16)).astype("float32")
    np.testing.assert_allclose(_run_many(sunk, a, b), _run_many(mod, a, b), rtol=1e-6)


def test_a_pooled_vector_transposed_back_for_the_next_nhwc_conv_cancels():
    """SE squeeze: mean(permute(y, NCHW), [2, 3], keepdims) then permute(., NHWC) for a 1x1 conv: nothing left."""
    bb = relax.BlockBuilder()
    y = relax.Var("y", relax.TensorType((1, 7, 7, 16), "float32"))
    with bb.function("main", [y]):
        with bb.dataflow():
            pooled = bb.emit(relax.op.mean(bb.emit(relax.op.permute_dims(y, [0, 3, 1, 2])), [2, 3], True))
            out = bb.emit_output(relax.op.permute_dims(pooled, [0, 2, 3, 1]))
        bb.emit_func_output(out)
    script = SinkTransposes(bb.get()).script()
    assert "R.reshape" not in script and "R.permute_dims" not in script, script


def test_a_reduction_whose_transpose_other_ops_read_too_is_left_alone():
    """A layer norm over a transposed sequence (SVTR): mean and subtract both read permute(x, [0, 2, 1]).
    The transpose stays for the subtract; moving the mean only makes it reduce a strided axis and adds
    a reshape (PP-OCR SVTR: 23 -> 26 kernels)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 96, 256), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            t = bb.emit(relax.op.permute_dims(x, [0, 2, 1]))
            mu = bb.emit(relax.op.mean(t, [-1], True))
            out = bb.emit_output(relax.op.subtract(t, mu))
        bb.emit_func_output(out)
    mod = bb.get()
    assert SinkTransposes(mod).same_as(mod), SinkTransposes(mod).script()


def test_a_transpose_of_a_tensor_shaped_by_a_shape_variable_still_sinks():
    bb = relax.BlockBuilder()
    s = relax.Var("s", relax.ShapeType(ndim=4))
    y = relax.Var("y", relax.TensorType(s, "float32"))
    with bb.function("main", [y, s]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.relu(bb.emit(relax.op.permute_dims(y, [0, 3, 1, 2]))))
        bb.emit_func_output(out)
    script = SinkTransposes(bb.get()).script()  # raised TypeError: relax.ShapeType does not support subscript
    assert "R.nn.relu(y)" in script and "R.permute_dims" in script, script
