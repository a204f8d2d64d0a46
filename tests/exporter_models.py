"""Tiny models written the way other exporters write them, built here (no download): a scripted
PyTorch module with an ``If`` on a 0-d input around two LSTMs (silero-vad's shape), its float16
conversion, and ONNX Runtime's ``quantize_dynamic`` of a small CRNN (ddddocr's)."""

from __future__ import annotations

import io

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def scripted_two_rate(opset: int = 15) -> onnx.ModelProto:
    """``torch.jit.script`` + ``torch.onnx.export`` of a VAD-like module: the audio is padded
    (scripted ``F.pad``: pads computed with ConstantOfShape), framed, then an ``If`` on the 0-d
    int64 input ``sr`` runs one of two LSTMs over a recurrent ``state`` input; a second ``If``
    squeezes a batch of one (it branches on a shape). Inputs ``audio`` [batch, samples],
    ``state`` [2, batch, 16], ``sr``."""
    import torch
    import torch.nn.functional as F

    class TwoRate(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wide = torch.nn.LSTM(8, 16)
            self.narrow = torch.nn.LSTM(8, 16)
            self.head = torch.nn.Linear(16, 1)

        def forward(self, audio, state, sr):
            x = F.pad(audio, [0, 8], mode="reflect").view(-1, 1, 8)
            h, c = state[0:1], state[1:2]
            if bool(sr == 16000):
                y, (h2, c2) = self.wide(x, (h, c))
            else:
                y, (h2, c2) = self.narrow(torch.relu(x), (h, c))
            prob = torch.sigmoid(self.head(y[-1]))
            if prob.size(0) == 1:
                prob = prob.squeeze(0)
            return prob, torch.cat([h2, c2])

    torch.manual_seed(0)
    buf = io.BytesIO()
    torch.onnx.export(torch.jit.script(TwoRate().eval()), (torch.randn(1, 40), torch.zeros(2, 1, 16), torch.tensor(16000)),
                      buf, input_names=["audio", "state", "sr"], output_names=["prob", "stateN"], opset_version=opset,
                      dynamo=False, dynamic_axes={"audio": {0: "batch", 1: "samples"}, "state": {1: "batch"}})
    return onnx.load_from_string(buf.getvalue())


def two_rate_feeds(sr: int | None = 16000, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {"audio": rng.standard_normal((1, 40)).astype("float32"),
             "state": rng.standard_normal((2, 1, 16)).astype("float32")}
    if sr is not None:
        feeds["sr"] = np.array(sr, "int64")
    return feeds


def _half_graph(graph: onnx.GraphProto, keep: frozenset[str]) -> None:
    for init in graph.initializer:
        if init.data_type == TensorProto.FLOAT:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16), init.name))
    for vi in list(graph.value_info) + list(graph.output) + list(graph.input):
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT16
    nodes = []
    for node in graph.node:
        for attr in node.attribute:
            if node.op_type == "Constant" and attr.name == "value" and attr.t.data_type == TensorProto.FLOAT:
                attr.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(attr.t).astype(np.float16), attr.t.name))
            if node.op_type == "Cast" and attr.name == "to" and attr.i == TensorProto.FLOAT:
                attr.i = TensorProto.FLOAT16
            if attr.type == onnx.AttributeProto.GRAPH:
                _half_graph(attr.g, keep)
        if node.op_type not in keep:
            nodes.append(node)
            continue
        for k, name in enumerate(node.input):  # a kept operator computes in float32 between casts
            if name and k != 4:  # (an LSTM's sequence_lens is int32)
                nodes.append(helper.make_node("Cast", [name], [f"{name}_f32_{node.name}"], to=TensorProto.FLOAT))
                node.input[k] = f"{name}_f32_{node.name}"
        outputs = list(node.output)
        node.output[:] = [f"{o}_f32" if o else o for o in outputs]
        nodes.append(node)
        nodes += [helper.make_node("Cast", [f"{o}_f32"], [o], to=TensorProto.FLOAT16) for o in outputs if o]
    del graph.node[:]
    graph.node.extend(nodes)


def _rename_uses(graph: onnx.GraphProto, old: str, new: str) -> None:
    for node in graph.node:
        node.input[:] = [new if n == old else n for n in node.input]
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _rename_uses(attr.g, old, new)


def to_float16(model: onnx.ModelProto, keep: tuple[str, ...] = ("LSTM",)) -> onnx.ModelProto:
    """``model`` in float16 (weights, constants and every operator, in its ``If`` branches too),
    with float32 inputs and outputs, as onnxconverter-common's ``convert_float_to_float16(model,
    keep_io_types=True, op_block_list=keep)`` means to write it (1.16 writes an LSTM inside an
    ``If`` that ONNX Runtime refuses); the operators in ``keep`` stay float32 between casts
    (ONNX Runtime's CPU LSTM has no float16 kernel)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    ins = [i.name for i in graph.input if i.type.tensor_type.elem_type == TensorProto.FLOAT]
    outs = [o.name for o in graph.output if o.type.tensor_type.elem_type == TensorProto.FLOAT]
    _half_graph(graph, frozenset(keep))
    for name in ins:
        _rename_uses(graph, name, f"{name}_fp16")
    for vi in list(graph.input) + list(graph.output):
        if vi.name in ins or vi.name in outs:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT
    for node in graph.node:
        node.output[:] = [f"{o}_fp16" if o in outs else o for o in node.output]
    nodes = ([helper.make_node("Cast", [n], [f"{n}_fp16"], to=TensorProto.FLOAT16) for n in ins] + list(graph.node)
             + [helper.make_node("Cast", [f"{n}_fp16"], [n], to=TensorProto.FLOAT) for n in outs])
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.value_info[:]
    return out


def crnn(opset: int = 17) -> onnx.ModelProto:
    """A small CRNN (two convolutions, a bidirectional LSTM, a linear head) exported by
    ``torch.onnx.export``; input ``image`` [1, 1, 16, 32], output ``logits`` [16, 1, 10]."""
    import torch

    class Crnn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.convs = torch.nn.Sequential(
                torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                torch.nn.Conv2d(8, 16, 3, padding=1, stride=(2, 1)), torch.nn.ReLU())
            self.lstm = torch.nn.LSTM(16 * 4, 24, bidirectional=True)
            self.fc = torch.nn.Linear(48, 10)

        def forward(self, x):
            f = self.convs(x).flatten(1, 2).permute(2, 0, 1)  # [T, 1, 64]
            y, _ = self.lstm(f)
            return self.fc(y)

    torch.manual_seed(0)
    buf = io.BytesIO()
    torch.onnx.export(Crnn().eval(), (torch.randn(1, 1, 16, 32),), buf, input_names=["image"],
                      output_names=["logits"], opset_version=opset, dynamo=False)
    return onnx.load_from_string(buf.getvalue())


def quantized_dynamically(model: onnx.ModelProto, folder, *, per_channel: bool = False,
                          ops: tuple[str, ...] = ("Conv", "MatMul", "Gemm", "LSTM")) -> onnx.ModelProto:
    """ONNX Runtime's ``quantize_dynamic`` of ``model`` (uint8 weights): DynamicQuantizeLinear,
    ConvInteger, MatMulInteger and com.microsoft DynamicQuantizeLSTM."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src, dst = folder / "float.onnx", folder / "dynamic.onnx"
    onnx.save(model, str(src))
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QUInt8, per_channel=per_channel,
                     op_types_to_quantize=list(ops))
    return onnx.load(str(dst))
