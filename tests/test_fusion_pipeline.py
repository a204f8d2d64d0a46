"""The task pipeline (``inference``): batch-norm folded into the convolution and verified against
ONNX Runtime, clips fused, NHWC with weights transposed once at build time, fast, shown in the pass
explorer, and its task keys equal to MetaSchedule's own task extraction."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

from explorer.passes import PIPELINES, run_pipeline
from explorer.passes.fold_numpy import FoldConstantNumpy
from explorer.passes.pipelines import INFERENCE_PASSES, TASK_PIPELINE
from explorer.target import host_target
from explorer.workload import as_task_module, load_workload, workload_key


def _bn_clip_model() -> onnx.ModelProto:
    """conv -> batch-norm -> Clip(0, 6) -> conv (stride 2) -> batch-norm -> add(skip) -> relu, and a
    batch-norm on the input that follows no convolution; 1x8x12x12."""
    rng = np.random.default_rng(1)

    def arr(name, *shape, low=None):
        value = rng.uniform(0.5, 1.5, shape) if low else rng.normal(0, 0.3, shape)
        return numpy_helper.from_array(value.astype("float32"), name)

    inits = [arr("w1", 8, 8, 3, 3), arr("w2", 8, 8, 3, 3), arr("ws", 8, 8, 1, 1),
             numpy_helper.from_array(np.array(0.0, "float32"), "lo"), numpy_helper.from_array(np.array(6.0, "float32"), "hi")]
    for k in range(3):
        inits += [arr(f"g{k}", 8, low=True), arr(f"b{k}", 8), arr(f"m{k}", 8), arr(f"v{k}", 8, low=True)]
    nodes = [
        helper.make_node("BatchNormalization", ["input", "g0", "b0", "m0", "v0"], ["x"]),
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "g1", "b1", "m1", "v1"], ["n1"]),
        helper.make_node("Clip", ["n1", "lo", "hi"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c2", "g2", "b2", "m2", "v2"], ["n2"]),
        helper.make_node("Conv", ["x", "ws"], ["skip"], strides=[2, 2]),
        helper.make_node("Add", ["n2", "skip"], ["s"]),
        helper.make_node("Relu", ["s"], ["out"]),
    ]
    graph = helper.make_graph(nodes, "bn_clip", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 8, 12, 12])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8, 6, 6])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture(scope="module")
def bn_clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "bn_clip.onnx"
    onnx.save(_bn_clip_model(), path)
    return load_workload(str(path))


def _callees(mod: tvm.IRModule) -> list[str]:
    return [gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]


def test_batch_norm_is_folded_into_one_kernel_per_convolution(bn_clip):
    tasks = [t.name.split("/")[-1] for t in bn_clip.tasks()]
    assert not any("batch_norm" in t for t in tasks), tasks
    convs = [t for t in tasks if "conv2d" in t]
    assert len(convs) == 3, tasks  # conv + bias (+ clip) (+ residual add + relu): one kernel each
    assert any("maximum" in t and "minimum" in t for t in convs)  # the clip joined its convolution
    assert any(t.count("add") >= 2 and "relu" in t for t in convs)  # bias + residual + relu
    # the batch-norm on the input follows no convolution: decomposed into one elementwise kernel
    assert sum(not ("conv2d" in t or "transpose" in t) for t in tasks) == 1, tasks
    # NCHW input and output, converted once each: the input's read inside the padded 3x3 conv
    # (explorer.passes.layout_into_conv) and apart for the 1x1 skip conv, which reads it in its product
    assert sorted(t for t in tasks if "transpose" in t) == ["fused_transpose_conv2d_add1_maximum_minimum", "transpose",
                                                             "transpose1"], tasks


def test_folded_batch_norm_matches_onnx_runtime(bn_clip, tmp_path):
    from export import export_workload

    report = export_workload(bn_clip, "cpu", tmp_path / "bundle", layers=False)
    assert report.ok and report.verified, report.verdict
    assert report.verification.max_rel_error < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("model", ["resnet18", "mobilenet_v2"])
def test_zoo_cnns_with_folded_batch_norm_match_onnx_runtime(model, tmp_path):
    from export import export_workload

    report = export_workload(load_workload(model), "cpu", tmp_path / "bundle", layers=False)
    assert report.ok and report.verified, report.verdict


def test_resnet18_kernels_have_weights_prepared_at_build_time():
    workload = load_workload("resnet18")
    mod = workload.fused_module()
    tasks = workload.tasks()
    names = [t.name.split("/")[-1] for t in tasks]
    assert not any("batch_norm" in n for n in names)
    # the 10 stride-1 3x3 convolutions of the first three stages are Winograd products
    # (explorer.passes.winograd); the stem, the strided, the 1x1 and the last stage's stay direct
    assert sum(t.calls for t in tasks if "winograd_output_tiles" in t.name) == 10
    assert sum(t.calls for t in tasks if "conv2d" in t.name) == 10
    # the input's NCHW -> NHWC only, read in the stem's padding (explorer.passes.layout_into_conv): the
    # pooled vector's transpose back to NCHW moves unit axes, a view
    assert sorted(n for n in names if "transpose" in n and "winograd" not in n) == ["fused_transpose_conv2d_add_relu"]
    # weights are constants already in HWIO: no kernel transposes or scales them per call
    consts = [c for c in _constants(mod["main"]) if len(c.shape) == 4]
    assert consts and all(c.shape[0] == c.shape[1] and c.shape[0] in (1, 3, 7) for c in consts)


def _constants(func) -> list[np.ndarray]:
    from explorer.ir.relax_walk import iter_bindings

    out = []
    for b in iter_bindings(func):
        args = b.value.args[1].fields if isinstance(b.value, relax.Call) and len(b.value.args) > 1 \
            and isinstance(b.value.args[1], relax.Tuple) else []
        out += [a.value.numpy() for a in args if isinstance(a, tvm.ir.expr.Constant) and hasattr(a.value, "numpy")]
    return out


@pytest.mark.parametrize("model", ["small_cnn", pytest.param("mobilenet_v2", marks=pytest.mark.slow)])
def test_task_keys_agree_with_metaschedule(model):
    from tvm.s_tir import meta_schedule as ms

    workload = load_workload(model)
    tasks = workload.tasks()
    extracted = ms.relax_integration.extract_tasks(workload.fused_module(), host_target().tvm())
    assert {workload_key(as_task_module(t.dispatched[0])) for t in extracted} == {t.key for t in tasks}
    assert {t.task_name: int(t.weight) for t in extracted} == {t.funcs[0]: t.calls for t in tasks}


def test_the_pass_explorer_shows_the_inference_pipeline(tiny_module):
    assert TASK_PIPELINE in PIPELINES and "inference-nchw" in PIPELINES
    run = run_pipeline(tiny_module, TASK_PIPELINE)
    assert run.error is None
    names = [s.name for s in run.main_passes()]
    assert len(names) == len(INFERENCE_PASSES)  # TVM calls DecomposeOpsForInference "DecomposeOps"
    assert [n for n in names if n != "DecomposeOps"] == [n for n in INFERENCE_PASSES if n != "DecomposeOpsForInference"]
    folded = run.find("FoldBatchnormToConv2D")
    assert folded.changed


def test_numpy_folding_equals_tvms_fold_constant():
    """The arithmetic batch-norm folding leaves, and a weight transpose, folded by numpy and by TVM."""
    rng = np.random.default_rng(0)
    w = relax.const(rng.normal(size=(8, 4, 3, 3)).astype("float32"))
    var = relax.const(rng.uniform(0.5, 2, 8).astype("float32"))
    gamma = relax.const(rng.normal(size=8).astype("float32"))
    x = relax.Var("x", relax.TensorType((1, 4, 6, 6), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            std = bb.emit(relax.op.sqrt(relax.op.add(var, relax.prim_value(tvm.tirx.FloatImm("float32", 1e-5)))))
            scale = bb.emit(relax.op.reshape(relax.op.divide(gamma, std), (8, 1, 1, 1)))
            wt = bb.emit(relax.op.permute_dims(relax.op.multiply(w, scale), [2, 3, 1, 0]))
            y = bb.emit(relax.op.nn.conv2d(x, wt, padding=1, kernel_layout="HWIO"))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    mod = bb.get()
    ours = FoldConstantNumpy(mod)
    with tvm.target.Target({"kind": "llvm"}):
        theirs = relax.transform.FoldConstant()(mod)
    a, b = _constants_of(ours), _constants_of(theirs)
    assert len(a) == len(b) == 1 and a[0].shape == (3, 3, 4, 8)
    np.testing.assert_allclose(a[0], b[0], rtol=1e-6)


def _constants_of(mod: tvm.IRModule) -> list[np.ndarray]:
    from explorer.ir.relax_walk import iter_bindings

    out = []
    for b in iter_bindings(mod["main"]):
        if isinstance(b.value, relax.Call):
            out += [a.value.numpy() for a in b.value.args if isinstance(a, tvm.ir.expr.Constant)
                    and hasattr(a.value, "numpy") and a.value.numpy().ndim == 4]
    return out


def test_fast_math_stays_within_the_export_tolerance(tmp_path):
    """exp, erf, tanh and sigmoid become polynomials (FastMathTransform, FastActivations): outputs match ONNX
    Runtime within the export's tolerance, over a wide input range."""
    from export import export_workload

    nodes = [helper.make_node("Mul", ["input", "scale"], ["x"]),
             helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("Sigmoid", ["x"], ["s"]),
             helper.make_node("Erf", ["x"], ["e"]), helper.make_node("Softmax", ["x"], ["p"], axis=-1),
             helper.make_node("Sum", ["t", "s", "e", "p"], ["out"])]
    scale = numpy_helper.from_array(np.array(4.0, "float32"), "scale")
    graph = helper.make_graph(nodes, "fast_math", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [4, 64])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [4, 64])], [scale])
    path = tmp_path / "fast_math.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    workload = load_workload(str(path))
    assert any("fast" in t.name for t in workload.tasks())
    report = export_workload(workload, "cpu", tmp_path / "bundle", layers=False)
    assert report.ok and report.verified, report.verdict


