"""Scripted PyTorch's ``Loop`` nodes (``torch.jit.script``: a ``for`` loop over a tensor's length
or over a number read from an input, a ``while`` loop): unrolled once ``--shapes`` fixes the trip
count, the recurrent layer in the body then rewritten like any other, and the result agrees with
ONNX Runtime; a trip count still unknown, or a condition computed from the data, is refused
naming the node, what decides it, the exporter and the fix; a ``while`` loop (a condition computed
from the data) is kept as a recursive Relax function and agrees with ONNX Runtime however many
turns it takes, unless it has scan outputs (refused, saying so)."""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest

from explorer.errors import UnsupportedOperatorError
from explorer.models import import_onnx
from tests.onnx_cases import ort_run, tvm_run

torch = pytest.importorskip("torch")
nn = torch.nn


class _GruOverTime(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(4, 6)

    def forward(self, x: torch.Tensor, h: torch.Tensor):
        outs = []
        for t in range(x.size(0)):
            y, h = self.gru(x[t:t + 1], h)
            outs.append(y[0])
        return torch.stack(outs), h


class _Steps(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(4, 4)

    def forward(self, x: torch.Tensor, steps: torch.Tensor):
        h = torch.zeros_like(x)
        c = torch.zeros_like(x)
        for _ in range(int(steps)):
            h, c = self.cell(x, (h, c))
            x = torch.tanh(h)
        return x


class _While(nn.Module):
    def forward(self, x: torch.Tensor):
        i = 0
        while bool(x.abs().max() > 1.0) and i < 8:
            x = x * 0.5
            i += 1
        return x


def _scripted(module, args, names, dynamic=None) -> onnx.ModelProto:
    torch.manual_seed(0)
    buf = io.BytesIO()
    torch.onnx.export(torch.jit.script(module.eval()), args, buf, input_names=names, opset_version=17,
                      dynamic_axes=dynamic, dynamo=False)
    return onnx.load_from_string(buf.getvalue())


def _feeds(**shapes) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()}


def test_a_loop_over_the_sequence_unrolls_and_agrees():
    model = _scripted(_GruOverTime(), (torch.randn(5, 1, 4), torch.zeros(1, 1, 6)), ["x", "h0"],
                      {"x": {0: "time"}})
    assert any(n.op_type == "Loop" for n in model.graph.node)
    loaded = import_onnx(model, "x:5x1x4,h0:1x1x6")
    assert any("Loop" in note and "unrolled: 5 turns" in note for note in loaded.info.notes)
    feeds = _feeds(x=(5, 1, 4), h0=(1, 1, 6))
    for got, want in zip(tvm_run(loaded, feeds), ort_run(model, feeds)):
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=1e-5)


def _steps_model() -> onnx.ModelProto:
    return _scripted(_Steps(), (torch.randn(1, 4), torch.tensor(3)), ["x", "steps"])


def test_a_trip_count_read_from_an_input_is_refused_naming_the_input_and_the_exporter():
    with pytest.raises(UnsupportedOperatorError) as err:
        import_onnx(_steps_model(), "x:1x4")
    text = str(err.value)
    assert "'Loop'" in text and "'steps'" in text and "--shapes steps=N" in text and "pytorch" in text


@pytest.mark.slow
def test_a_trip_count_read_from_an_input_unrolls_once_pinned():
    model = _steps_model()
    loaded = import_onnx(model, "x:1x4,steps=3")
    feeds = _feeds(x=(1, 4))
    want = ort_run(model, {**feeds, "steps": np.array(3, np.int64)})[0]
    np.testing.assert_allclose(tvm_run(loaded, feeds)[0].reshape(want.shape), want, rtol=1e-5, atol=1e-5)


def _while_model() -> onnx.ModelProto:
    return _scripted(_While(), (torch.randn(2, 3),), ["x"])


def test_a_while_loop_is_kept_as_a_loop_and_agrees_whatever_its_number_of_turns():
    model = _while_model()
    loaded = import_onnx(model, "x:2x3")
    assert any("kept as a loop" in note for note in loaded.info.notes)
    assert any(gv.name_hint.endswith("_loop") for gv in loaded.mod.get_global_vars())
    rng = np.random.default_rng(0)
    for scale in (0.5, 4.0, 60.0):  # 0, 2 and 6 halvings
        feeds = {"x": (rng.uniform(0.9, 1.0, (2, 3)) * scale).astype(np.float32)}
        np.testing.assert_allclose(tvm_run(loaded, feeds)[0], ort_run(model, feeds)[0], rtol=1e-6)


