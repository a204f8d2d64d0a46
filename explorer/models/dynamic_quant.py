"""ONNX Runtime's dynamic quantization (``quantize_dynamic``) in operators TVM imports.

``onnxruntime.quantization.quantize_dynamic`` stores weights as 8-bit integers and quantizes
activations at run time: ``DynamicQuantizeLinear`` computes an activation's uint8 scale and zero
point from its range, ``ConvInteger`` and ``MatMulInteger`` multiply the 8-bit values into int32
sums, and ``Cast``/``Mul`` nodes the quantizer writes after them scale the sums back to float
(``DynamicQuantizeLSTM`` is :mod:`explorer.models.dynamic_lstm`'s). A model saved after ONNX
Runtime's graph optimizations has ``com.microsoft`` ``DynamicQuantizeMatMul`` and
``MatMulIntegerToFloat`` instead, the same steps fused. TVM 0.27's importer has none of them;
each becomes standard operators with the same values:

- ``DynamicQuantizeLinear`` by its formula, as ONNX Runtime computes it: the range
  ``[min(x, 0), max(x, 0)]``, ``scale = range / 255`` (1 when the range is empty),
  ``zero_point = round(clip(-min / scale, 0, 255))`` and ``y = clip(round(x / scale) + zero_point,
  0, 255)``, rounding half to even on both sides;
- ``ConvInteger`` / ``MatMulInteger`` as a float Conv / MatMul of ``x - x_zero_point`` and the
  weights minus their zero points (a float constant when the weights are constants, per output
  channel or column where the zero points are), then ``Cast`` to int32 as the graph expects.
  The 8-bit operands are exact in float32; the sums are exact below 2**24 and otherwise differ
  from the integer sums in float32's last place, far below a quantization step. Float kernels
  are what TVM schedules and vectorizes here (an int32 convolution would get no tuned schedule);
- the two fused forms as the same steps, then the scales and the bias.

Each integer tensor so computed has a float twin of the same values (the quantized activation
before its cast to uint8, an int32 sum before its cast to int32, the quantizer's int32 bias
``Cast(Floor(b / scale))`` and the sum of the two): the next rewritten operator reads the twin,
and the quantizer's ``Cast`` of a sum back to float becomes an ``Identity`` of it, so the casts
to 8 and 32 bits (which TVM legalizes with NaN, range and modulo checks: ddddocr's CRNN took
345 s to generate code with them, 8 s without, and its output moved 1.9% from ONNX Runtime's,
0.7% without) are left only where something else reads the integers.

The quantized activations are therefore those ONNX Runtime computes, up to a value that falls on
a rounding boundary in one and not the other (``x / scale`` computed in a different order); such
a value moves one quantization step. :func:`is_dynamically_quantized` tells the export flow to
compare such a model at the tolerance of dynamic quantization.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from explorer.models.dynamic_lstm import has_dynamic_lstm
from explorer.models.onnx_rewrite import Emitter, GraphView, replace_nodes

OPS = ("DynamicQuantizeLinear", "ConvInteger", "MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat")
_CONTRIB = "com.microsoft"


_MOVES = frozenset({"Reshape", "Unsqueeze", "Squeeze", "Flatten", "Transpose", "Identity"})


class _Rewriter:
    """The rewrites of one model, with the float twins of the integer tensors made so far."""

    def __init__(self) -> None:
        self.twins: dict[str, str] = {}  # integer tensor -> float tensor of the same values
        self.casts: set[str] = set()  # integer tensors that may go once their twins are read instead
        self.whole: set[str] = set()  # float tensors of whole numbers (Floor, Round, Ceil outputs)
        self.types: dict[str, int] = {}  # the integer type of each tensor with a twin

    def __call__(self, node: onnx.NodeProto, view: GraphView) -> Emitter | None:
        if not node.output:
            return None
        if node.domain == _CONTRIB and node.op_type in _CONTRIB_REWRITES:
            em = Emitter(view, node.name or f"{node.op_type}_{node.output[0]}")
            _CONTRIB_REWRITES[node.op_type](node, em, self)
            return em
        if node.domain not in ("", "ai.onnx"):
            return None
        if node.op_type in ("Floor", "Round", "Ceil"):
            self.whole.add(node.output[0])
        if node.op_type == "Cast" and node.input and node.input[0] in self.twins and _to(node) == TensorProto.FLOAT:
            em = Emitter(view, node.name or f"Cast_{node.output[0]}")
            em.op("Identity", [self.twins[node.input[0]]], out=node.output[0])
            return em
        if node.op_type == "Cast" and node.input and node.input[0] in self.whole and _to(node) == TensorProto.INT32:
            self.twins[node.output[0]] = node.input[0]  # the quantizer's int32 bias: Cast(Floor(b / scale))
            self.types[node.output[0]] = TensorProto.INT32
            self.casts.add(node.output[0])
            return None
        if node.op_type in _MOVES and node.input and node.input[0] in self.twins and len(node.output) == 1:
            em = Emitter(view, node.name or f"{node.op_type}_{node.output[0]}")  # (the bias reshaped)
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            moved = em.op(node.op_type, [self.twins[node.input[0]], *node.input[1:]], **attrs)
            self.integer(em, moved, self.types[node.input[0]], node.output[0])
            return em
        if node.op_type == "Add" and len(node.input) == 2 and all(self.types.get(i) == TensorProto.INT32
                                                                  for i in node.input):
            em = Emitter(view, node.name or f"Add_{node.output[0]}")  # an int32 sum plus its int32 bias
            self.integer(em, em.op("Add", [self.twins[i] for i in node.input]), TensorProto.INT32, node.output[0])
            return em
        fn = _REWRITES.get(node.op_type)
        if fn is None:
            return None
        em = Emitter(view, node.name or f"{node.op_type}_{node.output[0]}")
        fn(node, em, self)
        return em

    def integer(self, em: Emitter, value: str, to: int, out: str) -> None:
        """``out`` = ``value`` cast to the integer type ``to``, with ``value`` as its twin."""
        em.op("Cast", [value], to=to, out=out)
        self.twins[out] = value
        self.types[out] = to
        self.casts.add(out)

    def as_float(self, em: Emitter, name: str, hint: str) -> str:
        return self.twins.get(name) or em.op("Cast", [name], to=TensorProto.FLOAT, hint=hint)


def _to(node: onnx.NodeProto) -> int | None:
    return next((a.i for a in node.attribute if a.name == "to"), None)


def _centred(em: Emitter, rw: _Rewriter, x: str, zero: str, *, axis_shape: tuple[int, ...] | None = None) -> str:
    """``float(x) - float(zero)``, folded into one constant when both are constants. A zero point
    with one value per row of a matrix is reshaped to broadcast over its rows (``axis_shape``)."""
    view = em.view
    value, z = view.constant(x), view.constant(zero) if zero else None
    if value is not None and (z is not None or not zero):
        z = np.zeros((), np.float32) if z is None else z.astype(np.float32)
        if axis_shape is not None and z.size > 1:
            z = z.reshape(axis_shape)
        return em.const((value.astype(np.float32) - z).astype(np.float32), "dequantized")
    xf = rw.as_float(em, x, "as_float")
    if not zero:
        return xf
    zf = rw.as_float(em, zero, "zero_point")
    if axis_shape is not None and (z is None or z.size > 1):
        zf = em.reshape(zf, axis_shape)
    return em.op("Sub", [xf, zf])


def _quantized(em: Emitter, x: str, scale_out: str = "") -> tuple[str, str, str]:
    """``x`` quantized to uint8 as DynamicQuantizeLinear does: the values (as floats), the zero
    point (a float) and the scale (named ``scale_out`` when given)."""
    f = lambda v, hint: em.const(np.array(v, np.float32), hint)
    reduce = {"keepdims": 0}
    lo = em.op("Min", [em.op("ReduceMin", [x], **reduce), f(0.0, "zero")])
    hi = em.op("Max", [em.op("ReduceMax", [x], **reduce), f(0.0, "zero")])
    span = em.op("Sub", [hi, lo])
    scale = em.op("Where", [em.op("Equal", [span, f(0.0, "zero")]), f(1.0, "one"),
                            em.op("Div", [span, f(255.0, "qrange")])], out=scale_out or None)
    zero = em.op("Round", [em.op("Clip", [em.op("Neg", [em.op("Div", [lo, scale])]), f(0.0, "qmin"),
                                          f(255.0, "qmax")])])
    q = em.op("Clip", [em.op("Add", [em.op("Round", [em.op("Div", [x, scale])]), zero]), f(0.0, "qmin"),
                       f(255.0, "qmax")])
    return q, zero, scale


def _dynamic_quantize_linear(node: onnx.NodeProto, em: Emitter, rw: _Rewriter) -> None:
    y, y_scale, y_zero = (list(node.output) + ["", "", ""])[:3]
    q, zero, _ = _quantized(em, node.input[0], y_scale)
    if y_zero:
        rw.integer(em, zero, TensorProto.UINT8, y_zero)
    if y:
        rw.integer(em, q, TensorProto.UINT8, y)


def _conv_integer(node: onnx.NodeProto, em: Emitter, rw: _Rewriter) -> None:
    x, w, x_zero, w_zero = (list(node.input) + ["", "", "", ""])[:4]
    w_shape = em.view.shape(w)
    per_channel = (-1,) + (1,) * (len(w_shape) - 1) if w_shape else None
    xf = _centred(em, rw, x, x_zero)
    wf = _centred(em, rw, w, w_zero, axis_shape=per_channel)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    rw.integer(em, em.op("Conv", [xf, wf], **attrs), TensorProto.INT32, node.output[0])


def _matmul_integer(node: onnx.NodeProto, em: Emitter, rw: _Rewriter) -> None:
    a, b, a_zero, b_zero = (list(node.input) + ["", "", "", ""])[:4]
    af = _centred(em, rw, a, a_zero, axis_shape=(-1, 1))  # one zero point per row of A
    bf = _centred(em, rw, b, b_zero)  # one per column of B broadcasts as it is
    rw.integer(em, em.op("MatMul", [af, bf]), TensorProto.INT32, node.output[0])


def _scaled(em: Emitter, product: str, scales: list[str], bias: str, out: str) -> None:
    """``product * scales... (+ bias)`` written to ``out``."""
    y = em.op("Mul", [product, em.op("Mul", scales) if len(scales) == 2 else scales[0]], out=None if bias else out)
    if bias:
        em.op("Add", [y, bias], out=out)


def _dynamic_quantize_matmul(node: onnx.NodeProto, em: Emitter, rw: _Rewriter) -> None:
    """com.microsoft DynamicQuantizeMatMul (what ONNX Runtime's graph optimizer makes of
    DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul): A quantized on the fly, B 8-bit."""
    a, b, b_scale, b_zero, bias = (list(node.input) + [""] * 5)[:5]
    q, zero, a_scale = _quantized(em, a)
    product = em.op("MatMul", [em.op("Sub", [q, zero]), _centred(em, rw, b, b_zero)])
    _scaled(em, product, [a_scale, b_scale], bias, node.output[0])


def _matmul_integer_to_float(node: onnx.NodeProto, em: Emitter, rw: _Rewriter) -> None:
    """com.microsoft MatMulIntegerToFloat: MatMulInteger, then the scales and the bias."""
    a, b, a_scale, b_scale, a_zero, b_zero, bias = (list(node.input) + [""] * 7)[:7]
    product = em.op("MatMul", [_centred(em, rw, a, a_zero, axis_shape=(-1, 1)), _centred(em, rw, b, b_zero)])
    _scaled(em, product, [a_scale, b_scale], bias, node.output[0])


_CONTRIB_REWRITES = {"DynamicQuantizeMatMul": _dynamic_quantize_matmul,
                     "MatMulIntegerToFloat": _matmul_integer_to_float}
_REWRITES = {"DynamicQuantizeLinear": _dynamic_quantize_linear, "ConvInteger": _conv_integer,
             "MatMulInteger": _matmul_integer}


def _drop_unread(graph: onnx.GraphProto, names: set[str]) -> None:
    """Remove the nodes that make only tensors in ``names`` that nothing reads."""
    read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    for sub in (a.g for n in graph.node for a in n.attribute if a.type == onnx.AttributeProto.GRAPH):
        read |= {i for n in sub.node for i in n.input}  # (one level of branches reads outer names)
    keep = [n for n in graph.node if not (n.output and all(o in names and o not in read for o in n.output))]
    if len(keep) == len(graph.node):
        return
    del graph.node[:]
    graph.node.extend(keep)
    made = {o for n in keep for o in n.output}
    infos = [vi for vi in graph.value_info if vi.name in made or vi.name not in names]
    del graph.value_info[:]
    graph.value_info.extend(infos)


def has_dynamic_quantization(model: onnx.ModelProto) -> bool:
    """Whether the main graph holds DynamicQuantizeLinear, ConvInteger or MatMulInteger (or ONNX
    Runtime's fusions of them, DynamicQuantizeMatMul and MatMulIntegerToFloat)."""
    return any((n.op_type in _REWRITES and n.domain in ("", "ai.onnx"))
               or (n.op_type in _CONTRIB_REWRITES and n.domain == _CONTRIB) for n in model.graph.node)


def is_dynamically_quantized(model: onnx.ModelProto) -> bool:
    """Whether ONNX Runtime quantizes some of the model's activations at run time (dynamic
    quantization: the operators above, or a DynamicQuantizeLSTM)."""
    return has_dynamic_quantization(model) or has_dynamic_lstm(model)


def layer_reference(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model ONNX Runtime runs as the reference of a layer-by-layer comparison: ``model`` with
    its DynamicQuantizeLSTMs as the float LSTMs schedx computes (inside such a layer ONNX Runtime
    quantizes the inputs and state at every step, which moves its outputs by several percent: a
    difference of the quantization, not of TVM's kernels)."""
    from explorer.models.dynamic_lstm import dequantize_dynamic_lstm

    return dequantize_dynamic_lstm(model)[0] if has_dynamic_lstm(model) else model


def rewrite_dynamic_quantization(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` with DynamicQuantizeLinear, ConvInteger and MatMulInteger written in standard
    operators (see the module), and a note; a model without them comes back unchanged."""
    if not has_dynamic_quantization(model):
        return model, []
    counts = {op: sum(n.op_type == op and n.domain in ("", "ai.onnx", _CONTRIB) for n in model.graph.node) for op in OPS}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    rewriter = _Rewriter()
    replace_nodes(out, rewriter)
    _drop_unread(out.graph, rewriter.casts)
    listed = ", ".join(f"{n} {op}" for op, n in counts.items() if n)
    return out, [f"ONNX Runtime's dynamic quantization ({listed}) computed by its formula: activations quantized to "
                 "uint8 at run time as ONNX Runtime does, the integer convolutions and matrix products as float32 "
                 "ones of the same 8-bit values"]


__all__ = ["OPS", "has_dynamic_quantization", "is_dynamically_quantized", "layer_reference",
           "rewrite_dynamic_quantization"]