def _dropout_sum_group_model() -> onnx.ModelProto:
    """conv -> Dropout -> grouped conv (2 groups of 12 channels) -> Sum(with the first conv) ->
    relu: the ONNX idioms that kept TVM's ConvertLayout from converting VGG-19 and ResNet-50."""
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (24, 4, 3, 3)).astype("float32"), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.3, (24, 12, 1, 1)).astype("float32"), "wg")]
    nodes = [helper.make_node("Conv", ["input", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Dropout", ["c1"], ["d"]),
             helper.make_node("Conv", ["d", "wg"], ["g"], group=2),
             helper.make_node("Sum", ["g", "c1"], ["s"]),
             helper.make_node("Relu", ["s"], ["out"])]
    graph = helper.make_graph(nodes, "idioms", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4, 10, 10])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 24, 10, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_dropout_and_sum_no_longer_keep_a_model_in_nchw(tmp_path):
    from export import export_workload

    path = tmp_path / "idioms.onnx"
    onnx.save(_dropout_sum_group_model(), path)
    workload = load_workload(str(path))
    script = workload.fused_module().script()
    assert "dropout" not in script and "stack" not in script
    assert 'sblock("conv2d_nhwc")' in script and "group_conv2d_nhwc" in script and "conv2d_nchw" not in script
    assert any("add" in t.name and "relu" in t.name and "conv2d" in t.name for t in workload.tasks())  # Sum fused
    report = export_workload(workload, "cpu", tmp_path / "bundle", layers=False)
    assert report.ok and report.verified, report.verdict


def test_a_model_without_convolutions_keeps_its_layout():
    from explorer.passes.layout import ConvertLayoutNHWC

    x = relax.Var("x", relax.TensorType((2, 8), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.stack([x, x], axis=0))  # TVM's ConvertLayout fails on this
        bb.emit_func_output(out)
    mod = bb.get()
    assert ConvertLayoutNHWC(mod).same_as(mod)


def _squeeze_negative_axis_model() -> onnx.ModelProto:
    """A Conformer's front: two strided 3x3 convs to an odd width (19), then a max over the width
    and a ``Squeeze`` of that axis spelt -1: the one that made TVM's layout inference throw
    ``std::bad_alloc`` and left the model in NCHW."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (16, 1, 3, 3)).astype("float32"), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.1, (16, 16, 3, 3)).astype("float32"), "w2"),
             numpy_helper.from_array(np.array([-1], "int64"), "axes")]
    nodes = [helper.make_node("Conv", ["input", "w1"], ["c1"], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("ReduceMax", ["r2"], ["m"], axes=[3], keepdims=1),
             helper.make_node("Squeeze", ["m", "axes"], ["out"])]
    graph = helper.make_graph(nodes, "conformer_front",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1, 40, 80])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 16, 9])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_squeeze_with_a_negative_axis_no_longer_keeps_a_model_in_nchw(tmp_path):
    from export import export_workload

    path = tmp_path / "front.onnx"
    onnx.save(_squeeze_negative_axis_model(), path)
    workload = load_workload(str(path))
    script = workload.fused_module().script()
    assert 'sblock("conv2d_nhwc")' in script and "conv2d_nchw" not in script
    report = export_workload(workload, "cpu", tmp_path / "bundle", layers=False)
    assert report.ok and report.verified, report.verdict


def test_each_convolution_is_converted_where_tvm_refuses_the_graph():
    """``stack`` makes TVM's ConvertLayout throw: each conv goes to NHWC on its own, and between the
    two convs (bias, ReLU) the transposes cancel; one is left, where the NCHW ``stack`` reads."""
    from explorer.passes.layout import ConvertLayoutNHWC
    from explorer.passes.sink_transposes import SinkTransposes

    rng = np.random.default_rng(4)
    x = relax.Var("x", relax.TensorType((1, 4, 9, 9), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            w1 = relax.const(rng.normal(0, 0.3, (6, 4, 3, 3)).astype("float32"))
            b1 = relax.const(rng.normal(0, 1, (1, 6, 1, 1)).astype("float32"))
            y = bb.emit(relax.op.nn.relu(relax.op.add(relax.op.nn.conv2d(x, w1, padding=[1, 1]), b1)))
            w2 = relax.const(rng.normal(0, 0.3, (6, 6, 3, 3)).astype("float32"))
            z = bb.emit(relax.op.nn.conv2d(y, w2, strides=[2, 2]))
            out = bb.emit_output(relax.op.stack([z, z], axis=0))
        bb.emit_func_output(out)
    mod = bb.get()
    with pytest.raises(Exception):  # noqa: B017 - TVM's own error, whatever it is this release
        relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "HWIO"]})(mod)
    converted = SinkTransposes(ConvertLayoutNHWC(mod))
    script = converted.script()
    assert script.count('data_layout="NHWC"') == 2 and 'data_layout="NCHW"' not in script
    assert script.count("axes=[0, 3, 1, 2]") == 1, script  # back to NCHW once, for the stack

    def run(m):
        ex = tvm.compile(m, target=tvm.target.Target({"kind": "llvm"}))
        return relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(feed)).numpy()
    feed = rng.standard_normal((1, 4, 9, 9)).astype("float32")
    np.testing.assert_allclose(run(converted), run(mod), rtol=1e-4, atol=1e-4)


def _strided_conv1d_model(path) -> None:
    """A byte-level classifier's front: a strided 1-D conv, a ReLU and a strided slice."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[8], strides=[4]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Slice", ["r", "st", "en", "ax", "sp"], ["y"])]
    inits = [numpy_helper.from_array((rng.standard_normal((64, 32, 8)) * 0.1).astype("float32"), "W"),
             numpy_helper.from_array(rng.standard_normal(64).astype("float32"), "B")]
    inits += [numpy_helper.from_array(np.array([v], "int64"), n) for n, v in
              (("st", 0), ("en", 1 << 30), ("ax", 2), ("sp", 2))]
    graph = helper.make_graph(nodes, "bytes", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 1024])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_a_1d_convolution_runs_channels_last_with_a_vector_register_tile(tmp_path):
    """Issue 27: a strided conv1d stayed NCW, its output's width innermost and read at the stride:
    scalar tiles (16x1) at 0.5 GFLOPS, 97% of a byte-level classifier, 23-63x ONNX Runtime. In NWC
    with WIO weights it tiles like a 2-D conv (the output channels in vectors) and still computes
    what ONNX Runtime computes."""
    from explorer.schedule.defaults import default_schedule
    from export import export_workload

    _strided_conv1d_model(tmp_path / "bytes.onnx")
    workload = load_workload(str(tmp_path / "bytes.onnx"))
    conv = next(t for t in workload.tasks() if "conv1d" in t.name)
    assert "conv1d_nwc" in conv.mod["main"].script()
    cpu = host_target().cpu_spec()
    _, choice = default_schedule(conv.mod["main"], cpu)
    tile = choice.steps[0].split("register tile ")[1].split()[0]
    assert "(conv1d_nwc)" in choice.steps[0] and int(tile.split("x")[1]) >= cpu.lanes("float32"), choice.steps
    report = export_workload(workload, "cpu", tmp_path / "bundle", layers=False)
    assert report.verification.ok, report.verification


@pytest.mark.parametrize("dims", [2, 1], ids=["conv2d_transpose", "conv1d_transpose"])
def test_a_transposed_convolution_after_a_converted_one_builds_and_computes_right(tmp_path, dims):
    """Issue 27: a text detector's upsampling head (ConvTranspose after convs) was converted to
    NHWC along with its input, which TVM 0.27 cannot legalize ("CodeGenVM cannot emit this Relax
    operator directly ... R.nn.conv2d_transpose(..., data_layout="NHWC")"): every build failed. It
    stays in NCHW (NCW), with transposes around it."""
    from export import export_workload

    rng = np.random.default_rng(0)
    k = [3] * dims
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c"], kernel_shape=k, pads=[1] * (2 * dims)),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("ConvTranspose", ["r", "W2"], ["y"], kernel_shape=[2] * dims, strides=[2] * dims)]
    inits = [numpy_helper.from_array((rng.standard_normal((16, 3, *k)) * 0.1).astype("float32"), "W1"),
             numpy_helper.from_array((rng.standard_normal((16, 8, *[2] * dims)) * 0.1).astype("float32"), "W2")]
    graph = helper.make_graph(nodes, "up", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, *[16] * dims])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "up.onnx")
    report = export_workload(str(tmp_path / "up.onnx"), "cpu", tmp_path / "bundle", layers=False)
    assert report.verification.ok, report.verification


