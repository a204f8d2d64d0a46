"""Quantized ONNX models: bring them to the QDQ form TVM imports, and say how close is close.

ONNX Runtime's quantizer writes two forms. **QDQ** (its default) keeps float operators and
wraps their inputs and outputs in QuantizeLinear/DequantizeLinear pairs; TVM 0.27 imports those
two operators, so a QDQ model imports as it is. **QOperator** uses fused integer operators
(QLinearConv, QLinearMatMul, and ``com.microsoft`` QGemm) that TVM's importer lacks;
:func:`rewrite_qoperators` writes each as DequantizeLinear -> float op -> QuantizeLinear, which
computes the same values (the fused kernels are defined that way). ``com.microsoft``
Quantize/DequantizeLinear become the standard ones, and so do its contrib element-wise quantized
operators (QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool,
QLinearAveragePool, a last-axis QLinearSoftmax, QLinearConcat: ONNX Runtime
defines each as dequantize, float op, quantize). Other contrib quantized operators (QLinearWhere,
channels-last pools, ...) are refused with a pointer to the QDQ form.

**int8 tolerance.** TVM and ONNX Runtime round every QuantizeLinear the same way (half to
even), but they sum a convolution's products in different orders (ONNX Runtime in integers
inside fused kernels, TVM in float after DequantizeLinear), so a value that falls next to a
rounding boundary can land one quantisation step apart, and such steps add up along a deep
network. (The inference pipeline now computes eligible convolutions and matmuls in integers,
:mod:`explorer.passes.qdq_int8`, which is exact; the rest of the graph still rounds in float.)
Outputs are therefore compared after the final DequantizeLinear, in units of that
output's quantisation step (its scale). Measured here: 0 steps on one-conv and two-matmul nets
(20 inputs), 2 to 4 steps on MobileNetV2 (52 quantized convolutions, 5 inputs), while int8
itself is about 8 steps away from the float model there. :data:`INT8_STEPS` (8) is the default
tolerance for whole models; tests of tiny nets ask for 1.
"""

from __future__ import annotations

import numpy as np
import onnx

from explorer.errors import UnsupportedOperatorError
from explorer.models.onnx_rewrite import Emitter, GraphView, replace_nodes

INT8_STEPS = 8
_CONTRIB = "com.microsoft"


def _const(view: GraphView, name: str) -> np.ndarray | None:
    return view.constant(name) if name else None


def _dequant(em: Emitter, x: str, scale: str, zp: str, axis: int | None) -> str:
    """DequantizeLinear of ``x``; per-axis scales on opsets below 13 (no ``axis`` attribute
    yet) are dequantized here, which needs constant inputs."""
    view = em.view
    s = _const(view, scale)
    per_axis = s is None or s.size > 1
    if not per_axis or view.opset >= 13:
        attrs = {"axis": axis} if per_axis and axis is not None else {}
        return em.op("DequantizeLinear", [x, scale] + ([zp] if zp else []), **attrs)
    value, z = _const(view, x), _const(view, zp)
    if value is None:
        raise UnsupportedOperatorError("DequantizeLinear", x, "per-channel scales on a non-constant tensor need opset 13")
    shape = [1] * value.ndim
    shape[axis] = -1
    z = np.zeros_like(s, dtype=np.int64) if z is None else z.astype(np.int64)
    real = (value.astype(np.int64) - z.reshape(shape)) * s.reshape(shape)
    return em.const(real.astype(np.float32), "dequantized")


def _bias(em: Emitter, b: str, a_scale: str, w_scale: str, axis: int) -> str:
    """An int32 bias quantised with scale ``a_scale * w_scale`` and zero point 0, dequantized."""
    s_a, s_w = _const(em.view, a_scale), _const(em.view, w_scale)
    if em.view.opset < 13 and s_w is not None and s_w.size > 1 and s_a is not None:
        value = _const(em.view, b)
        if value is not None:
            return em.const((value.astype(np.float64) * (s_a * s_w)).astype(np.float32), "bias")
    per_axis = s_w is None or s_w.size > 1
    scale = em.op("Mul", [a_scale, w_scale], hint="bias_scale")
    return em.op("DequantizeLinear", [b, scale], **({"axis": axis} if per_axis else {}))


