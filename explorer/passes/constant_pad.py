"""``ConstantPadToRelaxOp``: a constant pad that an importer emitted as TensorIR becomes ``R.nn.pad`` again.

TVM's ONNX frontend writes ``Pad`` (mode ``constant``) as ``call_tir`` of TOPI's ``nn.pad``. A
``call_tir`` is opaque to ``ConvertLayout`` and ``SinkTransposes``: Keras' ``ZeroPadding2D``
before the stem's max-pool, exported by tf2onnx, left ResNet50V2 with an NHWC -> NCHW transpose
fused into a scalar pad kernel (0.5 ms), a max-pool over NCHW and a transpose back. As
``R.nn.pad`` the transpose moves below it (``SinkTransposes``) and cancels, and the pool runs NHWC.

A ``call_tir(f, (x,))`` is rewritten only when ``f`` is structurally equal to the PrimFunc TOPI
makes for the same input, widths and value: the widths before each axis and the value are read from
``f``'s body (the offsets of its load, the constant of its ``if_then_else``), the widths after from the
shapes, then the two functions are compared once. Reflect, edge and
circular pads (other TOPI functions), or any other kernel, are left as they are.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax, te, tirx, topi
from tvm.ir.expr import TensorLoad

from explorer.ir.tir_walk import blocks
from explorer.passes.call_rewrite import rewrite_calls, static_ints

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
_IF_THEN_ELSE = tvm.ir.Op.get("prim.if_then_else")


def _pad_parts(func: tirx.PrimFunc):
    """``(before, value)`` of the ``out[i] = if_then_else(inside, x[i - before], value)`` a TOPI pad
    stores (each index of the load ``v``, ``v - b`` or ``v + c``: ``before`` 0, ``b``, ``-c``), or None."""
    found = blocks(func)
    store = found[0].body if len(found) == 1 else None
    value = getattr(store, "value", None) if isinstance(store, tirx.BufferStore) else None
    if not (isinstance(value, tvm.ir.Call) and value.op.same_as(_IF_THEN_ELSE)):
        return None
    load, constant = value.args[1], value.args[2]
    if not isinstance(load, TensorLoad) or not isinstance(constant, (tirx.IntImm, tirx.FloatImm)):
        return None
    before = []
    for index in load.indices:
        if isinstance(index, tirx.Var):
            before.append(0)
        elif isinstance(index, (tirx.Sub, tirx.Add)) and isinstance(index.b, tirx.IntImm):
            before.append(int(index.b.value) if isinstance(index, tirx.Sub) else -int(index.b.value))
        else:
            return None
    return before, constant.value


def _topi_pad(shape: list[int], dtype: str, before: list[int], after: list[int], value) -> tirx.PrimFunc:
    """The PrimFunc ``R.call_te(topi.nn.pad, ...)`` emits (int64 indices, no global symbol)."""
    x = te.placeholder(shape, dtype, name="A")
    func = te.create_prim_func([x, topi.nn.pad(x, before, after, value)], index_dtype_override="int64")
    return func.without_attr("global_symbol")


def topi_pad_widths(func: tirx.PrimFunc, shape: list[int], out_shape: list[int], dtype: str):
    """``(before, after, value)`` when ``func`` is TOPI's constant pad of a ``shape`` tensor to
    ``out_shape``, else None: the widths and value read from ``func``'s body, then ``func`` compared
    whole with the PrimFunc TOPI makes for them (one comparison)."""
    parts = _pad_parts(func)
    if parts is None or len(parts[0]) != len(shape) or len(out_shape) != len(shape):
        return None
    before, value = parts
    after = [o - i - b for i, o, b in zip(shape, out_shape, before)]
    if any(w < 0 for w in before + after) or not any(before + after) or float(value) != value:
        return None  # (a crop; no pad; an integer a float cannot hold, which R.nn.pad's attribute is)
    if not tvm_ffi.structural_equal(func, _topi_pad(shape, dtype, before, after, value)):
        return None
    return before, after, value


def _as_relax_pad(mod: tvm.IRModule, call: relax.Call):
    """``R.nn.pad(x, widths, "constant", value)`` for a ``call_tir`` of TOPI's constant pad, else None."""
    if not call.op.same_as(_CALL_TIR) or len(call.args) != 2 or not isinstance(call.args[1], relax.Tuple):
        return None
    func = mod.functions.get(call.args[0]) if isinstance(call.args[0], tvm.ir.GlobalVar) else None
    if not isinstance(func, tirx.PrimFunc) or len(call.args[1].fields) != 1 or len(func.params) != 2:
        return None
    x = call.args[1].fields[0]
    x_ty, out_ty = getattr(x, "ty", None), call.ty
    if not isinstance(x_ty, relax.TensorType) or not isinstance(out_ty, relax.TensorType) \
            or x_ty.dtype != out_ty.dtype or not isinstance(x_ty.shape, relax.ShapeExpr) \
            or not isinstance(out_ty.shape, relax.ShapeExpr):
        return None
    shape, out_shape = static_ints(x_ty.shape.values), static_ints(out_ty.shape.values)
    if shape is None or out_shape is None:
        return None
    found = topi_pad_widths(func, shape, out_shape, x_ty.dtype)
    if found is None:
        return None
    before, after, value = found
    widths = [w for pair in zip(before, after) for w in pair]
    return relax.op.nn.pad(x, widths, "constant", float(value))


@tvm.transform.module_pass(opt_level=0, name="ConstantPadToRelaxOp")
def ConstantPadToRelaxOp(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """Replace ``call_tir``s of TOPI's constant pad by ``R.nn.pad`` (see the module docstring)."""
    out = rewrite_calls(mod, lambda call, bb: _as_relax_pad(mod, call))
    return mod if out is mod else relax.transform.DeadCodeElimination()(out)


__all__ = ["ConstantPadToRelaxOp", "topi_pad_widths"]
