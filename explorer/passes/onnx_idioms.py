"""``SimplifyInference``: what ONNX graphs carry that an inference graph does not need.

TVM's ONNX importer writes ``Dropout`` as ``R.nn.dropout`` (a tuple of the output and a mask),
``Sum`` as ``sum(stack(broadcast_to(a), broadcast_to(b), ...), axis=0)``, and some weights as
``broadcast_to(w, w.shape)``. ``ConvertLayout`` fails on the first two (VGG-19, ResNet-50 and
Inception from ONNX's model zoo stayed NCHW: 4-6x slower with default schedules), and a
``stack`` keeps a residual add out of its convolution's kernel. Here, for inference:

- ``dropout(x)[0]`` is ``x`` (the mask, if used, stays);
- ``sum(stack((a, b, ...), axis=k), axis=[k])`` is ``a + b + ...`` (the same order of additions);
- ``broadcast_to(x, shape)`` with ``x`` already of that shape is ``x``.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from explorer.passes.call_rewrite import visit_functions

_DROPOUT = tvm.ir.Op.get("relax.nn.dropout")
_STACK = tvm.ir.Op.get("relax.stack")
_SUM = tvm.ir.Op.get("relax.sum")
_BROADCAST = tvm.ir.Op.get("relax.broadcast_to")


def _shape(expr) -> tuple | None:
    ty = getattr(expr, "ty", None)
    shape = getattr(ty, "shape", None)
    if not isinstance(shape, relax.ShapeExpr):
        return None
    try:
        return tuple(int(v) for v in shape.values)
    except TypeError:  # symbolic
        return None


@mutator
class _Simplifier(PyExprMutator):
    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.changed = 0

    def _bound(self, expr):
        value = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
        return value if value is not None else expr

    def visit_tuple_getitem_(self, op):
        item = self.visit_expr_post_order(op)
        if isinstance(item, relax.TupleGetItem) and item.index == 0:
            source = self._bound(item.tuple_value)
            if isinstance(source, relax.Call) and source.op.same_as(_DROPOUT):
                self.changed += 1
                return source.args[0]
        return item

    def visit_call_(self, op):
        call = self.visit_expr_post_order(op)
        if not isinstance(call, relax.Call):
            return call
        if call.op.same_as(_BROADCAST):
            shape = _shape(call.args[0])
            if shape is not None and shape == _shape(op):
                self.changed += 1
                return call.args[0]
        if call.op.same_as(_SUM) and not call.attrs.keepdims and call.attrs.axis is not None \
                and len(call.attrs.axis) == 1:
            stacked = self._bound(call.args[0])
            if isinstance(stacked, relax.Call) and stacked.op.same_as(_STACK) \
                    and int(stacked.attrs.axis) == int(call.attrs.axis[0]):
                fields = self._bound(stacked.args[0])
                if isinstance(fields, relax.Tuple) and fields.fields:
                    total = fields.fields[0]
                    for field in fields.fields[1:]:
                        total = self.builder_.emit(relax.op.add(total, field))
                    self.changed += 1
                    return total
        return call


@tvm.transform.module_pass(opt_level=0, name="SimplifyInference")
def SimplifyInference(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """Drop dropout, turn Sum's stack-and-reduce into adds, drop identity broadcasts (see the
    module docstring)."""
    simplifier = _Simplifier(mod)
    out = visit_functions(mod, simplifier)
    if not simplifier.changed:
        return mod
    # x = y bindings left behind would hide the adds from ConvertLayout (it kept them in NCHW)
    return relax.transform.DeadCodeElimination()(relax.transform.CanonicalizeBindings()(out))


__all__ = ["SimplifyInference"]
