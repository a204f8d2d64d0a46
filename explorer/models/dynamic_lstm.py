"""ONNX Runtime's ``DynamicQuantizeLSTM`` (``com.microsoft``) as a standard LSTM.

``onnxruntime.quantization.quantize_dynamic`` turns every LSTM into a ``DynamicQuantizeLSTM``:
its weights W and R are int8 (or uint8) constants with a scale and zero point per direction (or
per output column), stored transposed against ONNX's LSTM (``[directions, input, 4*hidden]``),
and the inputs are quantized on the fly. TVM's importer knows neither; the weights are constants,
so they are dequantized here (``(w - zero_point) * scale``, transposed to ONNX's layout) and the
node becomes an LSTM with the same attributes, which :mod:`explorer.models.recurrent` unrolls.
The result computes in float where ONNX Runtime computes the matrix products in int8: the
outputs differ by the quantization of the activations (a few steps of it), the weights are the
quantized ones exactly.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from explorer.models.onnx_rewrite import Emitter, GraphView, replace_nodes
from explorer.models.recurrent import RecurrentLayerError

OP = "DynamicQuantizeLSTM"
DOMAIN = "com.microsoft"


def _dequantize(em: Emitter, node: onnx.NodeProto, k_w: int, k_scale: int, k_zero: int, label: str) -> str:
    view = em.view
    name = node.name or node.output[0]
    w, scale = view.constant(node.input[k_w]), view.constant(node.input[k_scale])
    zero = view.constant(node.input[k_zero]) if len(node.input) > k_zero and node.input[k_zero] else None
    if w is None or scale is None or (len(node.input) > k_zero and node.input[k_zero] and zero is None):
        raise RecurrentLayerError(OP, name, f"its {label} weights, scale or zero point are computed at run time; "
                                            "only constant weights are supported")
    dirs = w.shape[0]
    per = (dirs, 1, -1)  # one value per direction, or one per output column
    scale = np.asarray(scale, np.float32).reshape(per)
    zero = np.zeros_like(scale) if zero is None else np.asarray(zero, np.float32).reshape(per)
    floats = (w.astype(np.float32) - zero) * scale  # [directions, input or hidden, 4*hidden]
    return em.const(np.ascontiguousarray(floats.transpose(0, 2, 1)), f"{label}_dequantized")


def _rewrite(node: onnx.NodeProto, view: GraphView) -> Emitter | None:
    if node.op_type != OP or node.domain != DOMAIN:
        return None
    em = Emitter(view, node.name or node.output[0])
    w = _dequantize(em, node, 1, 8, 9, "W")
    r = _dequantize(em, node, 2, 10, 11, "R")
    inputs = [node.input[0], w, r, *list(node.input[3:8])]
    while inputs and not inputs[-1]:
        inputs.pop()
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    em.nodes.append(helper.make_node("LSTM", inputs, list(node.output), name=em.fresh("LSTM"), **attrs))
    return em


def has_dynamic_lstm(model: onnx.ModelProto) -> bool:
    return any(n.op_type == OP and n.domain == DOMAIN for n in model.graph.node)


def dequantize_dynamic_lstm(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` with every DynamicQuantizeLSTM an LSTM of dequantized weights, and a note."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    count = replace_nodes(out, _rewrite)
    if not count:
        return out, []
    return out, [f"{count} {OP} layer(s) (ONNX Runtime's dynamic quantization) computed as float LSTMs of their "
                 "dequantized int8 weights"]


__all__ = ["dequantize_dynamic_lstm", "has_dynamic_lstm"]
