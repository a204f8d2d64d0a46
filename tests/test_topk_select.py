"""TopKBySelection: a TopK with a small k runs on a CPU as a kernel that keeps each row's k best by
insertion, rows in parallel, and computes what ONNX's TopK (and ONNX Runtime) computes: values
sorted best first, equal values by the lower index, NaN above every number; any axis, float and
integer tensors. A large k, a symbolic shape and a CUDA build keep TVM's dispatch to its sort."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

from explorer.ir.tir_walk import walk
from explorer.passes.topk_select import MAX_K, TopKBySelection

_CPU = tvm.target.Target({"kind": "llvm"})


def _topk_module(shape, element_dtype: str, **attrs) -> tvm.IRModule:
    x = relax.Var("x", relax.TensorType(shape, element_dtype))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.topk(x, **attrs))
        bb.emit_func_output(out)
    return bb.get()


def _ops(mod: tvm.IRModule) -> list[str]:
    found: list[str] = []
    relax.analysis.post_order_visit(
        mod["main"], lambda e: found.append(e.op.name) if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op)
        else None)
    return found


def _selected(mod: tvm.IRModule, target=_CPU) -> tvm.IRModule:
    with target:
        return TopKBySelection(mod)


def _run(mod: tvm.IRModule, x: np.ndarray):
    vm = relax.VirtualMachine(tvm.compile(mod, target=_CPU), tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x))
    return [out.numpy()] if isinstance(out, tvm.runtime.Tensor) else [o.numpy() for o in out]


def _expected(x: np.ndarray, axis: int, k: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """numpy's stable argsort: equal values keep their order, the lower index first."""
    order = np.argsort(-x.astype("int64") if largest and x.dtype.kind in "iu" else (-x if largest else x),
                       axis=axis, kind="stable")
    indices = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, indices, axis=axis), indices


@pytest.mark.parametrize("shape, axis, k, dtype, largest, ret_type, index_dtype", [
    ((6, 40), -1, 5, "float32", True, "both", "int64"),  # last axis, ties (few distinct values)
    ((6, 40), 1, 5, "float32", False, "both", "int64"),
    ((7, 9, 5), 1, 3, "float32", True, "values", "int64"),  # a middle axis: read at a stride
    ((8, 6, 2), 0, 4, "int32", False, "indices", "int32"),  # the first axis, int32 indices
    ((33,), 0, 1, "int32", True, "both", "int64"),  # a 1-D input, k = 1
    ((4, 12), -1, 12, "float32", False, "both", "int64"),  # k = n: the whole row sorted
    ((3, 4, 10), -1, 4, "int32", True, "both", "int64"),
    ((5, 20), -1, 3, "float16", False, "both", "int64"),
    ((5, 20), -1, 7, "float64", True, "both", "int64"),
    ((8, 30), 0, 5, "int8", True, "both", "int64"),
    ((8, 30), -1, 6, "uint8", False, "both", "int64"),
])
def test_the_selection_matches_a_stable_sort(shape, axis, k, dtype, largest, ret_type, index_dtype):
    mod = _topk_module(shape, dtype, k=k, axis=axis, ret_type=ret_type, largest=largest, dtype=index_dtype)
    selected = _selected(mod)
    assert "relax.topk" in _ops(mod) and "relax.topk" not in _ops(selected)
    kernels = [f for f in selected.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    assert len(kernels) == 1 and kernels[0].attrs["tirx.is_scheduled"]
    x = np.random.default_rng(0).integers(-3, 4, shape).astype(dtype)  # many equal values
    values, indices = _expected(x, axis, k, largest)
    got = _run(selected, x)
    if ret_type == "both":
        np.testing.assert_array_equal(got[0], values)
        np.testing.assert_array_equal(got[1], indices)
        assert got[1].dtype == np.dtype(index_dtype)
    else:
        np.testing.assert_array_equal(got[0], values if ret_type == "values" else indices)


def _row_loops(mod: tvm.IRModule) -> set:
    kernel = next(f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc))
    return {loop.kind for loop in walk(kernel.body) if isinstance(loop, tvm.tirx.For) and loop.loop_var.name == "r"}


def test_rows_run_in_parallel_where_they_are_many_and_the_selection_matches_a_sort():
    x = np.random.default_rng(1).standard_normal((256, 160)).astype("float32")  # random: few enter the k best
    for largest in (True, False):
        selected = _selected(_topk_module(x.shape, "float32", k=16, axis=-1, largest=largest))
        assert _row_loops(selected) == {tvm.tirx.ForKind.PARALLEL}
        got = _run(selected, x)
        values, indices = _expected(x, -1, 16, largest)
        np.testing.assert_array_equal(got[1], indices)
        np.testing.assert_array_equal(got[0], values)
    few = _selected(_topk_module((16, 8), "float32", k=2, axis=-1))  # a router's top-2 of 8: one thread
    assert _row_loops(few) == {tvm.tirx.ForKind.SERIAL}


