"""Small helpers to walk a Relax function in A-normal form.

TVM 0.27 renamed much of Relax's Python surface (``.ty`` instead of ``struct_info``, constants
are ``tvm.ir.Constant``); these helpers keep that knowledge in one place.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import tvm
from tvm import relax


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of a dtype string such as ``float32`` or ``int8x4``."""
    dt = tvm.runtime.DataType(dtype)
    return dt.bits * dt.lanes / 8


def tensor_info(ty: object) -> tuple[tuple[int, ...] | None, str | None]:
    """Static shape and dtype of a tensor type; ``(None, dtype)`` for a symbolic shape.

    A tuple type yields the info of its first field (the main result of ops such as batch_norm).
    """
    if isinstance(ty, relax.TensorType):
        dtype = str(ty.dtype) if ty.dtype is not None else None
        shape = ty.shape
        if isinstance(shape, relax.ShapeExpr):
            dims = []
            for v in shape.values:
                if not isinstance(v, tvm.tirx.IntImm):
                    return None, dtype
                dims.append(int(v.value))
            return tuple(dims), dtype
        return None, dtype
    fields = getattr(ty, "fields", None)
    if fields:
        return tensor_info(fields[0])
    return None, None


def tensor_bytes(ty: object) -> int:
    """Bytes of a statically shaped tensor type (all fields of a tuple type), else 0."""
    fields = getattr(ty, "fields", None)
    if fields is not None and not isinstance(ty, relax.TensorType):
        return sum(tensor_bytes(f) for f in fields)
    shape, dtype = tensor_info(ty)
    if shape is None or dtype is None:
        return 0
    return int(math.prod(shape) * dtype_bytes(dtype))


def is_constant(expr: object) -> bool:
    return isinstance(expr, tvm.ir.Constant)


def iter_bindings(func: relax.Function) -> Iterator[relax.Binding]:
    """Every binding of a function body, block after block."""
    body = func.body
    if not isinstance(body, relax.SeqExpr):
        return
    for block in body.blocks:
        yield from block.bindings


def flatten_args(expr: object) -> Iterator[object]:
    """The leaves of a call argument: tuples are opened, everything else is yielded as is."""
    if isinstance(expr, relax.Tuple):
        for f in expr.fields:
            yield from flatten_args(f)
    else:
        yield expr


def callee_name(call: relax.Call) -> str:
    """A readable name for what a call calls: op name, PrimFunc or function name, extern name."""
    op = call.op
    if isinstance(op, tvm.ir.Op):
        name = op.name
        if name in ("relax.call_tir", "relax.call_tir_inplace", "relax.call_tir_with_grad") and call.args:
            target = call.args[0]
            if isinstance(target, tvm.ir.GlobalVar):
                return target.name_hint
        if name in ("relax.call_dps_packed", "relax.call_pure_packed", "relax.call_packed") and call.args:
            target = call.args[0]
            if isinstance(target, relax.ExternFunc):
                return str(target.global_symbol)
        return name
    if isinstance(op, tvm.ir.GlobalVar):
        return op.name_hint
    if isinstance(op, relax.ExternFunc):
        return str(op.global_symbol)
    return type(op).__name__


CALL_TIR_OPS = ("relax.call_tir", "relax.call_tir_inplace")


def kernel_call(expr: object) -> tuple[tvm.ir.GlobalVar, list] | None:
    """``(callee, arguments)`` of a ``call_tir`` to a PrimFunc of the module, else None."""
    if not isinstance(expr, relax.Call) or not isinstance(expr.op, tvm.ir.Op) or expr.op.name not in CALL_TIR_OPS:
        return None
    callee, args = expr.args[0], expr.args[1]
    if not isinstance(callee, tvm.ir.GlobalVar):
        return None
    return callee, (list(args.fields) if isinstance(args, relax.Tuple) else [args])


def relax_functions(mod: tvm.IRModule) -> dict[str, relax.Function]:
    return {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, relax.Function)}


def prim_funcs(mod: tvm.IRModule) -> dict[str, tvm.tirx.PrimFunc]:
    return {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}


def is_primitive(func: relax.Function) -> bool:
    """True for the fused functions FuseOps creates (attribute ``Primitive``)."""
    attrs = func.attrs
    return bool(attrs is not None and "Primitive" in attrs and bool(attrs["Primitive"]))


def use_counts(func: relax.Function) -> dict[relax.Var, int]:
    """How many times each variable is read in ``func`` (every binding's value and the result):
    a variable read twice by one call counts twice."""
    from tvm.relax.expr_functor import PyExprVisitor, visitor

    counts: dict[relax.Var, int] = {}

    @visitor
    class _Uses(PyExprVisitor):
        def visit_var_(self, op) -> None:
            counts[op] = counts.get(op, 0) + 1

        def visit_dataflow_var_(self, op) -> None:
            counts[op] = counts.get(op, 0) + 1

    _Uses().visit_expr(func.body)
    return counts


def op_name(call: relax.Call) -> str:
    """The operator's name (``relax.add``), or "" for a call of a function."""
    return getattr(call.op, "name", "") if isinstance(call.op, tvm.ir.Op) else ""
