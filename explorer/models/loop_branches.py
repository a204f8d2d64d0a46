"""Small ``If`` branches of a kept loop's body computed both, and the result selected.

Scripted PyTorch writes ``while a and b`` with a short-circuit: the body of the ``Loop``
(:mod:`explorer.models.loop_relax`) computes the next condition in an ``If`` whose branches are a
comparison and a constant. As Relax control flow such an ``If`` keeps the body out of a dataflow
block (so nothing in it fuses) and out of the loop's TIR form (:mod:`explorer.models.loop_tir`).
When both branches are a few cheap elementwise operators on small tensors, computing both and
selecting with ``where`` means the same and costs less than the branch itself: this module does
that, then puts the body in a dataflow block when no ``If`` is left.

Only operators that cannot fail or trap on any value are computed ahead (comparisons, logic,
addition, multiplication, min/max, casts: no division, no indexing), on tensors of at most
:data:`MAX_SPECULATED_ELEMENTS` elements, and only where both branches give a tensor of the
``If``'s own shape and type. Anything else keeps its ``If``.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax

MAX_SPECULATED_ELEMENTS = 4096
_SPECULABLE = frozenset(f"relax.{name}" for name in (
    "less", "less_equal", "greater", "greater_equal", "equal", "not_equal",
    "logical_and", "logical_or", "logical_not", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
    "add", "subtract", "multiply", "negative", "abs", "minimum", "maximum", "astype", "where"))


def _small_tensor(ty) -> bool:
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return False
    count = 1
    for dim in ty.shape:
        if not hasattr(dim, "value"):
            return False
        count *= int(dim.value)
    return count <= MAX_SPECULATED_ELEMENTS


def _cheap_value(value: relax.Expr) -> bool:
    if isinstance(value, (relax.Var, tvm.ir.Constant)):
        return _small_tensor(value.ty)
    return isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name in _SPECULABLE \
        and _small_tensor(value.ty)


def _branch_bindings(branch: relax.Expr, ty) -> list | None:
    """The bindings of ``branch`` (a SeqExpr) when all are cheap and it yields a tensor of type ``ty``."""
    if not isinstance(branch, relax.SeqExpr) or not tvm_ffi.structural_equal(branch.body.ty, ty):
        return None
    bindings = [b for block in branch.blocks for b in block.bindings]
    if all(isinstance(b, relax.VarBinding) and _cheap_value(b.value) for b in bindings) and _cheap_value(branch.body):
        return bindings
    return None


def _selected(binding: relax.Binding, bb: relax.BlockBuilder) -> list | None:
    """``binding`` (``v = If(...)``) as the bindings of both branches and ``v = where(cond, then, else)``."""
    value = binding.value
    if not isinstance(value, relax.If) or not _small_tensor(binding.var.ty):
        return None
    cond_ty = value.cond.ty
    if not (isinstance(cond_ty, relax.TensorType) and cond_ty.dtype == "bool" and cond_ty.shape is not None
            and len(cond_ty.shape) == 0):
        return None
    then, other = (_branch_bindings(b, binding.var.ty) for b in (value.true_branch, value.false_branch))
    if then is None or other is None:
        return None
    select = bb.normalize(relax.op.where(value.cond, value.true_branch.body, value.false_branch.body))
    return [*then, *other, relax.VarBinding(binding.var, select)]


def select_small_branches(func: relax.Function) -> relax.Function:
    """``func`` (a loop body) with each small ``If`` computed both ways and selected; in a dataflow
    block when no ``If`` is left, unchanged when none qualifies."""
    body = func.body
    if not isinstance(body, relax.SeqExpr):
        return func
    bb = relax.BlockBuilder()
    bindings, changed = [], False
    for block in body.blocks:
        for binding in block.bindings:
            selected = _selected(binding, bb)
            changed |= selected is not None
            bindings.extend(selected if selected is not None else [binding])
    if not changed:
        return func
    has_if = any(isinstance(b, relax.VarBinding) and isinstance(b.value, relax.If) for b in bindings)
    block = relax.BindingBlock(bindings) if has_if else relax.DataflowBlock(bindings)
    return relax.Function(func.params, relax.SeqExpr([block], body.body), func.ret_ty, is_pure=func.is_pure,
                          attrs=func.attrs)


__all__ = ["MAX_SPECULATED_ELEMENTS", "select_small_branches"]
