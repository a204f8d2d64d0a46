"""ONNX Runtime's ``quantize_static`` in QOperator form writes ``com.microsoft`` element-wise
quantized operators (QLinearAdd, QLinearMul, QLinearGlobalAveragePool, QLinearSoftmax...) beside
the standard QLinearConv/QLinearMatMul: a residual CNN and an attention block so quantized import,
compute what ONNX Runtime does, and run in TVM within the int8 tolerance (they were refused,
naming QLinearAdd)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from explorer.models import import_onnx
from explorer.models.qdq import rewrite_qoperators
from tests.onnx_cases import ort_run, tvm_run

torch = pytest.importorskip("torch")
quantization = pytest.importorskip("onnxruntime.quantization")


class _Reader:
    def __init__(self, name: str, shape: tuple[int, ...]):
        rng = np.random.default_rng(0)
        self._it = iter([{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(4)])

    def get_next(self):
        return next(self._it, None)


def _residual_cnn():
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(3, 8, 3, padding=1)
            self.b = nn.Conv2d(8, 8, 3, padding=1)
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            y = torch.relu(self.a(x))
            y = y + self.b(y)  # QLinearAdd
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))  # QLinearGlobalAveragePool

    return Net(), (1, 3, 12, 12)


def _attention():
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(16, 16)
            self.k = nn.Linear(16, 16)

        def forward(self, x):
            scores = torch.matmul(self.q(x), self.k(x).transpose(1, 2)) * 0.25  # QLinearMatMul, QLinearMul
            return torch.matmul(torch.softmax(scores, dim=-1), x)  # QLinearSoftmax

    return Net(), (1, 6, 16)


def _qoperator(make, folder) -> tuple[onnx.ModelProto, tuple[int, ...]]:
    torch.manual_seed(0)
    module, shape = make()
    src, dst = folder / "float.onnx", folder / "q.onnx"
    torch.onnx.export(module.eval(), (torch.randn(*shape),), str(src), input_names=["x"], opset_version=17,
                      dynamo=False)
    quantization.quantize_static(str(src), str(dst), _Reader("x", shape),
                                 quant_format=quantization.QuantFormat.QOperator,
                                 activation_type=quantization.QuantType.QUInt8,
                                 weight_type=quantization.QuantType.QInt8)
    return onnx.load(str(dst)), shape


@pytest.mark.parametrize("make, contrib", [
    (_residual_cnn, {"QLinearAdd", "QLinearGlobalAveragePool"}),
    (_attention, {"QLinearMul", "QLinearSoftmax"}),
], ids=["residual_cnn", "attention"])
def test_qoperator_contrib_ops_import_and_agree(make, contrib, tmp_path):
    model, shape = _qoperator(make, tmp_path)
    written = {n.op_type for n in model.graph.node if n.domain == "com.microsoft"}
    assert contrib <= written  # what ONNX Runtime's quantizer wrote
    rewritten, notes = rewrite_qoperators(model)
    assert notes and not any(n.domain == "com.microsoft" for n in rewritten.graph.node)
    out = model.graph.output[0].name
    step = float(onnx.numpy_helper.to_array(next(
        i for i in model.graph.initializer
        if i.name == next(n for n in model.graph.node if n.output[0] == out).input[1])).reshape(()))
    loaded = import_onnx(model)
    for seed in range(2):
        feeds = {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}
        want = ort_run(model, feeds)[0]
        np.testing.assert_array_equal(ort_run(rewritten, feeds)[0], want)  # the rewrite is exact
        got = tvm_run(loaded, feeds)[0]
        assert np.abs(got - want).max() <= 2 * step + 1e-7  # within two quantisation steps of the output
