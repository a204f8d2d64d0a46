"""``FuseLayoutIntoConv``: an NCHW model's input transpose becomes part of its first NHWC convolution's
kernel (read through in the conv's padding or bf16 packing copy): one kernel less, the same numbers, the
default schedule still its full rule (fp32 on each CPU kind, the AMX bf16 direct conv compiled for a
Sapphire Rapids); a transpose two convolutions read, or one a convolution reads in its reduction, stays."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

from explorer.ir.relax_walk import prim_funcs
from explorer.models import import_onnx
from explorer.passes.catalog import make_pass
from explorer.passes import layout_into_conv
from explorer.passes.layout_into_conv import fuse_layout_into_conv
from explorer.passes.pipelines import INFERENCE_PASSES
from explorer.precision import for_precision
from explorer.schedule.defaults.apply import apply_default_schedules, default_schedule
from explorer.target import host_target, parse_target
from explorer.workload import load_workload
from tests.onnx_cases import ort_run
from tests.cpu_marks import NEEDS_AMX

_PASS = "FuseLayoutIntoConv"
SIDE = 32


def _weights(name: str, *shape: int, seed: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.random.default_rng(seed).normal(0, 0.3, shape).astype("float32"), name)


def _model(nodes, inits, out_shape) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, SIDE, SIDE])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, out_shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _stem_cnn() -> onnx.ModelProto:
    """A ResNet-like stem on a 3-channel NCHW image: 7x7 stride-2 conv (bias, ReLU), then a 3x3 conv."""
    nodes = [helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], pads=[3] * 4, strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["out"], pads=[1] * 4)]
    inits = [_weights("w1", 64, 3, 7, 7, seed=1), _weights("b1", 64, seed=2), _weights("w2", 16, 64, 3, 3, seed=3)]
    return _model(nodes, inits, [1, 16, SIDE // 2, SIDE // 2])


def _fused(model: onnx.ModelProto, *, rewrite: bool = True) -> tvm.IRModule:
    """``model`` through the inference pipeline, with or without the pass."""
    mod = import_onnx(model).mod
    with tvm.target.Target({"kind": "llvm"}):
        for name in INFERENCE_PASSES:
            if name != _PASS or rewrite:
                mod = make_pass(name)(mod)
    return mod


def _before_the_pass(model: onnx.ModelProto) -> tvm.IRModule:
    """``model`` through the inference pipeline up to the pass (after FuseOps)."""
    mod = import_onnx(model).mod
    with tvm.target.Target({"kind": "llvm"}):
        for name in INFERENCE_PASSES[:INFERENCE_PASSES.index(_PASS)]:
            mod = make_pass(name)(mod)
    return mod


def _kernels(mod: tvm.IRModule) -> list[str]:
    return list(prim_funcs(mod))


def _outputs_with_and_without(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    """The model's output on ``x``, default-scheduled for this CPU, with the pass and without it."""
    target = host_target()
    outputs = []
    for rewrite in (True, False):
        scheduled, _ = apply_default_schedules(_fused(model, rewrite=rewrite), target.cpu_spec())
        vm = relax.VirtualMachine(tvm.compile(scheduled, target=target.tvm()), tvm.cpu())
        outputs.append(vm["main"](tvm.runtime.tensor(x)).numpy())
    return outputs


@pytest.fixture(scope="module")
def stem() -> onnx.ModelProto:
    return _stem_cnn()


def test_the_input_transpose_is_no_kernel_of_its_own(stem):
    names, before = _kernels(_fused(stem)), _kernels(_fused(stem, rewrite=False))
    assert "transpose" in before and "transpose" not in names, names
    fused = [n for n in names if n.startswith("fused_transpose_conv2d")]
    assert len(fused) == 1 and "relu" in fused[0], names  # the conv's epilogue stays in it
    assert len(names) == len(before) - 1, (names, before)
    params = _fused(stem)[fused[0]].params
    assert [int(d) for d in params[0].shape] == [1, 3, SIDE, SIDE]  # it reads the NCHW image itself