def _quant(em: Emitter, y: str, scale: str, zp: str, out: str) -> None:
    em.op("QuantizeLinear", [y, scale] + ([zp] if zp else []), out=out)


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _qlinear_conv(node: onnx.NodeProto, em: Emitter) -> None:
    x, xs, xz, w, ws, wz, ys, yz, *rest = list(node.input) + [""] * 9
    xf = _dequant(em, x, xs, xz, None)
    wf = _dequant(em, w, ws, wz, 0)
    inputs = [xf, wf] + ([_bias(em, rest[0], xs, ws, 0)] if rest[0] else [])
    y = em.op("Conv", inputs, **_attrs(node))
    _quant(em, y, ys, yz, node.output[0])


def _qlinear_matmul(node: onnx.NodeProto, em: Emitter) -> None:
    a, a_s, az, b, bs, bz, ys, yz = (list(node.input) + [""] * 8)[:8]
    b_shape = em.view.shape(b)
    af = _dequant(em, a, a_s, az, None)
    bf = _dequant(em, b, bs, bz, (len(b_shape) - 1) if b_shape else 1)
    _quant(em, em.op("MatMul", [af, bf]), ys, yz, node.output[0])


def _qgemm(node: onnx.NodeProto, em: Emitter) -> None:
    a, a_s, az, b, bs, bz, c, ys, yz = (list(node.input) + [""] * 9)[:9]
    attrs = _attrs(node)
    trans_b = int(attrs.get("transB", 0))
    af = _dequant(em, a, a_s, az, None)
    bf = _dequant(em, b, bs, bz, 0 if trans_b else 1)
    gemm_attrs = {k: v for k, v in attrs.items() if k in ("alpha", "transA", "transB")}
    inputs = [af, bf] + ([_bias(em, c, a_s, bs, 0)] if c else [])
    if not ys:
        em.op("Gemm", inputs, out=node.output[0], **gemm_attrs)
        return
    _quant(em, em.op("Gemm", inputs, **gemm_attrs), ys, yz, node.output[0])


def _contrib_qdq(node: onnx.NodeProto, em: Emitter) -> None:
    em.op(node.op_type, list(node.input), out=node.output[0], **_attrs(node))


def _qlinear_binary(float_op: str):
    """``com.microsoft`` QLinearAdd / QLinearMul: (A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp)."""
    def rewrite(node: onnx.NodeProto, em: Emitter) -> None:
        a, a_s, az, b, bs, bz, cs, cz = (list(node.input) + [""] * 8)[:8]
        y = em.op(float_op, [_dequant(em, a, a_s, az, None), _dequant(em, b, bs, bz, None)])
        _quant(em, y, cs, cz, node.output[0])
    return rewrite


def _qlinear_unary(float_op: str, keep: tuple[str, ...] = ()):
    """``com.microsoft`` QLinear ops of one tensor: (X, X_scale, X_zp, Y_scale, Y_zp), the float
    operator given the attributes named in ``keep``."""
    def rewrite(node: onnx.NodeProto, em: Emitter) -> None:
        x, xs, xz, ys, yz = (list(node.input) + [""] * 5)[:5]
        attrs = _attrs(node)
        if attrs.get("channels_last"):
            raise UnsupportedOperatorError(f"{_CONTRIB}.{node.op_type}", node.name or node.output[0],
                                           "channels_last=1 (NHWC) is not rewritten; quantize in QDQ format")
        y = em.op(float_op, [_dequant(em, x, xs, xz, None)], **{k: v for k, v in attrs.items() if k in keep})
        _quant(em, y, ys, yz, node.output[0])
    return rewrite


def _qlinear_softmax(node: onnx.NodeProto, em: Emitter) -> None:
    """QLinearSoftmax (X, X_scale, X_zp, Y_scale, Y_zp; ``axis``, and ``opset``: the Softmax
    semantics, flattening to 2-D below 13). Only a last-axis softmax, where both agree, is taken."""
    x, xs, xz, ys, yz = (list(node.input) + [""] * 5)[:5]
    axis = int(_attrs(node).get("axis", -1))
    rank = em.view.rank(x)
    if axis != -1 and (rank is None or axis != rank - 1):
        raise UnsupportedOperatorError(f"{_CONTRIB}.QLinearSoftmax", node.name or node.output[0],
                                       f"a softmax over axis {axis} that is not the last; quantize in QDQ format")
    _quant(em, em.op("Softmax", [_dequant(em, x, xs, xz, None)], axis=-1), ys, yz, node.output[0])


