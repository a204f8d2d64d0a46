"""``SplitWideConcat``: a concatenation of many tensors becomes a tree of narrow ones.

TOPI writes ``concatenate`` as one expression per output element that picks its input with a chain
of ``if_then_else``, one link per input: an unrolled recurrent layer's output (100 steps
concatenated, :mod:`explorer.models.recurrent`) walked a 100-deep chain for every element, and that
one kernel took 77% of a GRU's time. As a tree of concatenations of at most :data:`FAN_IN` inputs
(which fusion joins into one kernel again), an element walks a chain of ``FAN_IN`` per level: 13 +
8 links instead of 100.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

FAN_IN = 8
_CONCAT = tvm.ir.Op.get("relax.concat")


def _tree(fields: list, axis: int):
    while len(fields) > FAN_IN:
        fields = [relax.op.concat(fields[i:i + FAN_IN], axis) if len(fields[i:i + FAN_IN]) > 1 else fields[i]
                  for i in range(0, len(fields), FAN_IN)]
    return relax.op.concat(fields, axis)


@mutator
class _Rewriter(PyExprMutator):
    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.rewritten = 0

    def visit_call_(self, op):
        call = self.visit_expr_post_order(op)
        if not (isinstance(call, relax.Call) and call.op.same_as(_CONCAT)):
            return call
        tensors = call.args[0]
        if not isinstance(tensors, relax.Tuple) or len(tensors.fields) <= FAN_IN or call.attrs.axis is None:
            return call
        self.rewritten += 1
        return _tree(list(tensors.fields), int(call.attrs.axis))


@tvm.transform.module_pass(opt_level=0, name="SplitWideConcat")
def SplitWideConcat(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """Concatenations of more than FAN_IN tensors as trees (see the module docstring)."""
    rewriter = _Rewriter(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    return rewriter.builder_.get() if rewriter.rewritten else mod


__all__ = ["FAN_IN", "SplitWideConcat"]
