"""Weights stored in the layout their kernel reads, computed once at build time: which arguments
are weights (``schedx.weight_buffers``), the default tiling's packing marked as a layout rewrite, the export
folding it into the parameters, and the register tile chosen for weights that leave L1."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax, topi

from explorer.ir.relax_walk import iter_bindings, prim_funcs
from explorer.schedule.defaults import CpuSpec, default_schedule
from explorer.target import host_target, parse_target
from explorer.ir.tir_walk import LAYOUT_REWRITE_PREPROC, blocks
from explorer.workload import load_kernel, load_workload
from explorer.passes.weight_buffers import WEIGHTS_ATTR, constant_arguments, mark_weights, weight_positions
from tests.kernel_cases import matmul_model

AVX2 = CpuSpec(vector_bits=256, registers=16, cores=2, arch="x86_64")
AVX512 = CpuSpec(vector_bits=512, registers=32, cores=2, arch="x86_64")
# small_cnn packs a weight for AVX2's 32-wide tiles (64 channels); AVX-512's 64-wide tiles span the
# row and leave it in place (tests/test_isa_decisions.py checks each target). Built, never run here.
AVX2_TARGET = "cpu:x86-64-v3"


@pytest.fixture(scope="module")
def small_cnn():
    return load_workload("small_cnn")


@pytest.fixture(scope="module")
def prepared(small_cnn):
    from export.build import prepare

    return prepare(small_cnn, parse_target(AVX2_TARGET))


def _adds(second_constant: bool) -> tvm.IRModule:
    """``main`` calls one ``add`` PrimFunc twice: with a constant, then with a variable or a constant."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4,), "float32"))
    with bb.function("main", [x]):
        a = bb.emit_te(topi.add, x, relax.const(np.ones(4, "float32")))
        b = bb.emit_te(topi.add, a, relax.const(np.full(4, 2, "float32")) if second_constant else x)
        bb.emit_func_output(b)
    return bb.get()


def test_the_fused_models_kernels_know_their_weights_and_keep_their_names(small_cnn):
    mod = small_cnn.fused_module()
    funcs = prim_funcs(mod)
    convs = {n: f for n, f in funcs.items() if n.startswith("fused_conv2d")}
    assert convs
    for name, func in convs.items():
        free = weight_positions(func)
        assert 0 not in free and 1 in free, (name, free)  # the weights are, the activation is not
        assert "layout_free_buffers" not in func.attrs  # MetaSchedule's RewriteLayout stays off (see weight_buffers)  # the activation is not a weight; the weights are
    assert {f for t in small_cnn.tasks() for f in t.funcs} <= set(funcs)  # no renamed task


@pytest.mark.parametrize("second_constant, expected", [(True, {"add": (1,)}), (False, {})])
def test_an_argument_is_a_weight_only_when_every_call_passes_a_constant(second_constant, expected):
    mod = _adds(second_constant)
    assert len(prim_funcs(mod)) == 1  # one PrimFunc, called twice
    assert constant_arguments(mod) == expected
    marked = mark_weights(mod)["add"].attrs
    assert (WEIGHTS_ATTR in (marked or {})) is bool(expected)


def test_a_kernel_whose_weights_are_an_input_is_packed_on_every_call():
    """A matmul of two activations: its copy into panels is not a layout rewrite (never folded)."""
    func, choice = default_schedule(load_kernel("matmul:M=16,N=1024,K=256").func, AVX2)
    assert "weights packed in panels" in choice.steps[0]
    assert not any(LAYOUT_REWRITE_PREPROC in b.annotations for b in blocks(func))