def _qlinear_concat(node: onnx.NodeProto, em: Emitter) -> None:
    """QLinearConcat (Y_scale, Y_zp, then X, X_scale, X_zp per input; ``axis``)."""
    ys, yz, *rest = list(node.input)
    parts = [_dequant(em, rest[i], rest[i + 1], rest[i + 2], None) for i in range(0, len(rest), 3)]
    _quant(em, em.op("Concat", parts, axis=int(_attrs(node)["axis"])), ys, yz, node.output[0])


_REWRITES = {
    ("", "QLinearConv"): _qlinear_conv,
    ("", "QLinearMatMul"): _qlinear_matmul,
    (_CONTRIB, "QGemm"): _qgemm,
    (_CONTRIB, "QuantizeLinear"): _contrib_qdq,
    (_CONTRIB, "DequantizeLinear"): _contrib_qdq,
    (_CONTRIB, "QLinearAdd"): _qlinear_binary("Add"),
    (_CONTRIB, "QLinearMul"): _qlinear_binary("Mul"),
    (_CONTRIB, "QLinearSigmoid"): _qlinear_unary("Sigmoid"),
    (_CONTRIB, "QLinearLeakyRelu"): _qlinear_unary("LeakyRelu", ("alpha",)),
    (_CONTRIB, "QLinearGlobalAveragePool"): _qlinear_unary("GlobalAveragePool"),
    (_CONTRIB, "QLinearAveragePool"): _qlinear_unary(
        "AveragePool", ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")),
    (_CONTRIB, "QLinearSoftmax"): _qlinear_softmax,
    (_CONTRIB, "QLinearConcat"): _qlinear_concat,
}


def _rewrite(node: onnx.NodeProto, view: GraphView) -> Emitter | None:
    domain = "" if node.domain == "ai.onnx" else node.domain
    fn = _REWRITES.get((domain, node.op_type))
    if fn is None:
        if domain == _CONTRIB and node.op_type.startswith("QLinear"):
            raise UnsupportedOperatorError(
                f"{_CONTRIB}.{node.op_type}", node.name or node.output[0],
                ("ONNX Runtime's QOperator format; quantize the float model in QDQ format instead "
                 "(schedx quantize writes QDQ, as does quantize_static's default)"))
        return None
    em = Emitter(view, node.name or f"{node.op_type}_{node.output[0]}")
    fn(node, em)
    return em


def rewrite_qoperators(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` with QOperator-form quantized operators written as QDQ (see the module), and a
    note when any was; a model without them comes back unchanged."""
    found = [n for n in model.graph.node
             if (("" if n.domain == "ai.onnx" else n.domain), n.op_type) in _REWRITES
             or (n.domain == _CONTRIB and n.op_type.startswith("QLinear"))]
    if not found:
        return model, []
    out = onnx.ModelProto()
    out.CopyFrom(model)
    count = replace_nodes(out, _rewrite)
    note = (f"{count} quantized operator(s) in ONNX Runtime's QOperator form written as "
            "DequantizeLinear -> float op -> QuantizeLinear for TVM")
    return out, [note]


def is_quantized(model: onnx.ModelProto) -> bool:
    """Whether the model holds QuantizeLinear/DequantizeLinear or QOperator nodes."""
    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") or (("" if n.domain == "ai.onnx" else n.domain),
               n.op_type) in _REWRITES for n in model.graph.node)


def output_steps(model: onnx.ModelProto) -> dict[str, float]:
    """The quantisation step (scale) of each graph output made by a DequantizeLinear with one
    constant scale; outputs computed otherwise are left out."""
    view = GraphView(model)
    producers = {n.output[0]: n for n in model.graph.node if n.output}
    steps: dict[str, float] = {}
    for out in model.graph.output:
        node = producers.get(out.name)
        while node is not None and node.op_type in ("Identity", "Flatten", "Reshape", "Squeeze", "Unsqueeze"):
            node = producers.get(node.input[0])
        if node is None or node.op_type != "DequantizeLinear":
            continue
        scale = view.constant(node.input[1])
        if scale is not None and scale.size == 1:
            steps[out.name] = float(scale.reshape(()))
    return steps


def int8_tolerance(model: onnx.ModelProto, steps: float = INT8_STEPS) -> dict[str, float]:
    """Absolute tolerance per graph output of a QDQ model: ``steps`` output quantisation steps
    (see the module docstring for why); outputs without a known step are left out."""
    return {name: steps * step for name, step in output_steps(model).items()}


__all__ = ["INT8_STEPS", "int8_tolerance", "is_quantized", "output_steps", "rewrite_qoperators"]
