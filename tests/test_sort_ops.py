"""Sorting operators (TopK, as a k-nearest-neighbours layer or a mixture of experts' router uses it):
TVM's LegalizeOps has no lowering for topk, sort or argsort, so a model with one failed its build
("CodeGenVM cannot emit this Relax operator directly"). The task pipeline now dispatches them
first (DispatchSortScan: TOPI's CPU kernels), and a model whose other kernels pack their weights
at build time still exports: TVM's split of layout rewrites never sees the sort kernel (an extern
call with no block, which it refused). Two concatenations in one such model no longer share a
global symbol (the dispatch pass re-checks the module)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from explorer.workload import load_workload


def _router(path) -> str:
    """x @ W (a constant large enough to be packed), two concatenations, a top-4 along the last axis."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.1, (256, 128)).astype("float32"), "w"),
             numpy_helper.from_array(np.array([4], "int64"), "k")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Concat", ["h", "x"], ["hx"], axis=1),
             helper.make_node("Concat", ["hx", "h"], ["hxh"], axis=1),
             helper.make_node("TopK", ["hxh", "k"], ["values", "indices"], axis=-1)]
    graph = helper.make_graph(nodes, "router", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 256])],
                              [helper.make_tensor_value_info("values", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("indices", TensorProto.INT64, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


def test_a_topk_becomes_a_kernel_of_its_own(tmp_path):
    tasks = {t.name.split("/")[-1]: t for t in load_workload(_router(tmp_path / "r.onnx")).tasks()}
    names = list(tasks)
    assert "topk_select" in names and sum(n.startswith("concat_by_copies") for n in names) == 2, names
    # written scheduled by its graph pass (explorer.passes.topk_select): nothing for a search, kept by an export
    assert tasks["topk_select"].hand_written and not any(t.hand_written for n, t in tasks.items() if n != "topk_select")


@pytest.mark.heavy
def test_a_model_with_a_topk_and_packed_weights_exports_and_matches_onnx_runtime(tmp_path):
    from export import export_workload
    from export.build import prepare
    from explorer.target import host_target

    workload = load_workload(_router(tmp_path / "r.onnx"))
    assert prepare(workload, host_target()).packed >= 1  # the product's weights are packed at build time
    report = export_workload(workload, "cpu", tmp_path / "bundle", layers=False)
    assert report.ok and report.verified, report.verdict


def test_a_cuda_build_sorts_with_the_gpu_kernel(tmp_path):
    """A CUDA build's task pipeline runs under the CUDA target, so the dispatch lowers the top-k with
    TOPI's GPU sort, thread-bound (the CPU's sort left a kernel no thread was bound to: the CUDA checks
    failed the bundle)."""
    from export import export_workload

    report = export_workload(load_workload(_router(tmp_path / "r.onnx")), "cuda:sm_80", tmp_path / "b",
                             layers=False, nvcc=False)
    assert report.ok and report.cuda.unbound == () and report.cuda.missing_kernels == (), report.cuda.summary()
