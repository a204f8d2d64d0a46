"""Weights packed once, at build time: MetaSchedule's layout rewrite folded into the parameters.

A schedule may read a weight in another layout than the graph's (panels as wide as its register
tile: :func:`explorer.schedule.defaults.tiling._pack_weights`, or MetaSchedule's
``RewriteLayout``). It then copies the weight into that layout in a block marked
``meta_schedule.layout_rewrite_preproc``. Left in the kernel, that copy runs on every call: 9.4 MB
of weights for each of ResNet-18's last 3x3 convolutions, more time than the convolution itself on
a 2-core machine. Here, as TVM's ``static_shape_tuning`` pipeline does:

1. Relax's ``SplitLayoutRewritePreproc`` moves each marked block into a function of its own
   (``X_weight_prepack``) that ``main`` calls before the kernel (``X_prepacked``, renamed back
   to ``X`` here: task names are what profiles and records show);
2. every such call on a constant weight is computed now, on this machine's CPU, and ``main``
   passes the packed constant instead. The parameter file then holds it (named after its
   weight, ``<name>_packed``).

A search already times kernels without the copy (MetaSchedule's builder removes it), so an
export now runs what the search measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from explorer.errors import short_tvm_message
from explorer.relax_walk import is_constant
from export.errors import ExportError
from export.params import value_digest

PREPACK_SUFFIX = "_weight_prepack"
PREPACKED_SUFFIX = "_prepacked"
_CALL_TIR = ("relax.call_tir", "relax.call_tir_inplace")


@dataclass
class Folded:
    """What folding did: the module, and for each packed constant the weight it came from (digests
    of their values, :func:`export.params.value_digest`), for naming parameters."""

    mod: tvm.IRModule
    packed_from: dict[str, str] = field(default_factory=dict)
    calls: int = 0  # prepack calls computed at build time


def _host_target() -> tvm.target.Target:
    return tvm.target.Target({"kind": "llvm"})


class _Prepacks:
    """Each prepack PrimFunc compiled for this machine once, then run on constant weights."""

    def __init__(self, mod: tvm.IRModule) -> None:
        self.mod = mod
        self.compiled: dict[str, object] = {}

    def run(self, name: str, weights: list[np.ndarray], out_shape: tuple[int, ...], out_dtype: str) -> np.ndarray:
        if name not in self.compiled:
            func = self.mod[name].with_attr("global_symbol", "main")
            self.compiled[name] = tvm.compile(tvm.IRModule({"main": func}), target=_host_target()).jit()
        args = [tvm.runtime.tensor(np.ascontiguousarray(w)) for w in weights]
        out = tvm.runtime.tensor(np.empty(out_shape, dtype=out_dtype))
        self.compiled[name]["main"](*args, out)
        return out.numpy()


@mutator
class _Fold(PyExprMutator):
    """Computes prepack calls on constants; points every kernel call at the new module's function
    (``X_prepacked``: at ``X``)."""

    def __init__(self, mod: tvm.IRModule, kernels: dict[str, tvm.ir.GlobalVar], renamed: dict[str, str]) -> None:
        super().__init__(mod)
        self.kernels = kernels
        self.renamed = renamed
        self.prepacks = _Prepacks(mod)
        self.packed_from: dict[str, str] = {}
        self.calls = 0

    def visit_call_(self, op):  # noqa: N802 - TVM's visitor name
        call = super().visit_call_(op)
        if not isinstance(call.op, tvm.ir.Op) or call.op.name not in _CALL_TIR:
            return call
        callee, args = call.args[0], call.args[1]
        name = callee.name_hint
        fields = list(args.fields) if isinstance(args, relax.Tuple) else [args]
        if name.endswith(PREPACK_SUFFIX) and fields and all(is_constant(f) for f in fields):
            shape = tuple(int(d) for d in call.ty.shape.values)
            originals = [f.value.numpy() for f in fields]
            try:
                packed = self.prepacks.run(name, originals, shape, str(call.ty.dtype))
            except Exception as err:  # noqa: BLE001 - TVM's errors carry no type of their own
                raise ExportError(f"could not pack the weights of {name.removesuffix(PREPACK_SUFFIX)} at build "
                                  f"time: {short_tvm_message(err)}") from err
            self.calls += 1
            self.packed_from[value_digest(packed)] = value_digest(originals[0])
            return relax.const(packed)
        gv = self.kernels[self.renamed.get(name, name)]  # the new module's function of that (first) name
        return relax.Call(call.op, [gv, *call.args[1:]], call.attrs, call.ty_args, call.span)


def _used_prim_funcs(mod: tvm.IRModule) -> set[str]:
    """Names of the PrimFuncs that a Relax function of ``mod`` still calls."""
    used: set[str] = set()

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name in _CALL_TIR:
            used.add(expr.args[0].name_hint)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return used


def fold_weight_layouts(mod: tvm.IRModule) -> Folded:
    """``mod`` (scheduled, constants still in ``main``) with every weight's layout rewrite computed
    once here; kernels whose packed weight is not a constant keep computing it per call."""
    split = relax.transform.SplitLayoutRewritePreproc()(mod)
    names = {gv.name_hint for gv in split.functions}
    renamed = {n: n.removesuffix(PREPACKED_SUFFIX) for n in names
               if n.endswith(PREPACKED_SUFFIX) and n.removesuffix(PREPACKED_SUFFIX) not in names}
    if not any(n.endswith(PREPACK_SUFFIX) for n in names):
        return Folded(mod)
    builder = relax.BlockBuilder(tvm.IRModule({}, attrs=split.attrs, global_infos=split.global_infos))
    kernels = {}
    for gv, func in split.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc):
            name = renamed.get(gv.name_hint, gv.name_hint)
            kernels[name] = builder.add_func(func.with_attr("global_symbol", name), name)
    folder = _Fold(split, kernels, renamed)
    for gv, func in split.functions.items():
        if isinstance(func, relax.Function):
            builder.add_func(folder.visit_expr(func), gv.name_hint)
    out = builder.get()
    used = _used_prim_funcs(out)
    kept = {gv: f for gv, f in out.functions.items()
            if not (gv.name_hint.endswith(PREPACK_SUFFIX) and gv.name_hint not in used)}
    out = tvm.IRModule(kept, attrs=out.attrs, global_infos=out.global_infos)
    return Folded(out, folder.packed_from, folder.calls)


__all__ = ["Folded", "fold_weight_layouts"]