def test_the_fused_kernel_computes_what_the_two_did_and_onnx_runtime_does(stem):
    x = np.random.default_rng(4).uniform(-1, 1, (1, 3, SIDE, SIDE)).astype("float32")
    fused, pair = _outputs_with_and_without(stem, x)
    np.testing.assert_array_equal(fused, pair)
    np.testing.assert_allclose(fused, ort_run(stem, {"input": x})[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("spec", ["host", "cpu:znver3", "cpu:sapphirerapids"])
def test_the_fused_fp32_kernel_keeps_the_full_rule_and_pads_the_image_by_rows(stem, spec):
    target = host_target() if spec == "host" else parse_target(spec)
    mod = _fused(stem)
    name = next(n for n in _kernels(mod) if n.startswith("fused_transpose_conv2d"))
    func, choice = default_schedule(mod[name], target.cpu_spec())
    assert choice.rule == "full" and not choice.fallback_reason, choice
    assert any("padded image by rows" in s and "3 channels unrolled" in s for s in choice.steps), choice.steps
    assert "T_transpose" not in func.script()  # read through in the padding, not computed apart
    tvm.compile(tvm.IRModule({"main": func}), target=target.tvm())  # compiles for that CPU (nothing runs)


def test_the_amx_bf16_stem_packs_the_nchw_image_itself(stem, tmp_path):
    """For an AMX CPU (compiled, not run) the stem is the direct bf16 conv, its packing block reading
    the image through the transpose."""
    path = tmp_path / "stem.onnx"
    onnx.save(stem, path)
    target = parse_target("cpu:sapphirerapids")
    workload, _ = for_precision(load_workload(str(path)), target, "bf16")
    tasks = {t.name.split("/")[-1]: t for t in workload.for_target(target).tasks()}
    assert "transpose" not in tasks, list(tasks)
    name = next(n for n in tasks if n.startswith("fused_transpose_conv2d"))
    func, choice = default_schedule(tasks[name].mod["main"], target.cpu_spec())
    assert choice.rule == "full" and not choice.fallback_reason, choice
    assert "AMX" in choice.steps[0] and "rounded to bf16 and padded once" in choice.steps[0], choice.steps
    tvm.compile(tvm.IRModule({"main": func}), target=target.tvm())


def _nhwc_conv(x, seed: int):
    w = np.random.default_rng(seed).normal(0, 0.3, (3, 3, 3, 8)).astype("float32")
    return relax.op.nn.conv2d(x, relax.const(w), padding=[1, 1, 1, 1], data_layout="NHWC", kernel_layout="HWIO")


def test_a_transpose_two_convolutions_read_stays_a_kernel():
    """(ConvertLayout gives each NCHW conv a transpose of its own; a graph may share one.) Fused into
    either conv, the other would read it again."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 3, SIDE, SIDE), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            t = bb.emit(relax.op.permute_dims(x, [0, 2, 3, 1]))
            out = bb.emit_output(relax.op.add(bb.emit(_nhwc_conv(t, 5)), bb.emit(_nhwc_conv(t, 6))))
        bb.emit_func_output(out)
    mod = bb.get()
    with tvm.target.Target({"kind": "llvm"}):
        for name in INFERENCE_PASSES[INFERENCE_PASSES.index("LegalizeOps"):]:
            mod = make_pass(name)(mod)
    names = _kernels(mod)
    assert "transpose" in names and not any(n.startswith("fused_transpose") for n in names), names


def test_a_convolution_that_reads_the_transpose_in_its_reduction_leaves_it_alone():
    """An fp32 1x1 conv without padding: its copy of the input is no copy (inlined into the product),
    so the transpose would be read at every multiply-add."""
    model = _model([helper.make_node("Conv", ["input", "w"], ["out"])], [_weights("w", 8, 3, 1, 1, seed=7)],
                   [1, 8, SIDE, SIDE])
    mod = _before_the_pass(model)
    with tvm.target.Target({"kind": "llvm"}):
        assert fuse_layout_into_conv(mod).same_as(mod)


def test_a_device_build_keeps_its_transpose(stem):
    """The fusion rests on schedx's CPU schedules (a GPU's kernels are dlight's): under a CUDA target the
    pass leaves the module as it is; under a CPU's it fuses."""
    mod = _before_the_pass(stem)
    with parse_target("cuda:sm_80").tvm():
        assert make_pass(_PASS)(mod).same_as(mod)
    with parse_target("cpu:znver3").tvm():
        assert not make_pass(_PASS)(mod).same_as(mod)


def test_a_transformers_merged_heads_go_into_the_output_projections_packing():
    """BERT at bf16: the heads merged back (transpose, reshape) are read by the output projection alone,
    whose bf16 packing copies them anyway: one kernel (0.75x the two kernels' time alone, 1 thread)."""
    target = parse_target("cpu:sapphirerapids")
    workload, _ = for_precision(load_workload("bert_encoder"), target, "bf16")
    names = [t.name.split("/")[-1] for t in workload.for_target(target).tasks()]
    assert "fused_transpose1_reshape1_dense_bf161_add_add1" in names, names
    assert not any(n.startswith("fused_transpose1_reshape1") and "dense" not in n for n in names), names


# A pre-activation batch norm and ReLU (DenseNet, ResNet v2): an elementwise group without a transpose.
PRE_CHANNELS = 64  # each stem conv's; the concatenation's 128 makes the 1x1 after it long enough for bf16


def _preactivation_cnn(taps: int, out_channels: int = 32) -> onnx.ModelProto:
    """A dense block's step: two stem convs concatenated, the concatenation's batch norm and ReLU read by a
    ``taps`` x ``taps`` conv alone, whose output is concatenated to the block's map (the map has two readers:
    the batch norm stays a kernel before the pass, as in tf_densenet121). Few ``out_channels`` keep an fp32 3x3
    direct (:data:`explorer.passes.winograd.MIN_MACS`)."""
    c = PRE_CHANNELS
    rng = np.random.default_rng(8)
    nodes = [helper.make_node("Conv", ["input", "w0"], ["c0"], pads=[1] * 4),
             helper.make_node("Conv", ["input", "w1"], ["c1"], pads=[1] * 4),
             helper.make_node("Concat", ["c0", "c1"], ["block"], axis=1),
             helper.make_node("BatchNormalization", ["block", "gamma", "beta", "mean", "var"], ["bn"], epsilon=1.001e-5),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["c2"], pads=[taps // 2] * 4),
             helper.make_node("Concat", ["block", "c2"], ["out"], axis=1)]
    inits = [_weights("w0", c, 3, 3, 3, seed=1), _weights("w1", c, 3, 3, 3, seed=2),
             numpy_helper.from_array(rng.normal(1, 0.2, 2 * c).astype("float32"), "gamma"),
             numpy_helper.from_array(rng.normal(0, 0.2, 2 * c).astype("float32"), "beta"),
             numpy_helper.from_array(rng.normal(0, 0.5, 2 * c).astype("float32"), "mean"),
             numpy_helper.from_array(rng.uniform(0.5, 2, 2 * c).astype("float32"), "var"),
             _weights("w2", out_channels, 2 * c, taps, taps, seed=3)]
    return _model(nodes, inits, [1, 2 * c + out_channels, SIDE, SIDE])


def _batch_norm_kernels(names: list[str]) -> list[str]:
    return [n for n in names if "multiply_add_relu" in n]


def test_a_preactivation_batch_norm_is_read_through_in_the_3x3_convs_padding(monkeypatch):
    model = _preactivation_cnn(3, out_channels=8)
    names = _kernels(_fused(model))
    monkeypatch.setattr(layout_into_conv, "FUSE_ELEMENTWISE", False)  # (the stem's transposes fused alike)
    before = _kernels(_fused(model))
    assert _batch_norm_kernels(before) == ["fused_multiply_add_relu"], before
    assert [n for n in _batch_norm_kernels(names) if "conv2d" not in n] == [], names
    assert len(_batch_norm_kernels(names)) == 1 and len(names) == len(before) - 1, (names, before)
    monkeypatch.undo()
    x = np.random.default_rng(9).uniform(-1, 1, (1, 3, SIDE, SIDE)).astype("float32")
    fused, apart = _outputs_with_and_without(model, x)
    np.testing.assert_array_equal(fused, apart)
    np.testing.assert_allclose(fused, ort_run(model, {"input": x})[0], rtol=1e-4, atol=1e-4)


def test_an_fp32_1x1_conv_leaves_the_batch_norm_a_kernel_of_its_own():
    """Its copy of the input is no copy (the product reads the map): the batch norm would be computed again
    for every output channel tile."""
    names = _kernels(_fused(_preactivation_cnn(1, out_channels=8)))
    assert "fused_multiply_add_relu" in names and len(_batch_norm_kernels(names)) == 1, names


def _bf16_tasks(model: onnx.ModelProto, path, target) -> dict:
    onnx.save(model, path)
    workload, _ = for_precision(load_workload(str(path)), target, "bf16")
    return {t.name.split("/")[-1]: t for t in workload.for_target(target).tasks()}


@pytest.mark.parametrize("taps", [1, 3])
def test_the_amx_bf16_conv_computes_the_batch_norm_in_its_packing(taps, tmp_path):
    """For an AMX CPU (compiled, not run): the 1x1 and the 3x3 are direct bf16 convs whose packing block
    reads the block's map and the batch norm's scale and shift, no block between."""
    from explorer.ir.tir_walk import blocks
    from explorer.passes.bf16_conv_nhwc import INPUT_NAME

    target = parse_target("cpu:sapphirerapids")
    tasks = _bf16_tasks(_preactivation_cnn(taps), tmp_path / "pre.onnx", target)
    assert "fused_multiply_add_relu" not in tasks, list(tasks)
    name = next(n for n in _batch_norm_kernels(list(tasks)))
    func, choice = default_schedule(tasks[name].mod["main"], target.cpu_spec())
    assert choice.rule == "full" and not choice.fallback_reason, choice
    assert "AMX" in choice.steps[0] and "rounded to bf16 and padded once" in choice.steps[0], choice.steps
    assert [b.name_hint for b in blocks(func)][0] == INPUT_NAME, func.script()
    packing = next(b for b in blocks(func) if b.name_hint == INPUT_NAME)
    assert all(any(r.source.same_as(p) for r in packing.reads) for p in func.params[:3]), (func.params, packing.reads)
    tvm.compile(tvm.IRModule({"main": func}), target=target.tvm())


@NEEDS_AMX
def test_the_bf16_model_computes_what_it_did_with_the_batch_norm_apart(tmp_path, monkeypatch):
    from explorer.models import sample_inputs
    from export.build import build

    path = tmp_path / "pre.onnx"
    onnx.save(_preactivation_cnn(1), path)
    outputs = []
    for fuse in (True, False):
        monkeypatch.setattr(layout_into_conv, "FUSE_ELEMENTWISE", fuse)
        built = build(load_workload(str(path)), host_target(), precision="bf16")
        names = [o.task.name for o in built.outcomes]
        assert any("multiply_add_relu_conv2d" in n for n in names) == fuse, names
        vm = relax.VirtualMachine(built.executable, tvm.cpu())
        x = np.random.default_rng(10).uniform(-1, 1, (1, 3, SIDE, SIDE)).astype("float32")
        out = vm["main"](tvm.runtime.tensor(x), *[tvm.runtime.tensor(v) for v in built.param_values])
        outputs.append((out[0] if not hasattr(out, "numpy") else out).numpy())
    np.testing.assert_array_equal(*outputs)
