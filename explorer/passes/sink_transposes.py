"""``SinkTransposes``: a transpose is moved below the elementwise ops and pools that follow it, until
it meets its inverse and both vanish.

Kernels that compute in NHWC inside a graph that stays NCHW leave a transpose on each side: a
quantized model's int8 convolutions (:mod:`explorer.passes.qdq_int8`) each read
``permute_dims(x, NHWC)`` and return ``permute_dims(y, NCHW)``, and between two of them the graph
quantizes, adds the residual and pools in NCHW. ResNet-18 int8 spent a quarter of its time in a
max-pool over NCHW (stride-2 reads along the rows it vectorizes) and more in the transposes.
ONNX Runtime's transpose optimizer does the same thing for the same reason.

For ``z = op(permute_dims(y, p), ...)``, where ``op`` is elementwise (the other operands constants
or transposed the same way), a pool, a pad whose readers take the transpose further (Keras'
ZeroPadding2D before a pool: its widths follow ``p``; not the pad before an int8 kernel) or a
concatenation of parts all transposed the same way (a U-Net's skip joined to its upsampled map),
``op`` is computed on ``y`` and ``z`` becomes
``permute_dims(op'(y), p)``: the same values. A reduction (``mean``, ``sum``, ``max``, ``min``: a CNN's global
average pool) reduces ``y`` over the axes ``p`` names instead; a transpose left moving only axes of extent 1 (the
pooled ``1 x 1 x 1 x C`` vector) becomes a reshape. Constants are transposed to match, a quantize's
channel axis and a pool's layout follow ``p``. The next op sees a transpose again and the move
repeats; ``permute_dims(permute_dims(y, p), inverse of p)`` is ``y``. Transposes no one reads any
more are dropped (``DeadCodeElimination``).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from explorer.ir.relax_walk import is_constant, iter_bindings, op_name, use_counts

_PERMUTE = "relax.permute_dims"
UNARY_OPS = {f"relax.{n}" for n in ("astype", "nn.relu", "nn.leakyrelu", "sigmoid", "tanh", "exp", "round", "floor",
                                    "ceil", "negative", "sqrt", "clip", "nn.gelu", "nn.silu", "abs")}
_CONCAT = "relax.concat"
BINARY_OPS = {f"relax.{n}" for n in ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power")}
_QDQ = {"relax.quantize": relax.op.quantize, "relax.dequantize": relax.op.dequantize}
_POOLS = {"relax.nn.max_pool2d": relax.op.nn.max_pool2d, "relax.nn.avg_pool2d": relax.op.nn.avg_pool2d,
          "relax.nn.adaptive_avg_pool2d": relax.op.nn.adaptive_avg_pool2d}
_PAD = "relax.nn.pad"
_REDUCTIONS = {f"relax.{n}": getattr(relax.op, n) for n in ("mean", "sum", "max", "min")}
# permute_dims(NHWC value, TO_NCHW) is the NCHW value: a pool over it can run in NHWC instead
TO_NCHW = (0, 3, 1, 2)


def _axes(call: relax.Call, rank: int) -> tuple[int, ...]:
    axes = call.attrs.axes
    return tuple(range(rank - 1, -1, -1)) if axes is None else tuple(int(a) for a in axes)


def _rank(expr) -> int | None:
    ndim = getattr(getattr(expr, "ty", None), "ndim", -1)
    return None if ndim is None or ndim < 0 else int(ndim)


def _onward_pads(mod: tvm.IRModule) -> set:
    """The pad calls whose every reader is an op a transpose moves through (an elementwise op, a pool,
    a pad, a concatenation, a transpose): a transpose moved below such a pad goes on and can cancel;
    below any other (the pad before a quantized conv's int8 kernel, which reads NHWC) it would only
    be moved, onto the larger padded map."""
    onward = UNARY_OPS | BINARY_OPS | set(_POOLS) | set(_REDUCTIONS) | {_PAD, _CONCAT, _PERMUTE}
    pads: set = set()
    for func in mod.functions.values():
        if not isinstance(func, relax.Function):
            continue
        counts = use_counts(func)
        readers: dict = {}
        for b in iter_bindings(func):
            if isinstance(b.value, relax.Call):
                for arg in b.value.args:
                    if isinstance(arg, relax.Var):
                        readers.setdefault(arg, []).append(op_name(b.value))
        pads |= {b.value for b in iter_bindings(func) if isinstance(b.value, relax.Call)
                 and op_name(b.value) == _PAD and counts.get(b.var, 0) > 0
                 and len(readers.get(b.var, [])) == counts[b.var] and set(readers[b.var]) <= onward}
    return pads


def _as_reshape(call: relax.Call) -> relax.Expr:
    """``permute_dims(x, p)`` as a reshape where it moves only axes of extent 1 (the others keep their
    order): the same bytes, and no kernel. Any other call is returned as it is."""
    shape = getattr(getattr(call.args[0], "ty", None), "shape", None)
    if op_name(call) != _PERMUTE or not isinstance(shape, relax.ShapeExpr):
        return call
    shape = shape.values
    if not all(isinstance(d, tvm.tirx.IntImm) for d in shape):
        return call
    perm = _axes(call, len(shape))
    moved = [i for i in perm if int(shape[i]) != 1]
    if moved != sorted(moved):
        return call
    return relax.op.reshape(call.args[0], [int(shape[i]) for i in perm])


@mutator
class _Sinker(PyExprMutator):
    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.moved = 0
        self.onward_pads = _onward_pads(mod)
        self.uses: dict = {}
        for func in mod.functions.values():
            if isinstance(func, relax.Function):
                self.uses.update(use_counts(func))

    def _transposed(self, expr) -> tuple[relax.Expr, tuple[int, ...]] | None:
        """(y, p) when ``expr`` is bound to ``permute_dims(y, p)``."""
        value = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
        if isinstance(value, relax.Call) and op_name(value) == _PERMUTE:
            rank = _rank(value.args[0])
            if rank is not None:
                return value.args[0], _axes(value, rank)
        return None

    def _matching(self, args, perm) -> list | None:
        """``args`` in the transposed domain (each ``y`` or a constant transposed to match), or None."""
        inverse = tuple(int(i) for i in np.argsort(perm))
        out = []
        for arg in args:
            t = self._transposed(arg)
            if t is not None and t[1] == perm:
                out.append(t[0])
            elif is_constant(arg):
                value = arg.value.numpy()
                if value.ndim > len(perm):
                    return None
                value = value.reshape((1,) * (len(perm) - value.ndim) + value.shape) if value.ndim else value
                out.append(relax.const(np.ascontiguousarray(value.transpose(inverse)) if value.ndim else value,
                                       str(value.dtype)))
            else:
                return None
        return out

    def _sunk(self, call: relax.Call, perm: tuple[int, ...]) -> relax.Expr | None:
        """``call`` computed before the transpose ``perm``, or None when it cannot be."""
        name = op_name(call)
        if name in UNARY_OPS or name in BINARY_OPS:
            if name in UNARY_OPS and not all(is_constant(a) or isinstance(a, relax.PrimValue) for a in call.args[1:]):
                return None
            first = self._matching(call.args[:1], perm)
            rest = call.args[1:] if name in UNARY_OPS else self._matching(call.args[1:], perm)
            if first is None or rest is None:
                return None
            return relax.Call(call.op, [*first, *rest], call.attrs)
        if name in _QDQ:
            x = self._matching(call.args[:1], perm)
            if x is None or not all(is_constant(a) for a in call.args[1:]):
                return None
            a = call.attrs
            axis = int(a.axis) % len(perm)
            return _QDQ[name](x[0], call.args[1], call.args[2], axis=perm[axis], out_dtype=str(a.out_dtype))
        if name in _POOLS and perm == TO_NCHW and call.attrs.layout == "NCHW" \
                and (call.attrs.out_layout or "NCHW") == "NCHW":
            x = self._matching(call.args[:1], perm)
            if x is None:
                return None
            a = call.attrs
            if name == "relax.nn.adaptive_avg_pool2d":
                return _POOLS[name](x[0], a.output_size, layout="NHWC", out_layout="NHWC")
            return _POOLS[name](x[0], a.pool_size, a.strides, a.padding, a.dilation, bool(a.ceil_mode),
                                bool(a.count_include_pad), layout="NHWC", out_layout="NHWC")
        if name == _PAD:
            x = self._matching(call.args[:1], perm)
            if x is None:
                return None
            a = call.attrs
            widths = [int(w) for w in a.pad_width]  # (before, after) per axis of the transposed value
            inverse = np.argsort(perm)
            moved = [w for axis in range(len(perm)) for w in widths[2 * inverse[axis]:2 * inverse[axis] + 2]]
            return relax.op.nn.pad(x[0], moved, str(a.pad_mode), float(a.pad_value))
        return None

    def _concat(self, call: relax.Call) -> relax.Expr:
        """``concat([permute_dims(y_i, p)], axis)`` as ``permute_dims(concat([y_i], p[axis]), p)`` when
        every part is transposed the same way (a U-Net's skip joined to an upsampled map)."""
        parts = call.args[0]
        if isinstance(parts, relax.Var):
            parts = self.lookup_binding(parts)
        if not isinstance(parts, relax.Tuple) or not parts.fields or call.attrs.axis is None:
            return call
        first = self._transposed(parts.fields[0])
        ys = self._matching(list(parts.fields), first[1]) if first is not None else None
        if ys is None:
            return call
        perm = first[1]
        axis = int(call.attrs.axis) % len(perm)
        self.moved += 1
        joined = self.builder_.emit(relax.op.concat(ys, axis=perm[axis]))
        return relax.op.permute_dims(joined, list(perm))

    def _reduction(self, call: relax.Call) -> relax.Expr:
        """``mean(permute_dims(y, p), axes)`` as the same reduction of ``y`` over the axes ``p`` names:
        the global average pool at a CNN's end reduces the NHWC map over H and W, and what is left to
        transpose is the pooled vector (a reshape when only unit axes move), not the map."""
        t = self._transposed(call.args[0])
        if t is None or call.attrs.axis is None or self.uses.get(call.args[0], 0) != 1:
            return call
        y, perm = t
        axes = sorted({int(a) % len(perm) for a in call.attrs.axis})
        reduced = self.builder_.emit(_REDUCTIONS[op_name(call)](y, [perm[a] for a in axes], bool(call.attrs.keepdims)))
        self.moved += 1
        if call.attrs.keepdims:
            return relax.op.permute_dims(reduced, list(perm))
        kept = [perm[i] for i in range(len(perm)) if i not in axes]  # y's axes left, in the output's order
        order = [sorted(kept).index(a) for a in kept]
        if order == sorted(order):
            return reduced
        return relax.op.permute_dims(reduced, order)

    def visit_call_(self, op):
        call = self.visit_expr_post_order(op)
        if not isinstance(call, relax.Call) or not call.args:
            return call
        if op_name(call) == _PERMUTE:  # a transpose of a transpose: one permutation, or none
            t = self._transposed(call.args[0])
            if t is not None:
                y, inner = t
                outer = _axes(call, len(inner))
                combined = tuple(inner[i] for i in outer)
                self.moved += 1
                if combined == tuple(range(len(combined))):
                    return y
                return relax.op.permute_dims(y, list(combined))
            rank = _rank(call.args[0])
            if rank and _axes(call, rank) == tuple(range(rank)):  # an identity (ConvertLayout leaves them)
                self.moved += 1
                return call.args[0]
            return call
        if op_name(call) in _REDUCTIONS:
            return self._reduction(call)
        if op_name(call) == _CONCAT:
            return self._concat(call)
        t = self._transposed(call.args[0])
        if t is None:
            return call
        if op_name(call) == _PAD and op not in self.onward_pads:
            return call
        sunk = self._sunk(call, t[1])
        if sunk is None:
            return call
        self.moved += 1
        return relax.op.permute_dims(self.builder_.emit(sunk), list(t[1]))


@tvm.transform.module_pass(opt_level=0, name="SinkTransposes")
def SinkTransposes(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """Move transposes below elementwise ops and pools until they cancel (see the module docstring)."""
    sinker = _Sinker(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            sinker.builder_.update_func(gv, sinker.visit_expr(func))
    if not sinker.moved:
        return _reshapes(mod)
    # a pair that cancels leaves an alias (``y = x``), which FuseOps reads as an opaque step: gone
    return _reshapes(relax.transform.CanonicalizeBindings()(relax.transform.DeadCodeElimination()(sinker.builder_.get())))


@mutator
class _Reshaper(PyExprMutator):
    """Every ``permute_dims`` that moves only axes of extent 1, as a reshape."""

    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.changed = 0

    def visit_call_(self, op):
        call = self.visit_expr_post_order(op)
        out = _as_reshape(call) if isinstance(call, relax.Call) and call.args else call
        self.changed += out is not call
        return out


def _reshapes(mod: tvm.IRModule) -> tvm.IRModule:
    """The transposes left after sinking that move only unit axes, as reshapes (views once built). Not
    during the walk: a transpose still to cancel against another (a squeeze-excitation gate's) must stay
    one until then."""
    r = _Reshaper(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            r.builder_.update_func(gv, r.visit_expr(func))
    if not r.changed:
        return mod
    # reshape(reshape(x)) (the pooled vector, then the classifier's flatten) as one: a view, not a copy kernel
    return relax.transform.RemoveRedundantReshape()(r.builder_.get())


__all__ = ["BINARY_OPS", "UNARY_OPS", "SinkTransposes"]
