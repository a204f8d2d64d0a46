"""The numeric check: a tolerance that scales with the reference's magnitude (relative and
absolute, per dtype), so that tiny-valued outputs are checked as strictly as large ones."""

from __future__ import annotations

import numpy as np
import pytest
from tvm import te

from explorer.kernels.kernel import make_kernel
from explorer.measure import measure
from explorer.measure.verify import compare, tolerances


def _tiny(seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((16, 16)) * 1e-9).astype("float32")


def test_a_perturbed_tiny_valued_output_fails():
    ref = _tiny()
    ok, _, rel, why = compare([ref * np.float32(1.01)], [ref])
    assert not ok and rel == pytest.approx(0.01, rel=1e-3) and "max |ref|" in why
    # the old rule divided by max(1, max|ref|): zeros passed a 1e-4 tolerance
    ok, _, rel, _ = compare([np.zeros_like(ref)], [ref])
    assert not ok and rel == pytest.approx(1.0)


def test_rounding_noise_passes_at_every_magnitude():
    rng = np.random.default_rng(1)
    for scale in (1e-9, 1.0, 1e6):
        ref = (rng.standard_normal((64, 64)) * scale).astype("float32")
        noisy = ref + (rng.standard_normal(ref.shape) * 1e-6 * scale).astype("float32")
        ok, _, rel, why = compare([noisy], [ref])
        assert ok and rel < 1e-4, (scale, why)


def test_zeros_nans_integers_and_shapes():
    z = np.zeros((4, 4), "float32")
    assert compare([z], [z])[0]
    assert not compare([z + np.float32(1e-6)], [z])[0]  # a reference of exact zeros: only denormal noise
    assert compare([z + np.float32(1e-40)], [z])[0]
    nan = np.full((2,), np.nan, "float32")
    assert compare([nan], [nan])[0]
    assert not compare([nan], [np.ones(2, "float32")])[0]
    i = np.arange(6, dtype="int32")
    assert compare([i], [i])[0] and not compare([i + (i == 3)], [i])[0]
    assert tolerances("int8") == (0.0, 0.0) and tolerances("float16")[0] == 1e-2
    assert not compare([np.zeros(3, "float32")], [np.zeros(4, "float32")])[0]


def _scaled_kernel(factor: float):
    """``C = A * 1e-9`` computed by TVM, with a numpy reference that says what it should be."""
    A = te.placeholder((32, 32), "float32", name="A")
    C = te.compute((32, 32), lambda i, j: A[i, j] * factor, name="C")
    func = te.create_prim_func([A, C])
    return make_kernel(func, name="tiny_scale", title="tiny", source="test", spec="tiny", params={},
                       reference=lambda a: [a * np.float32(1e-9)])


def test_measure_refuses_a_kernel_that_computes_the_wrong_tiny_values():
    good = measure(_scaled_kernel(1e-9), isolate=False, repeat=1, min_repeat_s=0.001)
    assert good.ok and good.verified, good.error
    wrong = measure(_scaled_kernel(1.01e-9), isolate=False, repeat=1, min_repeat_s=0.001)
    assert wrong.status == "verify_failed" and wrong.max_rel_error == pytest.approx(0.01, rel=1e-2)
    zero = measure(_scaled_kernel(0.0), isolate=False, repeat=1, min_repeat_s=0.001)
    assert zero.status == "verify_failed"


# Issue 50: the rule is written once (export.verify_bundle, the bundle's run.py) and judges an
# output made by a sigmoid, tanh or softmax by the scale of that function's input.
def _sigmoid(z):
    return (1 / (1 + np.exp(-np.asarray(z, np.float64)))).astype("float32")


def _ort_like(values, seed=0):
    """``values`` off by up to 1.2e-7 in absolute terms, as ONNX Runtime's sigmoid is (1 float32 step of 1.0)."""
    noise = np.random.default_rng(seed).uniform(-1.2e-7, 1.2e-7, values.shape)
    return np.clip(values + noise, 0, 1).astype("float32")


def test_a_sigmoid_of_very_negative_logits_is_judged_by_the_scale_of_its_logits():
    from export.verify_bundle import compare_outputs

    z = np.random.default_rng(2).uniform(-17, -7, (2, 1, 40, 40))  # a text detector's logits
    exact, ref = _sigmoid(z), _ort_like(_sigmoid(z))
    plain = compare_outputs([exact], [ref])
    assert not plain["verified"] and "max |ref|" in plain["why"]  # 1e-4 of values up to 9e-4: 9e-8
    judged = compare_outputs([exact], [ref], activations=["Sigmoid"])
    assert judged["verified"], judged["why"]
    worst = judged["worst"]
    assert worst["output"] == 0 and len(worst["index"]) == 4 and worst["error"] <= worst["allowed"]
    at = tuple(worst["index"])
    assert worst["got"] == float(exact[at]) and worst["expected"] == float(ref[at])
    assert "Sigmoid" in worst["rule"] and "steps of 1.0" in worst["rule"]
    # a reference flushed to 0 where the logits are below -18 (ONNX Runtime does) still agrees
    deep = np.full((4,), -30.0)
    assert compare_outputs([_sigmoid(deep)], [np.zeros(4, "float32")], activations=["Sigmoid"])["verified"]


