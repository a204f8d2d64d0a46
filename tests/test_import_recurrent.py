"""LSTM, GRU and RNN rewritten for TVM. Unrolled into plain operators, the rewrite is checked
against ONNX Runtime (ONNX to ONNX, many variants, cheap); as imported (every step of a layer in
one kernel, :mod:`explorer.schedule.defaults.recurrence`), models are built with TVM and checked too."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from explorer.errors import ShapeSpecError
from explorer.models import import_onnx
from explorer.models.recurrent import RecurrentLayerError, rewrite_recurrent
from tests.onnx_cases import ort_run, random_feeds, recurrent, tvm_run

DIRECTIONS = ["forward", "reverse", "bidirectional"]


def _rewritten(model: onnx.ModelProto) -> onnx.ModelProto:
    out, notes = rewrite_recurrent(onnx.shape_inference.infer_shapes(model), sequence_kernels=False)
    assert len(notes) == 1 and "unrolled" in notes[0]
    assert not any(n.op_type in ("LSTM", "GRU", "RNN") for n in out.graph.node)
    return out


def _close(got, want, atol=1e-5):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=atol)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("bias, initial", [(True, True), (False, False)])
def test_rewrite_matches_onnx_runtime(op, direction, bias, initial):
    model = recurrent(op, direction, bias=bias, initial=initial)
    feeds = random_feeds(model)
    _close(ort_run(_rewritten(model), feeds), ort_run(model, feeds))


@pytest.mark.parametrize("op, attrs", [
    ("LSTM", {"peepholes": True}),
    ("LSTM", {"clip": 0.5}),
    ("LSTM", {"activations": ["Sigmoid", "Relu", "Softsign"] * 2}),
    ("GRU", {"linear_before_reset": 1}),
    ("GRU", {"clip": 0.5, "linear_before_reset": 1}),
    ("GRU", {"activations": ["Softsign", "Relu"] * 2}),
    ("RNN", {"activations": ["Relu"] * 2}),
])
def test_rewrite_covers_the_common_variants(op, attrs):
    model = recurrent(op, "bidirectional", **attrs)
    feeds = random_feeds(model)
    _close(ort_run(_rewritten(model), feeds), ort_run(model, feeds))


def test_rewrite_on_an_old_opset_uses_its_operator_forms():
    model = recurrent("LSTM", "forward", opset=9, clip=1.0)
    feeds = random_feeds(model)
    _close(ort_run(_rewritten(model), feeds), ort_run(model, feeds))


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_batch_first_layout_matches_the_time_first_one(op):
    # ONNX Runtime refuses layout=1, so compare with the same weights in layout 0, transposed
    batch_first, time_first = recurrent(op, "bidirectional", layout=1), recurrent(op, "bidirectional")
    feeds = random_feeds(batch_first)
    swapped = {k: np.ascontiguousarray(np.swapaxes(v, 0, 1)) for k, v in feeds.items()}
    want = ort_run(time_first, swapped)
    want = [np.transpose(want[0], (2, 0, 1, 3))] + [np.swapaxes(w, 0, 1) for w in want[1:]]
    _close(ort_run(_rewritten(batch_first), feeds), want)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_imported_into_tvm_and_verified_against_onnx_runtime(op, direction):
    model = recurrent(op, direction)
    loaded = import_onnx(model)
    assert any("every step of a layer in one kernel" in n for n in loaded.info.notes)
    assert any(n.op_type == op for n in loaded.onnx_model.graph.node)  # the reference keeps the layer
    feeds = random_feeds(model)
    _close(tvm_run(loaded, feeds), ort_run(model, feeds))


def test_a_symbolic_sequence_length_needs_shapes():
    model = recurrent("GRU", seq="seq")
    with pytest.raises(ShapeSpecError, match=r"X\[0\] \(seq\)"):
        import_onnx(model)
    with pytest.raises(RecurrentLayerError, match="sequence length is unknown.*--shapes"):
        rewrite_recurrent(model)  # called on its own, before the shapes are fixed
    loaded = import_onnx(model, "seq=5")
    feeds = random_feeds(model, X=[5, 2, 3])
    _close(tvm_run(loaded, feeds), ort_run(model, feeds))


@pytest.mark.parametrize("attrs, words", [
    ({"input_forget": 1}, "input_forget"),
    ({"activations": ["HardSigmoid", "Tanh", "Tanh"], "activation_alpha": [0.3]}, "HardSigmoid"),
    ({"activations": ["Sigmoid", "Tanh"]}, "expected 3 activations"),
])
def test_unsupported_variants_are_named(attrs, words):
    model = recurrent("LSTM", **attrs)
    with pytest.raises(RecurrentLayerError, match=words) as info:
        import_onnx(model)
    assert info.value.node_name == "lstm0" and "LSTM (node 'lstm0')" in str(info.value)


def test_sequence_lens_must_be_the_full_length():
    from onnx import numpy_helper

    model = recurrent("GRU")
    model.graph.initializer.append(numpy_helper.from_array(np.array([3, 2], "int32"), "lens"))
    node = model.graph.node[0]
    assert list(node.input) == ["X", "W", "R", "B", "", "h0"]
    node.input[4] = "lens"
    with pytest.raises(RecurrentLayerError, match="sequence_lens"):
        import_onnx(model)
    model.graph.initializer[-1].CopyFrom(numpy_helper.from_array(np.array([3, 3], "int32"), "lens"))
    feeds = random_feeds(model)
    _close(ort_run(_rewritten(model), feeds), ort_run(model, feeds))


def test_weights_sliced_and_stacked_from_initializers_are_constants():
    """Issue 27: PyTorch exports an LSTM's R as Unsqueeze(Concat(Slice(initializer))) (its gates
    reordered); it was refused as "computed at run time". Made of constants by data-movement ops,
    it is folded with ONNX's reference runtime, and the layer imports and matches ONNX Runtime."""
    from onnx import helper, numpy_helper

    model = recurrent("LSTM", hidden=4)
    graph = model.graph
    r = next(i for i in graph.initializer if i.name == "R")
    value = numpy_helper.to_array(r)[0]  # [4 gates * hidden, hidden]
    graph.initializer.remove(r)
    graph.initializer.append(numpy_helper.from_array(value.copy(), "R_flat"))
    for k, (lo, hi) in enumerate(((0, 8), (8, 16))):
        graph.initializer.extend([numpy_helper.from_array(np.array([lo], "int64"), f"lo{k}"),
                                  numpy_helper.from_array(np.array([hi], "int64"), f"hi{k}")])
    graph.initializer.append(numpy_helper.from_array(np.array([0], "int64"), "axis0"))
    chain = [helper.make_node("Slice", ["R_flat", "lo0", "hi0", "axis0"], ["r_a"]),
             helper.make_node("Slice", ["R_flat", "lo1", "hi1", "axis0"], ["r_b"]),
             helper.make_node("Concat", ["r_a", "r_b"], ["r_cat"], axis=0),
             helper.make_node("Unsqueeze", ["r_cat", "axis0"], ["R"])]
    for n, node in enumerate(chain):
        graph.node.insert(n, node)
    loaded = import_onnx(model)
    feeds = random_feeds(model)
    _close(tvm_run(loaded, feeds), ort_run(model, feeds))