def _bn_after_bias_model() -> onnx.ModelProto:
    """conv with a bias -> batch-norm -> relu (the batch-norm follows the bias add, not the conv: it
    is not folded), and DenseNet's pre-activation batch-norm -> relu -> conv; 1x8x12x12."""
    rng = np.random.default_rng(2)

    def arr(name, *shape, low=False):
        value = rng.uniform(0.5, 1.5, shape) if low else rng.normal(0, 0.3, shape)
        return numpy_helper.from_array(value.astype("float32"), name)

    inits = [arr("w1", 8, 8, 3, 3), arr("c1b", 8), arr("w2", 8, 8, 1, 1)]
    for k in range(2):
        inits += [arr(f"g{k}", 8, low=True), arr(f"b{k}", 8), arr(f"m{k}", 8), arr(f"v{k}", 8, low=True)]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "c1b"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "g0", "b0", "m0", "v0"], ["n1"]),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("BatchNormalization", ["r1", "g1", "b1", "m1", "v1"], ["n2"]),
        helper.make_node("Relu", ["n2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w2"], ["output"]),
    ]
    graph = helper.make_graph(nodes, "bn_after_bias",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 8, 12, 12])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 8, 12, 12])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_batch_norm_that_is_not_folded_still_fuses_with_its_relu(tmp_path):
    """TVM's batch_norm returns a tuple; decomposed, its first item was read through a get-item
    that ended the fused group: the relu after it ran as a kernel of its own (ShuffleNet v1's
    first 112x112x24 relu, 8% of the model; DenseNet-121's 58 pre-activation relus)."""
    from export import export_workload

    path = tmp_path / "bn_after_bias.onnx"
    onnx.save(_bn_after_bias_model(), path)
    workload = load_workload(str(path))
    tasks = [t.name.split("/")[-1] for t in workload.tasks()]
    assert not any(t.removeprefix("fused_").startswith("relu") for t in tasks), tasks
    # conv + bias + batch-norm + relu, then the next batch-norm + relu: one elementwise chain
    assert any("conv2d" in t and t.count("relu") == 2 for t in tasks), tasks
    report = export_workload(workload, "cpu", tmp_path / "bundle", layers=False)
    assert report.ok and report.verified, report.verdict
