"""Requantization as ONNX Runtime's fused integer operators compute it: a multiply, no division.

:mod:`explorer.passes.qdq_int8` leaves a quantized convolution's output as ONNX's QDQ graph
writes it: ``quantize(float(acc - corr) * (s_x s_w) + bias, s_y, z_y)``, whose ``round(x / s_y)``
is a ``vdivps`` per 16 outputs in every kernel's epilogue (40% of the AMX stem was its epilogue,
mostly the division: docs/notes/measurements.md, "AMX-INT8 stem"). ONNX Runtime does not divide
there: it fuses ``DequantizeLinear -> Conv -> QuantizeLinear`` into QLinearConv, which adds the int32
bias to the integer sums and multiplies by one float per channel, ``round(float(acc + b_q) *
(s_x s_w / s_y)) + z_y`` (MLAS's requantize; the multiplier computed in float32 as written), and
``dequantize + dequantize -> Add -> quantize`` into QLinearAdd, ``round(a (s_a / s_y) + b (s_b / s_y)
+ fixed)``. This pass writes those forms, so that the kernels compute what the reference does
(fewer outputs a quantization step apart, not more) with one multiply instead of a multiply, an add
and a division:

    quantize(add(layout(slice(float(acc - corr) * S)), dequantize(b_q, s_b)), s_y, z_y)
        -> layout(slice(quantize(float(acc - (corr - b_q)) * (S / s_y), 1, z_y)))
    quantize(dequantize(a, s_a, z_a) + dequantize(b, s_b, z_b), s_y, z_y)
        -> quantize(float(a) (s_a / s_y) + float(b) (s_b / s_y) + (z_y - ...), 1, 0)
    quantize(max_pool2d(dequantize(x, s, z)), s, z) -> max_pool2d(x)        (exact: the same values)

(``quantize`` with scale 1 legalizes without its division.) A bias that is not an integer multiple
of ``S`` (not ONNX Runtime's int32 bias), a value read twice, or a scale per channel at the
quantize leaves the graph as it was. Runs inside :class:`~explorer.passes.qdq_int8.QDQToInt8Kernels`,
on the kernels it has just written.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from explorer.ir.relax_walk import is_constant, iter_bindings, tensor_info, use_counts

_OP = tvm.ir.Op.get
_QUANTIZE, _DEQUANTIZE, _ADD, _MULTIPLY, _SUBTRACT, _ASTYPE = (
    _OP("relax.quantize"), _OP("relax.dequantize"), _OP("relax.add"), _OP("relax.multiply"), _OP("relax.subtract"),
    _OP("relax.astype"))
_SLICE, _PERMUTE, _RESHAPE, _MAX_POOL = (_OP("relax.strided_slice"), _OP("relax.permute_dims"), _OP("relax.reshape"),
                                         _OP("relax.nn.max_pool2d"))
# a bias this close to a whole number of S (the float32 product s_x s_w) is ONNX Runtime's int32 bias
_INTEGRAL = 1e-3


def _value(expr) -> np.ndarray | None:
    return expr.value.numpy() if is_constant(expr) else None


def _scalar(expr) -> np.ndarray | None:
    value = _value(expr)
    return value.reshape(()) if value is not None and value.size == 1 else None


def _is(call, op) -> bool:
    return isinstance(call, relax.Call) and call.op.same_as(op)


@mutator
class _Requantize(PyExprMutator):
    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.bound: dict = {}
        self.uses: dict = {}
        self.rewritten = 0

    def rewrite(self, func: relax.Function) -> relax.Function:
        self.bound = {b.var: b.value for b in iter_bindings(func)}  # the graph as it was: what patterns match
        self.uses = use_counts(func)
        return self.visit_expr(func)

    def _alias_of(self, expr):
        """What a variable bound to another variable stands for (``lv177 = lv121``), else ``expr``."""
        while isinstance(expr, relax.Var) and isinstance(self.bound.get(expr), relax.Var) and self.uses.get(expr) == 1:
            expr = self.bound[expr]
        return expr

    def _only(self, expr, op):
        """The call ``expr`` is bound to, when it is an ``op`` call read once (by the pattern), else None."""
        expr = self._alias_of(expr)
        call = self.bound.get(expr) if isinstance(expr, relax.Var) else None
        return call if _is(call, op) and self.uses.get(expr, 0) == 1 else None

    def _dequantized(self, expr):
        """``(x, scale, zero point)`` of a per-tensor dequantize ``expr`` is bound to (read anywhere)."""
        call = self.bound.get(expr) if isinstance(expr, relax.Var) else None
        if not _is(call, _DEQUANTIZE):
            return None
        scale, zp = _scalar(call.args[1]), _scalar(call.args[2])
        if scale is None or zp is None or tensor_info(call.args[0].ty)[1] not in ("uint8", "int8"):
            return None
        return call.args[0], np.float32(scale), int(zp)

    def visit_call_(self, op):
        if _is(op, _QUANTIZE):
            so, zo = _scalar(op.args[1]), _scalar(op.args[2])
            if so is not None and zo is not None:
                for rewrite in (self._kernel_output, self._sum, self._pool):
                    new = rewrite(op, np.float32(so), zo)
                    if new is not None:
                        self.rewritten += 1
                        return new
        return self.visit_expr_post_order(op)

    def _quantize(self, x, zero_point, out_dtype: str):
        return relax.op.quantize(x, relax.const(1.0, "float32"), zero_point, axis=-1, out_dtype=out_dtype)

    # -- an int8 kernel's output (+ its int32 bias) -> quantize ------------------------------------
    def _kernel_output(self, op, so: np.float32, zo):
        add = self._only(op.args[0], _ADD)
        value, bias = (add.args[0], add.args[1]) if add is not None else (op.args[0], None)
        if add is not None and self._dequantized(value) is not None:  # the sum of two: _sum's
            return None
        if bias is not None and not self._bias_like(bias):
            value, bias = bias, value
        layout = next((c for c in (self._only(value, _PERMUTE), self._only(value, _RESHAPE)) if c is not None), None)
        inner = layout.args[0] if layout is not None else value
        sliced = self._only(inner, _SLICE)
        multiply = self._only(sliced.args[0] if sliced is not None else inner, _MULTIPLY)
        cast = self._only(multiply.args[0], _ASTYPE) if multiply is not None else None
        subtract = self._only(cast.args[0], _SUBTRACT) if cast is not None else None
        if subtract is None or tensor_info(subtract.args[0].ty)[1] != "int32":
            return None
        scale, corr = _value(multiply.args[1]), _value(subtract.args[1])
        if scale is None or corr is None or scale.ndim != 1 or corr.shape != scale.shape:
            return None
        channel_axis = ([int(a) for a in layout.attrs.axes].index(len(tensor_info(inner.ty)[0]) - 1)
                        if layout is not None and _is(layout, _PERMUTE) else -1)
        bias_q = np.zeros(scale.size, np.int64)
        if bias is not None:
            found = self._integral_bias(bias, scale.astype(np.float32), channel_axis, tensor_info(op.args[0].ty)[0])
            if found is None:
                return None
            bias_q[:found.size] = found
        emit = self.builder_.emit
        with np.errstate(divide="ignore", invalid="ignore"):
            multiplier = scale.astype(np.float32) / so  # float32, as ONNX Runtime computes it
        shifted = corr.astype(np.int64) - bias_q  # the zero point's correction with the bias folded in
        if np.abs(shifted).max(initial=0) >= 2 ** 31:  # (a bias of very many tiny steps: int32 would wrap)
            return None
        acc = self.visit_expr(subtract.args[0])
        y = emit(relax.op.subtract(acc, relax.const(shifted.astype(np.int32))))
        y = emit(relax.op.multiply(relax.op.astype(y, "float32"), relax.const(multiplier.astype(np.float32))))
        y = emit(self._quantize(y, op.args[2], str(op.attrs.out_dtype)))
        if sliced is not None:
            y = emit(relax.Call(sliced.op, [y, *sliced.args[1:]], sliced.attrs))
        return relax.Call(layout.op, [y, *layout.args[1:]], layout.attrs) if layout is not None else y

    def _bias_like(self, expr) -> bool:
        reshape = self.bound.get(expr) if isinstance(expr, relax.Var) else None
        inner = reshape.args[0] if _is(reshape, _RESHAPE) else expr
        return is_constant(inner) or self._dequantized_constant(inner) is not None

    def _dequantized_constant(self, expr) -> np.ndarray | None:
        """The float32 values of ``dequantize(constant)`` (what ONNX Runtime's quantizer writes for a bias)."""
        call = self.bound.get(expr) if isinstance(expr, relax.Var) else None
        if not _is(call, _DEQUANTIZE):
            return None
        q, scale, zp = _value(call.args[0]), _value(call.args[1]), _value(call.args[2])
        if q is None or scale is None or zp is None or q.ndim != 1:
            return None
        return ((q.astype(np.int64) - zp.astype(np.int64)).astype(np.float32) * scale.astype(np.float32)).astype(np.float32)

    def _integral_bias(self, expr, scale: np.ndarray, channel_axis: int, out_shape) -> np.ndarray | None:
        """The bias ``expr`` as whole units of ``scale`` per channel, when it is that (else None)."""
        reshape = self.bound.get(expr) if isinstance(expr, relax.Var) else None
        inner = reshape.args[0] if _is(reshape, _RESHAPE) else expr
        values = _value(inner) if is_constant(inner) else self._dequantized_constant(inner)
        bias_shape = tensor_info(expr.ty)[0]
        if values is None or bias_shape is None or out_shape is None:
            return None
        values = values.reshape(-1)
        channels = out_shape[channel_axis]
        axis = channel_axis % len(out_shape)
        offset = len(out_shape) - len(bias_shape)
        along = [d for i, d in enumerate(bias_shape) if d != 1]
        if values.size != channels or along != [channels] or list(bias_shape).index(channels) + offset != axis:
            return None
        with np.errstate(divide="ignore", invalid="ignore"):  # (a channel of scale 0: not finite, refused)
            ratio = values.astype(np.float64) / scale[:channels].astype(np.float64)
        whole = np.rint(ratio)
        if not np.all(np.isfinite(ratio)) or np.any(np.abs(ratio - whole) > _INTEGRAL):
            return None
        return whole.astype(np.int64)

    # -- dequantize(a) + dequantize(b) -> quantize -------------------------------------------------
    def _sum(self, op, so: np.float32, zo):
        add = self._only(op.args[0], _ADD)
        terms = [self._dequantized(arg) for arg in add.args] if add is not None else [None]
        if any(t is None for t in terms) or (shape := tensor_info(op.args[0].ty)[0]) is None:
            return None
        if any(tensor_info(x.ty)[0] != shape for x, _, _ in terms):  # (no broadcasting here)
            return None
        emit = self.builder_.emit
        ratios = [np.float32(scale / so) for _, scale, _ in terms]
        fixed = np.float32(np.float32(int(zo)) - sum(np.float32(r * z) for r, (_, _, z) in zip(ratios, terms)))
        parts = [emit(relax.op.multiply(relax.op.astype(self.visit_expr(x), "float32"), relax.const(r)))
                 for r, (x, _, _) in zip(ratios, terms)]
        y = emit(relax.op.add(emit(relax.op.add(parts[0], parts[1])), relax.const(fixed)))
        out_dtype = str(op.attrs.out_dtype)
        return self._quantize(y, relax.const(0, out_dtype), out_dtype)

    # -- quantize(max_pool2d(dequantize(x))) at the same scale -> max_pool2d(x) ---------------------
    def _pool(self, op, so: np.float32, zo):
        pool = self._only(op.args[0], _MAX_POOL)
        found = self._dequantized(pool.args[0]) if pool is not None else None
        if found is None:
            return None
        x, scale, zp = found
        if scale != so or zp != int(zo) or tensor_info(x.ty)[1] != str(op.attrs.out_dtype):
            return None
        return relax.Call(pool.op, [self.visit_expr(x)], pool.attrs)


def requantize(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with its int8 kernels' requantization, quantized sums and pools in the forms of the
    module docstring (unchanged where nothing matches)."""
    rewriter = _Requantize(mod)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.rewrite(func))
    if not rewriter.rewritten:
        return mod
    return relax.transform.DeadCodeElimination()(rewriter.builder_.get())


__all__ = ["requantize"]