@pytest.mark.parametrize("shift", [0.02, 0.5, "zeros", "one element"])
def test_a_real_difference_behind_a_sigmoid_still_fails(shift):
    """Logits off by 0.02 (2e-3 of their scale: a kernel that drops or repeats a term), or an output
    of zeros, is far beyond what the sigmoid's slope and its absolute accuracy allow."""
    from export.verify_bundle import compare_outputs

    z = np.random.default_rng(3).uniform(-12, -8, (8, 64))
    ref = _ort_like(_sigmoid(z))
    if shift == "zeros":
        got = np.zeros_like(ref)
    elif shift == "one element":  # the largest value alone, its logit wrong by 0.02
        z[5, 7] = z.max()
        ref = _ort_like(_sigmoid(z))
        moved = z.copy()
        moved[5, 7] += 0.02
        got = _sigmoid(moved)
    else:
        got = _sigmoid(z + shift)
    check = compare_outputs([got], [ref], activations=["Sigmoid"])
    assert not check["verified"] and "differs from the reference at" in check["why"]
    assert check["worst"]["error"] > check["worst"]["allowed"]
    if shift == "one element":
        assert check["worst"]["index"] == [5, 7]


def test_tanh_and_softmax_outputs():
    from export.verify_bundle import compare_outputs

    rng = np.random.default_rng(4)
    logits = rng.standard_normal((3, 1000)) * 4
    p = np.exp(logits - logits.max(1, keepdims=True))
    p = (p / p.sum(1, keepdims=True)).astype("float32")
    rounded = (p * (1 + rng.uniform(-3e-7, 3e-7, p.shape))).astype("float32")
    assert compare_outputs([rounded], [p], activations=["Softmax"])["verified"]
    wrong = logits.copy()
    wrong[1, wrong[1].argmax()] += 0.05  # the class that matters, its logit off by 0.05 (4e-3 of their scale)
    q = np.exp(wrong - wrong.max(1, keepdims=True))
    q = (q / q.sum(1, keepdims=True)).astype("float32")
    assert not compare_outputs([q], [p], activations=["Softmax"])["verified"]
    t = np.tanh(rng.uniform(-20, 20, 500)).astype("float32")
    assert compare_outputs([t], [t], activations=["Tanh"])["verified"]
    assert not compare_outputs([np.tanh(np.arctanh(np.clip(t, -0.99, 0.99)) + 0.01).astype("float32")],
                               [np.clip(t, -0.99, 0.99)], activations=["Tanh"])["verified"]


@pytest.mark.parametrize("shape", [(), (1,), (3, 4), (1, 2, 3, 4, 5)])
def test_outputs_of_every_rank_compare(shape):
    """A 0-d output (a score) compared as one element: ``diff[...] = 0`` on a numpy scalar raised
    TypeError in the bundle's run.py."""
    from export.verify_bundle import compare_outputs

    ref = np.asarray(np.random.default_rng(5).standard_normal(shape), "float32")
    same = compare_outputs([ref.copy()], [ref])
    assert same["verified"] and len(same["worst"]["index"]) == len(shape)
    bad = ref.copy()
    bad.reshape(-1)[-1] += np.float32(0.5)
    last = [int(i) for i in np.unravel_index(ref.size - 1, shape)]
    wrong = compare_outputs([bad], [ref])
    assert not wrong["verified"] and wrong["worst"]["index"] == last and f"at {tuple(last)}" in wrong["why"]
    assert compare([ref.copy()], [ref])[0] and not compare([bad], [ref])[0]


def test_one_rule_for_kernels_and_bundles():
    """explorer.measure.verify.compare is the bundle's rule, not a restatement of it."""
    import inspect

    from explorer.measure import verify

    assert "compare_outputs" in inspect.getsource(verify.compare)
    assert not hasattr(verify, "within")


