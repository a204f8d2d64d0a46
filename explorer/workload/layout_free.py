"""Which kernel arguments are weights: TensorIR's ``layout_free_buffers``.

A PrimFunc parameter that every call passes a constant (a weight, a folded bias) may be stored in
any layout: a schedule can pack it into panels, and the packing (a block MetaSchedule marks
``meta_schedule.layout_rewrite_preproc``) is computed once, at build time, instead of on every
call (:mod:`export.weight_layouts`). MetaSchedule's ``RewriteLayout`` postprocessor only rewrites
buffers listed here, and schedx's default tiling only marks its packing then.

This is Relax's ``AttachAttrLayoutFreeBuffers`` without its side effect: that pass renames every
PrimFunc it touches (``fused_conv2d_add_relu`` becomes ``fused_conv2d_add_relu1``), and task
names are what users read and records show.
"""

from __future__ import annotations

import tvm
from tvm import relax

from explorer.relax_walk import is_constant, iter_bindings, relax_functions

LAYOUT_FREE_ATTR = "layout_free_buffers"
_CALL_TIR = ("relax.call_tir", "relax.call_tir_inplace")


def _kernel_calls(mod: tvm.IRModule):
    """``(callee, arguments)`` of every ``call_tir`` in the module's Relax functions."""
    for func in relax_functions(mod).values():
        for binding in iter_bindings(func):
            call = binding.value
            if not isinstance(call, relax.Call) or not isinstance(call.op, tvm.ir.Op) or call.op.name not in _CALL_TIR:
                continue
            callee, args = call.args[0], call.args[1]
            if isinstance(callee, tvm.ir.GlobalVar):
                yield callee, list(args.fields) if isinstance(args, relax.Tuple) else [args]


def constant_arguments(mod: tvm.IRModule) -> dict[str, tuple[int, ...]]:
    """For each PrimFunc called from Relax: the positions of the arguments that every call passes
    a constant (a function some call passes a variable there gets nothing for that position)."""
    seen: dict[str, set[int]] = {}
    for callee, args in _kernel_calls(mod):
        const = {i for i, arg in enumerate(args) if is_constant(arg)}
        name = callee.name_hint
        seen[name] = seen[name] & const if name in seen else const
    return {name: tuple(sorted(found)) for name, found in seen.items() if found}


def mark_layout_free(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` (a copy) with ``layout_free_buffers`` on every PrimFunc that takes constants; the
    functions keep their names. PrimFuncs that already say which buffers are layout-free keep it."""
    found = constant_arguments(mod)
    if not found:
        return mod
    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs, global_infos=mod.global_infos)
    for gv, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc) or gv.name_hint not in found:
            continue
        if func.attrs is not None and LAYOUT_FREE_ATTR in func.attrs:
            continue
        out[gv] = func.with_attr(LAYOUT_FREE_ATTR, list(found[gv.name_hint]))  # plain ints: RewriteLayout reads Array<int>
    return out


__all__ = ["LAYOUT_FREE_ATTR", "constant_arguments", "mark_layout_free"]