def test_a_weight_is_packed_once_at_build_time_into_a_parameter(small_cnn, prepared):
    names = {gv.name_hint for gv in prepared.mod.functions}
    assert prepared.packed >= 1
    assert not any(n.endswith(("_weight_prepack", "_prepacked")) for n in names), names
    assert {f for t in small_cnn.tasks() for f in t.funcs} <= names  # kernels keep their task names
    for func in prim_funcs(prepared.mod).values():
        assert not any(LAYOUT_REWRITE_PREPROC in b.annotations for b in blocks(func))
    packed = [(spec, value) for spec, value in zip(prepared.params, prepared.values) if len(spec.shape) == 5]
    assert packed, [p.shape for p in prepared.params]
    originals = [c.value.numpy() for b in iter_bindings(small_cnn.fused_module()["main"])
                 for c in getattr(b.value, "args", [])[1:2] for c in getattr(c, "fields", []) if hasattr(c, "value")]
    for spec, value in packed:  # panels P[o // w, kh, kw, i, o % w] of an HWIO weight
        assert spec.source == "folded" or spec.source.startswith("packed:")
        panels, kh, kw, ci, width = value.shape
        unpacked = value.transpose(1, 2, 3, 0, 4).reshape(kh, kw, ci, panels * width)
        assert any(o.shape == unpacked.shape and np.array_equal(o, unpacked) for o in originals)


def test_model_params_are_the_parameters_the_export_takes(small_cnn, prepared):
    from export.build import model_params

    specs, values = model_params(small_cnn, parse_target(AVX2_TARGET))
    assert specs == prepared.params
    assert all(np.array_equal(a, b) for a, b in zip(values, prepared.values))


def test_the_model_with_packed_weights_computes_what_onnx_runtime_computes(small_cnn):
    from explorer.models import sample_inputs
    from explorer.workload.reference import ort_session
    from export.build import build

    built = build(small_cnn, host_target())
    assert built.seconds["weights"] >= 0
    vm = relax.VirtualMachine(built.executable, tvm.cpu())
    inputs = sample_inputs("small_cnn")
    out = vm["main"](*[tvm.runtime.tensor(v) for v in inputs.values()],
                     *[tvm.runtime.tensor(v) for v in built.param_values])
    out = out[0] if not hasattr(out, "numpy") else out
    expected = ort_session(small_cnn.onnx_model).run(None, inputs)[0]
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cpu, tile", [(AVX2, "5x16"), (AVX512, "7x32")], ids=["avx2", "avx512"])
def test_weights_that_leave_l1_are_used_for_several_rows(cpu, tile):
    """ResNet-18's last 3x3 conv (7 output columns, 9.4 MB of weights): one row per tile read every
    weight from L2 for a single multiply-add (1x64 tiles: 45-55 GFLOPS in the model, 7x8: 87-89).
    On AVX2 the 7 columns go 5 in a tile of 12 accumulators and the last 2 in a tile of their own:
    every tile spans several rows."""
    kernel = load_kernel("conv2d_nhwc:N=1,C=512,H=7,W=7,K=512,R=3,S=3,stride=1,pad=1")
    _, choice = default_schedule(kernel.func, cpu)
    assert f"register tile {tile} " in choice.steps[0], choice.steps
    assert "the last 1 " not in choice.steps[0], choice.steps


def test_short_reductions_take_one_broadcast_for_more_vectors_on_avx2():
    """A tie between 4x16 and 2x32 (both 8 accumulators) goes to 2x32 on AVX2, where each row costs
    a broadcast instruction (matmul 1024: 148 against 131 GFLOPS on a Zen 3), and to more rows on
    AVX-512, whose FMAs broadcast for free. A 1x1 conv over 16 channels is too short a reduction
    for a tail of rows (see test_defaults), so the tie decides."""
    conv = load_kernel("conv2d_nhwc:N=1,C=16,H=112,W=112,K=96,R=1,S=1,stride=1,pad=0").func
    _, choice = default_schedule(conv, AVX2)
    assert "register tile 2x32 " in choice.steps[0], choice.steps
    assert AVX2.broadcast_costs and not AVX512.broadcast_costs
    assert not CpuSpec(vector_bits=128, registers=32, cores=4, arch="aarch64").broadcast_costs
    _, choice = default_schedule(conv, AVX512)
    assert "register tile 7x32 " in choice.steps[0], choice.steps


