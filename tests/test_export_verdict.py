"""A verdict a user can trust (issue 50): tiny ONNX models exported end to end. An output of any
rank, 0-d included, is compared; a sigmoid of very negative logits (values near 1e-4, where ONNX
Runtime's sigmoid is off by ~1e-7 in absolute terms) is judged by the scale of its input and
verifies; a kernel broken on purpose still gives NOT VERIFIED, naming the worst element."""

from __future__ import annotations

import numpy as np
import pytest

from export import export_workload, read_manifest
from export.verify import run_in_child

pytestmark = pytest.mark.heavy  # real builds: left out of make test-fast


def _save(tmp_path, name, nodes, inputs, outputs, weights):
    import onnx
    from onnx import helper, numpy_helper

    graph = helper.make_graph(nodes, name, inputs, outputs, [numpy_helper.from_array(v, k) for k, v in weights.items()])
    path = tmp_path / f"{name}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _low_sigmoid(tmp_path):
    """``sigmoid(x @ W - 10)``: a probability map whose values are near 1e-4, as a text detector's."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    weights = {"W": (rng.standard_normal((64, 32)) * 0.05).astype("float32"), "b": np.full(32, -10.0, "float32")}
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "b"], ["z"], name="add"),
             helper.make_node("Sigmoid", ["z"], ["y"], name="sig")]
    return _save(tmp_path, "low_sigmoid", nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])], weights)


def test_a_0d_output_exports_and_verifies(tmp_path):
    """A quality score: ``sigmoid(mean(x @ w))``, a 0-d output. The bundle's comparison failed on it
    (``'numpy.float64' object does not support item assignment``)."""
    from onnx import TensorProto, helper

    weights = {"w": np.linspace(-1, 1, 8).astype("float32")}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("ReduceMean", ["h"], ["m"], name="mean", keepdims=0),
             helper.make_node("Sigmoid", ["m"], ["score"], name="sig")]
    path = _save(tmp_path, "score", nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
                 [helper.make_tensor_value_info("score", TensorProto.FLOAT, [])], weights)
    report = export_workload(str(path), "cpu", tmp_path / "bundle")
    assert report.ok and report.verified, report.verdict
    assert report.verification.worst["index"] == [] and "at ()" in report.verification.summary()
    child = run_in_child(tmp_path / "bundle")
    assert child["outputs"] == [{"shape": [], "dtype": "float32"}]
    assert child["check"]["verified"] and child["check"]["worst"]["index"] == []


def test_a_sigmoid_of_very_negative_logits_verifies_by_the_scale_of_its_input(tmp_path):
    report = export_workload(str(_low_sigmoid(tmp_path)), "cpu", tmp_path / "bundle")
    assert report.ok and report.verified, report.verdict
    # ONNX Runtime's sigmoid is off by ~1e-7 in absolute terms: more than 1e-4 of values near 1e-4
    assert report.verification.max_rel_error > 1e-4
    assert read_manifest(tmp_path / "bundle")["output_activation"] == ["Sigmoid"]
    worst = report.verification.worst
    assert worst["output"] == 0 and len(worst["index"]) == 2 and worst["error"] <= worst["allowed"]
    assert "Sigmoid" in worst["rule"] and "max |ref|" in worst["rule"]
    assert "nearest its bound" in report.verdict and "rule:" in report.verdict
    assert "layer by layer" in report.verdict  # where the error first grows (or that it grows nowhere)
    child = run_in_child(tmp_path / "bundle")  # the bundle's own run.py applies the same rule
    assert child["check"]["verified"] and "Sigmoid" in child["check"]["worst"]["rule"]


def _drop_last_term(func):
    """The fused matmul + add + sigmoid kernel computed with its reduction one term short: what a
    wrong loop bound or a wrong split leaves."""
    from tvm import te

    x, w, b, _ = func.params
    shape = lambda buf: tuple(int(d) for d in buf.shape)  # noqa: E731
    X, W, B = (te.placeholder(shape(p), "float32", name=n) for p, n in ((x, "x"), (w, "w"), (b, "b")))
    k = te.reduce_axis((0, shape(x)[1] - 1), name="k")
    mm = te.compute((shape(x)[0], shape(w)[1]), lambda i, j: te.sum(X[i, k] * W[k, j], axis=k), name="mm")
    out = te.compute(mm.shape, lambda i, j: 1.0 / (1.0 + te.exp(-(mm[i, j] + B[j]))), name="out")
    broken = te.create_prim_func([X, W, B, out])
    for key, value in func.attrs.items():
        broken = broken.with_attr(key, value)
    return broken


def test_a_kernel_broken_on_purpose_is_not_verified(tmp_path, monkeypatch):
    """The sigmoid's rule must not let a real difference through: the same model with its kernel
    one reduction term short (logits off by ~0.05) fails, and the verdict names the element."""
    import export.build as build

    real = build._schedule_tasks

    def broken(mod, tasks, schedules, *rest):
        mod, outcomes = real(mod, tasks, schedules, *rest)
        name = next(gv.name_hint for gv in mod.get_global_vars() if "matmul" in gv.name_hint)
        mod[mod.get_global_var(name)] = _drop_last_term(mod[mod.get_global_var(name)])
        return mod, outcomes

    monkeypatch.setattr(build, "_schedule_tasks", broken)
    report = export_workload(str(_low_sigmoid(tmp_path)), "cpu", tmp_path / "bundle", layers=False)
    assert not report.ok and not report.verified
    assert report.verdict.startswith("NOT VERIFIED: the bundle's outputs failed")
    worst = report.verification.worst
    assert worst["error"] > worst["allowed"] and "differs from the reference at" in report.verdict
    assert f"got {worst['got']:.7g}, expected {worst['expected']:.7g}" in report.verdict