class _Converge(nn.Module):
    def forward(self, x: torch.Tensor):
        a = x.abs() + 1.0  # Newton's square root of a, until converged
        y = a
        while bool((y * y - a).abs().max() > 1e-4):
            y = 0.5 * (y + a / y)
        return y


def _turns(a: np.ndarray) -> int:
    y, turns = a.copy(), 0
    while np.abs(y * y - a).max() > 1e-4:
        y, turns = np.float32(0.5) * (y + a / y), turns + 1
    return turns


def test_an_iteration_until_converged_exports_and_verifies(tmp_path):
    from app.cli import cli
    from click.testing import CliRunner

    model = _scripted(_Converge(), (torch.rand(2, 3) + 1,), ["x"])
    loaded = import_onnx(model, "x:2x3")
    small, large = np.full((2, 3), 0.2, np.float32), np.full((2, 3), 50.0, np.float32)
    assert _turns(np.abs(small) + 1) != _turns(np.abs(large) + 1)
    for x in (small, large):
        np.testing.assert_allclose(tvm_run(loaded, {"x": x})[0], ort_run(model, {"x": x})[0], rtol=1e-6)
    path = tmp_path / "converge.onnx"
    onnx.save(model, str(path))
    result = CliRunner().invoke(cli, ["export", str(path), "--no-db", "-o", str(tmp_path / "bundle")])
    assert result.exit_code == 0, result.output
    assert "verdict: verified" in result.output


def _loop_with_scan_output() -> onnx.ModelProto:
    """A halving ``while`` loop over x (its condition recomputed from the data) that also stacks
    each turn's value: a scan output, whose length is the number of turns."""
    h = onnx.helper
    f32 = onnx.TensorProto.FLOAT
    one = h.make_tensor("one", f32, [], [1.0])
    half = h.make_tensor("half", f32, [], [0.5])
    body = h.make_graph(
        [h.make_node("Mul", ["v", "half"], ["v2"]), h.make_node("Abs", ["v2"], ["a"]),
         h.make_node("ReduceMax", ["a"], ["m"], keepdims=0), h.make_node("Greater", ["m", "one"], ["c"]),
         h.make_node("Identity", ["v2"], ["scan"])],
        "body",
        [h.make_tensor_value_info("i", onnx.TensorProto.INT64, []), h.make_tensor_value_info("c_in", onnx.TensorProto.BOOL, []),
         h.make_tensor_value_info("v", f32, [3])],
        [h.make_tensor_value_info("c", onnx.TensorProto.BOOL, []), h.make_tensor_value_info("v2", f32, [3]),
         h.make_tensor_value_info("scan", f32, [3])])
    graph = h.make_graph(
        [h.make_node("Abs", ["x"], ["ax"]), h.make_node("ReduceMax", ["ax"], ["mx"], keepdims=0),
         h.make_node("Greater", ["mx", "one"], ["c0"]),
         h.make_node("Loop", ["", "c0", "x"], ["y", "steps"], name="halve", body=body)],
        "scan_loop", [h.make_tensor_value_info("x", f32, [3])],
        [h.make_tensor_value_info("y", f32, [3]), h.make_tensor_value_info("steps", f32, None)],
        initializer=[one, half])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_a_while_loop_with_a_scan_output_is_refused_with_its_reason():
    model = _loop_with_scan_output()
    feeds = {"x": np.array([8.0, 1.0, -3.0], np.float32)}
    assert ort_run(model, feeds)[1].shape == (3, 3)  # the model is valid: three turns, three slices
    with pytest.raises(UnsupportedOperatorError) as err:
        import_onnx(model)
    text = str(err.value)
    assert "'halve'" in text and "computed from the data in each turn" in text and "1 scan output" in text


class _Shrink(nn.Module):
    def forward(self, x: torch.Tensor):
        while bool(x.abs().max() > 1.0):
            x = x * 0.99
        return x


def test_a_kept_loop_past_its_turn_limit_stops_with_an_error_not_a_crash():
    from explorer.models.loop_relax import MAX_KEPT_TURNS

    model = _scripted(_Shrink(), (torch.randn(2, 3),), ["x"])
    loaded = import_onnx(model, "x:2x3")
    near = {"x": np.full((2, 3), 0.99 ** -(MAX_KEPT_TURNS - 10), np.float32)}  # about 990 turns
    np.testing.assert_allclose(tvm_run(loaded, near)[0], ort_run(model, near)[0], rtol=1e-5)
    with pytest.raises(Exception, match=f"ran past {MAX_KEPT_TURNS} turns"):
        tvm_run(loaded, {"x": np.full((2, 3), 1e6, np.float32)})  # about 1375 turns
