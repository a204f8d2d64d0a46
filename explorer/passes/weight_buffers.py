"""Which kernel arguments are weights: ``schedx.weight_buffers``.

A PrimFunc parameter that every call passes a constant (a weight, a folded bias) may be stored in
any layout: a schedule can pack it into panels, and the packing (a block marked
``meta_schedule.layout_rewrite_preproc``, as MetaSchedule's ``RewriteLayout`` marks its own) is
then computed once, at build time, instead of on every call (:mod:`export.weight_layouts`).
schedx's default tiling marks its packing so for the parameters listed here.

This is what TensorIR's ``layout_free_buffers`` says, under schedx's own name: with
``layout_free_buffers`` on a model's kernels, MetaSchedule's ``RewriteLayout`` postprocessor
raised ``args.size() == initial_indices_orig.size()`` and stopped the whole search as soon as the
evolutionary search re-applied a default schedule's trace that packs the weight itself (ResNet-18's
3x3 convolutions). Until the default packing is recorded as a postprocessing step that the search
strips, searches leave layouts to the schedules they evolve.

``MarkWeightBuffers`` ends schedx's fusing pipelines (the task pipeline included), so that a
kernel's workload key is the same from the Passes page, a search and an export. Unlike Relax's
``AttachAttrLayoutFreeBuffers`` it renames nothing (that pass turns ``fused_conv2d_add_relu`` into
``fused_conv2d_add_relu1``, and task names are what users read and records show).
"""

from __future__ import annotations

import tvm

from explorer.ir.relax_walk import is_constant, iter_bindings, kernel_call, relax_functions
from explorer.ir.tir_walk import WEIGHTS_ATTR, weight_positions


def _kernel_calls(mod: tvm.IRModule):
    """``(callee, arguments)`` of every ``call_tir`` in the module's Relax functions."""
    for func in relax_functions(mod).values():
        for binding in iter_bindings(func):
            found = kernel_call(binding.value)
            if found is not None:
                yield found


def constant_arguments(mod: tvm.IRModule) -> dict[str, tuple[int, ...]]:
    """For each PrimFunc called from Relax: the positions of the arguments that every call passes
    a constant (a function some call passes a variable there gets nothing for that position)."""
    seen: dict[str, set[int]] = {}
    for callee, args in _kernel_calls(mod):
        const = {i for i, arg in enumerate(args) if is_constant(arg)}
        name = callee.name_hint
        seen[name] = seen[name] & const if name in seen else const
    return {name: tuple(sorted(found)) for name, found in seen.items() if found}


def mark_weights(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` (a copy) with ``schedx.weight_buffers`` on every PrimFunc that takes constants; the
    functions keep their names."""
    found = constant_arguments(mod)
    if not found:
        return mod
    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs, global_infos=mod.global_infos)
    for gv, func in mod.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc) and gv.name_hint in found:
            out[gv] = func.with_attr(WEIGHTS_ATTR, list(found[gv.name_hint]))
    return out


@tvm.transform.module_pass(opt_level=0, name="MarkWeightBuffers")
def MarkWeightBuffers(mod: tvm.IRModule, ctx) -> tvm.IRModule:  # noqa: N802 - named as TVM names passes
    """Mark each PrimFunc's weights as ``schedx.weight_buffers`` (see the module docstring)."""
    return mark_weights(mod)


__all__ = ["WEIGHTS_ATTR", "MarkWeightBuffers", "constant_arguments", "mark_weights", "weight_positions"]
