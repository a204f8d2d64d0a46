"""``ClipToRelaxOps``: clips that the ONNX importer emitted as TensorIR become Relax operators again.

TVM's ONNX frontend writes ``Clip`` (ReLU6 in MobileNets) as ``call_tir`` of TOPI's ``maximum``
and ``minimum`` against a scalar. ``ConvertLayout`` cannot see through a ``call_tir``: it puts
two transposes around every ReLU6 (MobileNetV2: 35 extra memory-bound kernels in NHWC), and the
activation cannot join its convolution's kernel. A ``call_tir`` whose PrimFunc is one elementwise
``max(x, s)`` or ``min(x, s)`` with ``s`` a scalar is replaced by ``R.maximum``/``R.minimum``
(recognised from the TensorIR itself, not from a name); LegalizeOps lowers them again later.

``R.clip`` itself (ONNX HardSwish and HardSigmoid: MobileNetV3, GhostNet, LCNet, ...) has no layout
rule in ConvertLayout either: each one got two transposes and kept its convolution from fusing
with the activation (MobileNetV3-small: 20 such kernels, its convolutions without epilogues). A
clip with constant bounds becomes ``R.minimum(R.maximum(x, lo), hi)``, which converts and fuses.
"""

from __future__ import annotations

import tvm
from tvm import relax, tirx
from tvm.ir import TensorLoad  # what tirx.BufferLoad(...) builds
from tvm.relax.expr_functor import PyExprMutator, mutator

from explorer.ir.tir_walk import blocks
from explorer.passes.call_rewrite import visit_functions

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
_CLIP = tvm.ir.Op.get("relax.clip")


def _clip_as_min_max(call: relax.Call):
    """``minimum(maximum(x, lo), hi)`` for ``R.clip(x, lo, hi)`` with constant bounds, else None."""
    x, lo, hi = call.args
    dtype = getattr(getattr(x, "ty", None), "dtype", None)
    bounds = [getattr(b, "value", None) for b in (lo, hi)]
    if dtype is None or any(not isinstance(b, (int, float)) for b in bounds):
        return None
    return relax.op.minimum(relax.op.maximum(x, relax.const(bounds[0], dtype)), relax.const(bounds[1], dtype))


def scalar_min_max(func: tirx.PrimFunc):
    """``relax.op.maximum``/``minimum`` if ``func`` computes ``out = max|min(A, B[()])`` elementwise."""
    params = list(func.params)
    found = blocks(func)
    if len(params) != 3 or len(found) != 1 or len(found[0].iter_vars) != len(params[2].shape):
        return None
    store = found[0].body
    if not isinstance(store, tirx.BufferStore) or not store.buffer.same_as(params[2]):
        return None
    value = store.value
    op = relax.op.maximum if isinstance(value, tirx.Max) else relax.op.minimum if isinstance(value, tirx.Min) else None
    if op is None:
        return None
    a, b = value.a, value.b
    if not (isinstance(a, TensorLoad) and isinstance(b, TensorLoad)):
        return None
    iters = [iv.var for iv in found[0].iter_vars]
    same_index = len(a.indices) == len(iters) and all(i.same_as(v) for i, v in zip(a.indices, iters))
    out_index = len(store.indices) == len(iters) and all(i.same_as(v) for i, v in zip(store.indices, iters))
    if not (a.source.same_as(params[0]) and b.source.same_as(params[1]) and len(b.indices) == 0
            and same_index and out_index and len(params[1].shape) == 0):
        return None
    return op


@mutator
class _Rewriter(PyExprMutator):
    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.mod = mod
        self.rewritten = 0

    def visit_call_(self, op):
        call = self.visit_expr_post_order(op)
        if isinstance(call, relax.Call) and call.op.same_as(_CLIP):
            rewritten = _clip_as_min_max(call)
            if rewritten is not None:
                self.rewritten += 1
                return rewritten
            return call
        if not (isinstance(call, relax.Call) and call.op.same_as(_CALL_TIR)):
            return call
        gv, args = call.args[0], call.args[1]
        func = self.mod.functions.get(gv) if isinstance(gv, tvm.ir.GlobalVar) else None
        if not isinstance(func, tirx.PrimFunc) or not isinstance(args, relax.Tuple) or len(args.fields) != 2:
            return call
        make = scalar_min_max(func)
        if make is None:
            return call
        self.rewritten += 1
        return make(args.fields[0], args.fields[1])


@tvm.transform.module_pass(opt_level=0, name="ClipToRelaxOps")
def ClipToRelaxOps(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """Replace scalar max/min ``call_tir``s by Relax operators (see the module docstring)."""
    rewriter = _Rewriter(mod)
    out = visit_functions(mod, rewriter)
    if not rewriter.rewritten:
        return mod
    return relax.transform.DeadCodeElimination()(out)


__all__ = ["ClipToRelaxOps", "scalar_min_max"]
