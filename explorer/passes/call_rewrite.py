"""One Relax call at a time: the skeleton of schedx's graph rewrites (fast activations, dead
convolution taps, wide concatenations) that replace a ``relax.Call`` by another expression."""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

# (the call, with its arguments already rewritten; the block builder) -> its replacement, or None to keep it
Rewrite = Callable[[relax.Call, relax.BlockBuilder], "relax.Expr | None"]


@mutator
class _CallRewriter(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, rewrite: Rewrite) -> None:
        super().__init__(mod)
        self.rewrite = rewrite
        self.rewritten = 0

    def visit_call_(self, op):
        call = self.visit_expr_post_order(op)
        if not isinstance(call, relax.Call):
            return call
        new = self.rewrite(call, self.builder_)
        if new is None:
            return call
        self.rewritten += 1
        return new


def static_ints(values) -> list[int] | None:
    """``values`` (a shape, strides, paddings) as Python ints, or None when one is symbolic."""
    try:
        return [int(v) for v in values]
    except (TypeError, ValueError):
        return None


def rewrite_calls(mod: tvm.IRModule, rewrite: Rewrite) -> tvm.IRModule:
    """``mod`` with every Relax call ``rewrite`` answers replaced (``mod`` itself when none was)."""
    rewriter = _CallRewriter(mod, rewrite)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    return rewriter.builder_.get() if rewriter.rewritten else mod


def visit_functions(mod: tvm.IRModule, mutator) -> tvm.IRModule:
    """A copy of ``mod`` with each Relax function as ``mutator`` (a ``PyExprMutator`` of ``mod``)
    rewrites it; the caller's module is never edited."""
    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs, global_infos=mod.global_infos)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            out[gv] = mutator.visit_expr(func)
    return out


__all__ = ["Rewrite", "rewrite_calls", "static_ints", "visit_functions"]