def _onnx_topk(shape, k: int, axis: int, largest: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=axis, largest=largest)], "topk",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("values", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("indices", TensorProto.INT64, None)],
        [numpy_helper.from_array(np.array([k], "int64"), "k")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("largest", [True, False])
def test_nan_is_ordered_as_onnx_runtime_orders_it(largest):
    """ONNX Runtime puts NaN (of either sign) above every number (+inf too): first among the largest,
    last among the smallest, NaNs by index; -0.0 equals 0.0."""
    import onnxruntime as ort

    inf, nan = np.inf, np.nan
    x = np.array([[nan, 1, 2, 3, 4, 5, 6, 7],
                  [1, 2, nan, 3, 4, nan, 0, 7],
                  [5, 5, 5, nan, 5, inf, 5, 5],
                  [nan, nan, nan, nan, nan, 1, nan, nan],
                  [-inf, 2, 2, 1, 1, 0, nan, -inf],
                  [0, -0.0, 1, -0.0, 0, -1, -0.0, 0],
                  [3, -nan, 1, nan, -inf, inf, -nan, 2]], "float32")
    assert np.signbit(x[6, 1]) and np.signbit(x[5, 1])  # a negative NaN (x86's default one), a negative zero
    session = ort.InferenceSession(_onnx_topk(x.shape, 4, -1, int(largest)).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    want_values, want_indices = session.run(None, {"x": x})
    got = _run(_selected(_topk_module(x.shape, "float32", k=4, axis=-1, largest=largest)), x)
    np.testing.assert_array_equal(got[1], want_indices)
    np.testing.assert_array_equal(got[0], want_values)  # (NaN equals NaN here)


def test_a_large_k_a_symbolic_shape_and_a_cuda_target_keep_the_sort():
    large = _topk_module((4, 200), "float32", k=MAX_K + 1, axis=-1)
    assert _selected(large).same_as(large)
    n = tvm.tirx.Var("n", "int64")
    symbolic = _topk_module((n, 64), "float32", k=4, axis=-1)
    assert _selected(symbolic).same_as(symbolic)
    small = _topk_module((4, 200), "float32", k=MAX_K, axis=-1)
    assert not _selected(small).same_as(small)
    cuda = tvm.target.Target({"kind": "cuda", "arch": "sm_80"}, host={"kind": "llvm"})
    assert _selected(small, cuda).same_as(small)  # a device build: TVM's GPU sort


@pytest.mark.parametrize("spec", ["cpu:haswell", "cpu:sapphirerapids", "aarch64"])
def test_every_cpu_target_gets_the_selection_and_builds_it(spec):
    """Compile only: the kernel is scalar code, the same decision for every CPU."""
    from explorer.target import parse_target

    target = parse_target(spec).tvm()
    mod = _topk_module((16, 100), "float32", k=8, axis=-1, largest=False)
    selected = _selected(mod, target)
    assert "relax.topk" not in _ops(selected)
    tvm.compile(selected, target=target)


def _knn(path, points: int = 96, k: int = 8) -> str:
    """A k-nearest-neighbours layer's shape: features (a product by a constant large enough to be packed
    at build time), squared distances between the points, the k nearest of each (smallest), and a
    largest-first TopK along the first axis."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.1, (256, 128)).astype("float32"), "w"),
             numpy_helper.from_array(np.array([k], "int64"), "k"),
             numpy_helper.from_array(np.array([3], "int64"), "k3")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["f"]),
             helper.make_node("Transpose", ["f"], ["ft"], perm=[1, 0]),
             helper.make_node("MatMul", ["f", "ft"], ["g"]),
             helper.make_node("Neg", ["g"], ["d"]),
             helper.make_node("TopK", ["d", "k"], ["near", "near_idx"], axis=-1, largest=0),
             helper.make_node("TopK", ["f", "k3"], ["top", "top_idx"], axis=0, largest=1)]
    outputs = [helper.make_tensor_value_info(name, elem, None) for name, elem in
               [("near", TensorProto.FLOAT), ("near_idx", TensorProto.INT64), ("top", TensorProto.FLOAT),
                ("top_idx", TensorProto.INT64)]]
    graph = helper.make_graph(nodes, "knn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [points, 256])],
                              outputs, inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


def test_a_model_s_topk_is_a_scheduled_task_the_default_schedules_leave_alone(tmp_path):
    from explorer.target import host_target
    from explorer.workload import load_workload

    workload = load_workload(_knn(tmp_path / "knn.onnx"))
    names = [t.name.split("/")[-1] for t in workload.tasks()]
    assert sum(n.startswith("topk_select") for n in names) == 2 and "topk" not in names, names
    target = host_target()
    mod = workload.fused_module()
    scheduled, _, _ = target.apply_default_schedules(mod, target.tvm())
    for gv, func in mod.functions.items():
        if gv.name_hint.startswith("topk_select"):
            assert scheduled[gv.name_hint].same_as(func)


@pytest.mark.heavy
def test_a_model_with_topk_exports_with_packed_weights_and_matches_onnx_runtime(tmp_path):
    from export import export_workload
    from export.build import prepare
    from explorer.target import host_target
    from explorer.workload import load_workload

    workload = load_workload(_knn(tmp_path / "knn.onnx"))
    assert prepare(workload, host_target()).packed >= 1  # the features' weights are packed at build time
    report = export_workload(workload, "cpu", tmp_path / "bundle", layers=False)
    assert report.ok and report.verified, report.verdict


@pytest.mark.heavy
def test_a_cuda_build_keeps_the_gpu_sort(tmp_path):
    """Compiled only (no GPU here): the CUDA task pipeline leaves the TopK to TVM's GPU kernels, all
    thread-bound."""
    from export import export_workload
    from explorer.target import parse_target
    from explorer.workload import load_workload

    workload = load_workload(_knn(tmp_path / "knn.onnx"))
    names = [t.name.split("/")[-1] for t in workload.for_target(parse_target("cuda:sm_80")).tasks()]
    assert not any(n.startswith("topk_select") for n in names) and any(n.startswith("topk") for n in names), names
    report = export_workload(workload, "cuda:sm_80", tmp_path / "b", layers=False, nvcc=False)
    assert report.ok and report.cuda.unbound == () and report.cuda.missing_kernels == (), report.cuda.summary()
