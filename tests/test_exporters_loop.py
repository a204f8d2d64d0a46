"""Scripted PyTorch's ``Loop`` nodes (``torch.jit.script``: a ``for`` loop over a tensor's length
or over a number read from an input, a ``while`` loop): unrolled once ``--shapes`` fixes the trip
count, the recurrent layer in the body then rewritten like any other, and the result agrees with
ONNX Runtime; a trip count still unknown, or a condition computed from the data, is refused
naming the node, what decides it, the exporter and the fix (every Loop was refused before)."""

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


def test_a_while_loop_is_refused_naming_its_condition():
    model = _scripted(_While(), (torch.randn(2, 3),), ["x"])
    with pytest.raises(UnsupportedOperatorError) as err:
        import_onnx(model, "x:2x3")
    assert "'Loop'" in str(err.value) and "computed from the data in each turn" in str(err.value)