def test_a_packed_initializer_is_named_after_it_and_the_model_still_computes_right(tmp_path):
    from explorer.workload.reference import ort_session
    from export.build import build, model_params

    model, weight = matmul_model(tmp_path / "mm.onnx")
    workload = load_workload(str(tmp_path / "mm.onnx"))
    built = build(workload, host_target())
    (spec, value), = [(p, v) for p, v in zip(built.params, built.param_values)]
    assert spec.name == "W_packed" and spec.source == "packed:W", spec
    panels, k, width = value.shape
    assert k == 256 and panels * width == 1024
    np.testing.assert_array_equal(value.transpose(1, 0, 2).reshape(256, 1024), weight)
    specs, _ = model_params(workload)
    assert specs == built.params
    x = np.random.default_rng(1).standard_normal((16, 256)).astype("float32")
    vm = relax.VirtualMachine(built.executable, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(value))
    out = out[0] if not hasattr(out, "numpy") else out
    np.testing.assert_allclose(out.numpy(), ort_session(model).run(None, {"x": x})[0], rtol=1e-4, atol=1e-3)


def test_a_weight_two_kernels_pack_alike_is_packed_and_stored_once(tmp_path):
    """Two MatMuls by the same initializer: one packed parameter."""
    import onnx
    from onnx import helper

    model, _ = matmul_model(tmp_path / "mm.onnx")
    graph = model.graph
    graph.node.append(helper.make_node("Relu", ["y"], ["r"]))
    graph.node.append(helper.make_node("MatMul", ["r2", "W"], ["z"]))
    graph.node.insert(2, helper.make_node("Slice", ["r", "starts", "ends", "axes"], ["r2"]))
    graph.initializer.extend([onnx.numpy_helper.from_array(np.array(v, "int64"), n)
                              for n, v in (("starts", [0]), ("ends", [256]), ("axes", [1]))])
    graph.output[0].CopyFrom(helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [16, 1024]))
    onnx.save(model, tmp_path / "mm2.onnx")
    from export.build import prepare

    prepared = prepare(load_workload(str(tmp_path / "mm2.onnx")), host_target())
    packed = [p for p in prepared.params if p.source == "packed:W"]
    assert len(packed) == 1, prepared.params
    assert prepared.packed == 2  # both kernels' packing computed, one parameter kept


def _packing_task(workload, cpu: CpuSpec = AVX2):
    """The task of ``workload`` whose default schedule for ``cpu`` packs its weights."""
    for task in workload.tasks():
        _, choice = default_schedule(task.mod["main"], cpu)
        if "weights packed in panels" in " ".join(choice.steps):
            return task
    raise AssertionError(f"no task of {workload.name} packs its weights for {cpu}")


def test_a_model_kernel_that_packs_is_verified_whole_and_timed_without_the_packing(tmp_path):
    """As the search times it and the export runs it: the timed module takes the weight packed.
    The MatMul by a 1024-wide initializer packs for any vector width (its row is wider than a tile)."""
    from explorer.kernels.kernel import make_kernel
    from explorer.measure import measure
    from explorer.measure.run import without_layout_rewrites

    matmul_model(tmp_path / "mm.onnx")
    task = _packing_task(load_workload(str(tmp_path / "mm.onnx")), _host_cpu())
    func, _ = default_schedule(task.mod["main"], _host_cpu())
    timed = without_layout_rewrites(tvm.IRModule({"main": func}))
    assert timed is not None
    assert [tuple(p.shape) for p in timed["main"].params] != [tuple(p.shape) for p in func.params]
    kernel = make_kernel(task.mod["main"], name=task.name, title=task.name, source="model:mm", spec=task.name,
                         params={})
    result = measure(kernel, tvm.IRModule({"main": func}), repeat=1, min_repeat_s=0.0)
    assert result.status == "ok" and result.verified, result.error


