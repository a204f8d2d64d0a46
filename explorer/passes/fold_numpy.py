"""``FoldConstantNumpy``: the weight arithmetic of an inference graph evaluated once, with numpy.

Folding batch-norm into convolutions and converting layouts leaves small operators on constants
(``sqrt(var + eps)``, ``weight * scale``, ``permute_dims(weight)``, a quantized model's
``dequantize(bias)``). TVM's ``FoldConstant``
compiles each with LLVM: 29 s for MobileNetV2's 52 convolutions. The operators below are
evaluated here instead, in float32 as TVM would, in milliseconds; anything else is left for
``FoldConstant``. Uses of a variable bound to a folded constant get the constant itself, so
patterns that want a constant (``FoldBatchnormToConv2D``) and parameter lifting see it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator, mutator

from explorer.passes.call_rewrite import visit_functions


def _int_list(values) -> list[int]:
    return [int(v) for v in values]


def _permute(call, x):
    axes = call.attrs.axes
    return np.transpose(x, None if axes is None else _int_list(axes))


def _reshape(call, x, shape):
    return np.reshape(x, shape)


def _expand_dims(call, x):
    return np.expand_dims(x, tuple(_int_list(call.attrs.axis)))


def _broadcast_to(call, x, shape):
    return np.ascontiguousarray(np.broadcast_to(x, shape))


def _squeeze(call, x):
    axis = call.attrs.axis
    return np.squeeze(x) if axis is None else np.squeeze(x, tuple(_int_list(axis)))


def _dequantize(call, x, scale, zero_point):
    """``(x - zero_point) * scale`` in float32, as TVM's own dequantize computes it; ``scale`` and
    ``zero_point`` scalars or vectors along ``axis`` (a quantized model's int32 biases and int8
    weights: left unfolded, they kept a bias add from following a transpose)."""
    axis = int(call.attrs.axis) % max(x.ndim, 1)

    def along(v):
        v = np.asarray(v)
        return v.reshape([-1 if i == axis else 1 for i in range(x.ndim)]) if v.ndim == 1 and x.ndim > 1 else v

    shifted = (x.astype(np.int64) - along(zero_point).astype(np.int64)).astype(np.float32)
    return shifted * along(scale).astype(np.float32)


_OPS: dict[str, Callable] = {
    "relax.add": lambda c, a, b: a + b,
    "relax.subtract": lambda c, a, b: a - b,
    "relax.multiply": lambda c, a, b: a * b,
    "relax.divide": lambda c, a, b: a / b,
    "relax.maximum": lambda c, a, b: np.maximum(a, b),
    "relax.minimum": lambda c, a, b: np.minimum(a, b),
    "relax.negative": lambda c, a: -a,
    "relax.sqrt": lambda c, a: np.sqrt(a),
    "relax.rsqrt": lambda c, a: 1 / np.sqrt(a),
    "relax.isnan": lambda c, a: np.isnan(a),
    "relax.where": lambda c, cond, a, b: np.where(cond, a, b),
    "relax.permute_dims": _permute,
    "relax.reshape": _reshape,
    "relax.expand_dims": _expand_dims,
    "relax.squeeze": _squeeze,
    "relax.broadcast_to": _broadcast_to,  # ONNX models give weights as broadcast_to(w, w.shape)
    "relax.dequantize": _dequantize,
}


def _value(arg):
    """The numpy value of a constant argument (tensor, scalar PrimValue or shape), else None."""
    if isinstance(arg, (tvm.tirx.FloatImm, tvm.tirx.IntImm)):  # a scalar (R.prim_value)
        return np.asarray(arg.value, dtype=str(arg.ty))
    if isinstance(arg, Constant) and hasattr(arg.value, "numpy"):
        return arg.value.numpy()
    if isinstance(arg, relax.ShapeExpr) and all(isinstance(v, tvm.tirx.IntImm) for v in arg.values):
        return tuple(int(v) for v in arg.values)
    return None


@mutator
class _Folder(PyExprMutator):
    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.folded = 0

    def _resolved(self, arg):
        if isinstance(arg, relax.Var):
            bound = self.lookup_binding(arg)
            if isinstance(bound, Constant) and hasattr(bound.value, "numpy"):
                return bound
        return arg

    def visit_call_(self, op):
        call = self.visit_expr_post_order(op)
        if not isinstance(call, relax.Call) or not isinstance(call.op, tvm.ir.Op):
            return call
        args = [self._resolved(a) for a in call.args]
        if any(a is not b for a, b in zip(args, call.args)):
            call = relax.Call(call.op, args, call.attrs, call.ty_args, call.span)
        fn = _OPS.get(call.op.name)
        ty = getattr(op, "ty", None)
        if fn is None or not isinstance(ty, relax.TensorType) or ty.dtype in ("", None):
            return call
        values = [_value(a) for a in args]
        if any(v is None for v in values):
            return call
        try:
            with np.errstate(all="ignore"):
                out = np.asarray(fn(op, *values)).astype(str(ty.dtype))
        except (ValueError, TypeError):
            return call
        shape = getattr(ty, "shape", None)
        if shape is not None and isinstance(shape, relax.ShapeExpr):
            want = _value(shape)
            if want is None or tuple(out.shape) != want:
                return call
        self.folded += 1
        return relax.const(out, str(ty.dtype))


@tvm.transform.module_pass(opt_level=0, name="FoldConstantNumpy")
def FoldConstantNumpy(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """Evaluate arithmetic and layout operators on constants with numpy (see the module docstring)."""
    return visit_functions(mod, _Folder(mod))


__all__ = ["FoldConstantNumpy"]