def _kernel_calls(loaded) -> "Counter":
    from collections import Counter

    from tvm import relax

    from explorer.workload.fusion import fused_module

    calls = Counter()
    relax.analysis.post_order_visit(
        fused_module(loaded.mod, "rnn")["main"], lambda e: calls.update([e.args[0].name_hint])
        if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.call_tir" else None)
    return calls


@pytest.mark.parametrize("peepholes", [False, True])
def test_an_unrolled_lstm_step_runs_as_three_kernels(peepholes):
    """Unrolled (``sequence_kernels=False``, as for dtypes the sequence kernel does not cover), a
    step is the recurrence's matrix-vector product and two fused kernels of gates: the new cell
    state for the next step, and the output, which computes that state again rather than share it
    (shared, fusion cut the gates into three kernels: a VM call each). A kernel called once per step
    is one task, whatever the step."""
    model = recurrent("LSTM", "forward", seq=6, peepholes=peepholes)
    loaded = import_onnx(_rewritten(model))
    calls = _kernel_calls(loaded)
    seq = int(model.graph.input[0].type.tensor_type.shape.dim[0].dim_value)
    per_step = sorted(name for name, n in calls.items() if n == seq)
    assert seq == 6 and len(per_step) == 3 and any("matmul" in name for name in per_step), calls
    assert sum(calls.values()) <= 3 * seq + 6, calls
    feeds = random_feeds(model)
    _close(tvm_run(loaded, feeds), ort_run(model, feeds))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_a_layer_is_one_kernel_call_with_its_projection(op):
    """Imported, a bidirectional layer is one matrix product for the input projections of both
    directions and one call of its sequence kernel, whatever the sequence length."""
    model = recurrent(op, "bidirectional", seq=7)
    calls = _kernel_calls(import_onnx(model))
    sequence = [name for name in calls if name.startswith(f"{op.lower()}_sequence")]
    assert len(sequence) == 1 and calls[sequence[0]] == 1, calls
    assert sum(calls.values()) <= 4, calls


@pytest.mark.parametrize("op, direction, attrs", [
    ("LSTM", "bidirectional", {"peepholes": True, "clip": 0.5}),
    ("LSTM", "reverse", {"activations": ["Sigmoid", "Relu", "Softsign"]}),
    ("GRU", "bidirectional", {"linear_before_reset": 1}),
    ("GRU", "reverse", {"clip": 0.5, "activations": ["Softsign", "Relu"]}),
    ("RNN", "bidirectional", {"activations": ["Relu", "Tanh"]}),
    ("LSTM", "bidirectional", {"layout": 1}),
    ("GRU", "forward", {"hidden": 37, "seq": 9}),
])
def test_the_sequence_kernel_covers_the_variants(op, direction, attrs):
    """The sequence kernel against ONNX Runtime's own layer (for layout 1, which ONNX Runtime
    refuses, against the unrolled rewrite: checked against it above)."""
    model = recurrent(op, direction, **attrs)
    feeds = random_feeds(model)
    want = ort_run(model if not attrs.get("layout") else _rewritten(model), feeds)
    _close(tvm_run(import_onnx(model), feeds), want, atol=2e-5)


def test_an_export_names_the_sequence_kernel_written_not_untuned(tmp_path):
    """The export reports the layer's kernel as written by schedx (no record can apply to it), and
    the warning about kernels without records leaves it out."""
    from explorer.workload import load_workload
    from export.build import _schedule_tasks, workload_tasks
    from export.schedules import coverage_warning

    onnx.save(recurrent("GRU", "bidirectional", seq=5), tmp_path / "gru.onnx")
    workload = load_workload(str(tmp_path / "gru.onnx"))
    tasks = workload_tasks(workload)
    _, outcomes = _schedule_tasks(workload.fused_module(), tasks, None)
    written = [o.task.name for o in outcomes if o.schedule == "written"]
    assert len(written) == 1 and "gru_sequence" in written[0]
    assert "gru_sequence" not in coverage_warning(outcomes, "default schedules")