@pytest.mark.slow  # a whole search on a CNN task: ~30 s (make test-slow)
def test_a_search_on_a_task_whose_default_packs_its_weights_runs_to_the_end(small_cnn, tmp_path):
    """The default candidate (its trace packs the weight) is measured, then evolved from: with
    TVM's layout_free_buffers on the task, MetaSchedule's RewriteLayout raised and ended the search."""
    from search.job_spec import ValidJob
    from search.params import SearchParams
    from search.tune import tune
    from store import Store

    matmul_model(tmp_path / "mm.onnx")
    task = _packing_task(load_workload(str(tmp_path / "mm.onnx")), _host_cpu())
    with Store(tmp_path / "s.db") as store:
        summary = tune(ValidJob.of_tasks([task], "cpu", source="mm"), store, SearchParams(trials=16, per_batch=8))
        assert summary.trials >= 8
        assert store.records(source="default") and store.records(source="search")


def _host_cpu() -> CpuSpec:
    return host_target().cpu_spec()


def test_a_kernel_opened_from_fusetir_on_the_passes_page_is_the_models_task():
    """The pipeline ends with MarkWeightBuffers: a kernel opened after FuseTIR is still the task the
    search and the export know (same key), not a kernel of its own."""
    from app.cache import RunKey, graph_kernel, pipeline_run
    from explorer.passes.pipelines import TASK_PIPELINE
    from explorer.workload import workload_key

    key = RunKey(model="small_cnn", shapes="", pipeline=TASK_PIPELINE, passes=())
    run = pipeline_run(key)
    fuse_tir = max(s.index for s in run.snapshots if s.name == "FuseTIR")
    task = _packing_task(load_workload("small_cnn"))
    name = task.name.split("/", 1)[1]
    kernel = graph_kernel(key, fuse_tir, name)
    assert kernel.name == task.name
    assert workload_key(kernel.func) == task.key


def _logits_model(path, rows=32, width=1000):
    """One MatMul of ``rows`` tokens by a 128 x ``width`` initializer ``W`` (GPT-2's logits)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(2).standard_normal((128, width)).astype("float32")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "logits",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, 128])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, width])],
                              [numpy_helper.from_array(weight, "W")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return weight


@pytest.mark.parametrize("spec, padded", [("cpu:x86-64-v4", True), ("cpu:x86-64-v3", False),
                                          ("aarch64:cortex-a76", False)])
def test_weights_padded_to_whole_vectors_are_padded_once_at_build_time(tmp_path, spec, padded):
    """1000 columns are 62.5 AVX-512 vectors: the weights are padded to 1008 columns, at build time
    (the padded copy is a layout rewrite: 0.5 MB copied on every call before); AVX2's and NEON's
    vectors divide 1000 and nothing is padded."""
    from export.build import prepare

    weight = _logits_model(tmp_path / "logits.onnx")
    prepared = prepare(load_workload(str(tmp_path / "logits.onnx")), parse_target(spec))
    (param, value), = zip(prepared.params, prepared.values)
    if value.ndim == 3:  # in panels (AVX2: 8 wide)
        value = value.transpose(1, 0, 2).reshape(128, -1)
    assert value.shape == ((128, 1008) if padded else (128, 1000)), (param, value.shape)
    np.testing.assert_array_equal(value[:, :1000], weight)
    if padded:
        assert param.source == "packed:W" and not value[:, 1000:].any()
        kernel = next(f for n, f in prim_funcs(prepared.mod).items() if "matmul" in n)
        assert not any(LAYOUT_REWRITE_PREPROC in b.annotations for b in blocks(kernel))  # no copy per call


def test_a_model_with_weights_padded_at_build_time_computes_the_product(tmp_path):
    from export.build import build

    weight = _logits_model(tmp_path / "logits.onnx")
    built = build(load_workload(str(tmp_path / "logits.onnx")), host_target())
    x = np.random.default_rng(3).standard_normal((32, 128)).astype("float32")
    vm = relax.VirtualMachine(built.executable, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x), *(tvm.runtime.tensor(v) for v in built.param_values))
    out = out[0] if not hasattr(out, "numpy") else out
    np.testing.assert_allclose(out.numpy(), x @ weight, rtol=1e-4, atol=1e-3)