def test_the_manifest_names_the_non_linearity_that_makes_each_output():
    from onnx import TensorProto, helper

    from export.verify import output_activations

    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Reshape", ["s", "shape"], ["a"]),
             helper.make_node("Softmax", ["x"], ["p"]), helper.make_node("Transpose", ["p"], ["b"]),
             helper.make_node("Relu", ["x"], ["c"]), helper.make_node("Tanh", ["x"], ["t"]),
             helper.make_node("Mul", ["x", "t"], ["d"])]  # x * tanh(x) is not a tanh's output
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("a", "b", "c", "d", "x")]
    graph = helper.make_graph(nodes, "heads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])], info)
    assert output_activations(helper.make_model(graph)) == ["Sigmoid", "Softmax", None, None, None]


def _distances(points: np.ndarray, rounding: float = 0.0) -> np.ndarray:
    """``cdist`` as exported: the square root of ``|a|^2 + |b|^2 - 2 a.b``, its squares off by up to
    ``rounding`` float32 steps of their own scale (another order of summing, fused multiply-adds)."""
    p = points.astype(np.float64)
    sq = (p * p).sum(1)
    scale = sq[:, None] + sq[None, :]
    d2 = scale - 2 * p @ p.T
    noise = np.random.default_rng(1).uniform(-1, 1, d2.shape) * rounding * 2.0 ** -23 * scale
    return np.sqrt(np.maximum(d2 + noise, 0)).astype("float32")


def test_a_square_root_of_distances_is_judged_by_the_scale_of_the_squares():
    """A point's distance to itself is the square root of a cancellation: two correct implementations
    that sum in another order differ by up to the square root of the squares' rounding there (the
    k-NN layer's ``node_sqrt`` read 1.4e-4 of its scale in the layer check). Judged as the Sqrt of its
    input it agrees; the longest distance off by 1e-2 still fails, in the outputs' check and
    in the layer check's rule alike, and so do zero distances made 0.1 or 0.2 (the allowance there is
    the square root of the squares' rounding, 2.8e-3 of the largest distance, not of 1e-4 of them)."""
    from export.layers import _explained_by_its_input
    from export.verify_bundle import compare_outputs

    points = np.random.default_rng(0).normal(size=(512, 3)).astype("float32") * 4
    ref, got = _distances(points), _distances(points, rounding=4)
    assert np.abs(got - ref).max() > 1e-4 * np.abs(ref).max()  # past the plain rule near the zero distances
    assert not compare_outputs([got], [ref])["verified"]
    judged = compare_outputs([got], [ref], activations=["Sqrt"])
    assert judged["verified"], judged["why"]
    assert _explained_by_its_input(got, ref, "Sqrt", 1e-4) and not _explained_by_its_input(got, ref, "Relu", 1e-4)
    for at, by in ((np.argmax(ref), 1e-2), (0, 0.2), (5 * 513, 0.1)):  # the longest distance; zero distances
        wrong = ref.copy()
        wrong.reshape(-1)[at] += by
        assert not compare_outputs([wrong], [ref], activations=["Sqrt"])["verified"], (at, by)
        assert not _explained_by_its_input(wrong, ref, "Sqrt", 1e-4), (at, by)


def _knn_onnx(path, n: int = 512) -> str:
    """A k-NN layer's distances as torch.onnx writes ``cdist``, then the 16 nearest: the square root of
    ``|a|^2 + |b|^2 - 2 a.b`` (clamped at 0), a TopK of it."""
    from onnx import TensorProto, helper, numpy_helper

    two = numpy_helper.from_array(np.array(2.0, "float32"), "two")
    zero = numpy_helper.from_array(np.array(0.0, "float32"), "zero")
    axes = numpy_helper.from_array(np.array([1], "int64"), "axes")
    k = numpy_helper.from_array(np.array([16], "int64"), "k")
    nodes = [helper.make_node("Mul", ["x", "x"], ["xx"]), helper.make_node("ReduceSum", ["xx", "axes"], ["sq"], keepdims=1),
             helper.make_node("Transpose", ["x"], ["xt"]), helper.make_node("MatMul", ["x", "xt"], ["g"]),
             helper.make_node("Mul", ["g", "two"], ["g2"]), helper.make_node("Transpose", ["sq"], ["sqt"]),
             helper.make_node("Add", ["sq", "sqt"], ["s"]), helper.make_node("Sub", ["s", "g2"], ["d2"]),
             helper.make_node("Max", ["d2", "zero"], ["d2p"]), helper.make_node("Sqrt", ["d2p"], ["d"]),
             helper.make_node("TopK", ["d", "k"], ["values", "indices"], largest=0)]
    graph = helper.make_graph(nodes, "knn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 3])],
                              [helper.make_tensor_value_info("values", TensorProto.FLOAT, [n, 16]),
                               helper.make_tensor_value_info("indices", TensorProto.INT64, [n, 16])],
                              [two, zero, axes, k])
    import onnx

    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


@pytest.mark.heavy
def test_the_layer_check_judges_distances_and_their_nearest_by_the_squares(tmp_path):
    """The square root of distances and the TopK that selects from them: where TVM and ONNX Runtime
    round the squares differently near a point's zero distance to itself, the layers agree as the
    Sqrt of an input at the squares' scale (the TopK's values are the Sqrt's); the indices agree
    exactly. The k-NN layer of the outside set read NOT VERIFIED at node_sqrt before."""
    import onnx

    from export.layers import compare_layers

    model = onnx.load(_knn_onnx(tmp_path / "knn.onnx"))
    x = np.random.default_rng(0).normal(size=(512, 3)).astype("float32") * 4
    report = compare_layers(model, {"x": x})
    assert report.error == "" and all(r.ok for r in report.layers), [r for r in report.layers if not r.ok]
    past_plain = {r.output for r in report.layers if r.max_rel_error > 1e-4}  # what the plain rule refused
    assert past_plain == {"d", "values"}, past_plain
