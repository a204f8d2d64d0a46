"""Weights packed once, at build time: MetaSchedule's layout rewrite folded into the parameters.

A schedule may read a weight in another layout than the graph's (panels as wide as its register
tile: :func:`explorer.schedule.defaults.panels.pack_weights`, or MetaSchedule's
``RewriteLayout``). It then copies the weight into that layout in a block marked
``meta_schedule.layout_rewrite_preproc``. Left in the kernel, that copy runs on every call: 9.4 MB
of weights for each of ResNet-18's last 3x3 convolutions. Here, as TVM's ``static_shape_tuning``
pipeline does:

1. Relax's ``SplitLayoutRewritePreproc`` moves the marked blocks of each kernel into a function
   of their own (``X_weight_prepack``) that ``main`` calls before the kernel (``X_prepacked``,
   renamed back to ``X`` here: task names are what profiles and records show);
2. every such call on constant weights is computed now, on this machine's CPU (the copy only moves
   bytes, so a cross-compiled target gets the same layout), and ``main`` passes the packed
   constants instead; a weight two kernels pack alike is packed and stored once. The parameter
   file then holds them (named after their weight, ``<name>_packed``).

A search already times kernels without the copy (schedx's builder, as MetaSchedule's, removes
it), so an export runs what the search measured. Only models get this: a kernel's weights are its caller's
inputs, packed on every call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax, s_tir
from tvm.relax.expr_functor import PyExprMutator, mutator

from explorer.errors import short_tvm_message
from explorer.ir.relax_walk import is_constant, kernel_call
from explorer.ir.tir_walk import LAYOUT_REWRITE_PREPROC, blocks, weight_positions
from export.errors import ExportError
from export.params import value_digest

PREPACK_SUFFIX = "_weight_prepack"
PREPACKED_SUFFIX = "_prepacked"


@dataclass
class Folded:
    """What folding did: the module, and for each packed constant the weight it came from (digests
    of their values, :func:`export.params.value_digest`), for naming parameters."""

    mod: tvm.IRModule
    packed_from: dict[str, str] = field(default_factory=dict)
    calls: int = 0  # prepack calls computed at build time


def has_layout_rewrites(mod: tvm.IRModule) -> bool:
    """Whether a kernel of ``mod`` copies a weight into another layout (a block marked
    ``meta_schedule.layout_rewrite_preproc``)."""
    return any(LAYOUT_REWRITE_PREPROC in b.annotations for f in mod.functions.values()
               if isinstance(f, tvm.tirx.PrimFunc) for b in blocks(f))


def _outputs(ty) -> list[tuple[tuple[int, ...], str]]:
    """``(shape, dtype)`` of each output of a call typed ``ty`` (a tensor or a tuple of them)."""
    fields = ty.fields if isinstance(ty, relax.TupleType) else [ty]
    return [(tuple(int(d) for d in f.shape.values), str(f.dtype)) for f in fields]


class _Prepacks:
    """Each prepack PrimFunc compiled for this machine once, then run on constant weights."""

    def __init__(self, mod: tvm.IRModule) -> None:
        self.mod = mod
        self.compiled: dict[str, object] = {}

    def run(self, name: str, weights: list[np.ndarray], outputs: list[tuple[tuple[int, ...], str]]) -> list[np.ndarray]:
        if name not in self.compiled:  # only what makes it a standalone function: no target of the kernel's
            func = self.mod[name].with_attrs({"global_symbol": "main", "tirx.noalias": True})
            for key in list((func.attrs or {}).keys()):
                if key not in ("global_symbol", "tirx.noalias"):
                    func = func.without_attr(key)
            self.compiled[name] = tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target({"kind": "llvm"})).jit()
        args = [tvm.runtime.tensor(np.ascontiguousarray(w)) for w in weights]
        outs = [tvm.runtime.tensor(np.empty(shape, dtype=dtype)) for shape, dtype in outputs]
        self.compiled[name]["main"](*args, *outs)
        return [o.numpy() for o in outs]


@mutator
class _Fold(PyExprMutator):
    """Computes prepack calls on constants; points every kernel call at the new module's function
    (``X_prepacked``: at ``X``)."""

    def __init__(self, mod: tvm.IRModule, functions: dict[str, tvm.ir.GlobalVar], renamed: dict[str, str]) -> None:
        super().__init__(mod)
        self.functions = functions
        self.renamed = renamed
        self.prepacks = _Prepacks(mod)
        self.packed_from: dict[str, str] = {}
        self.done: dict[tuple, relax.Constant] = {}  # (digest, shape) of a packed weight -> its constant
        self.calls = 0

    def _pack(self, name: str, call: relax.Call, weights: list[relax.Expr]) -> relax.Expr:
        originals = [w.value.numpy() for w in weights]
        try:
            packed = self.prepacks.run(name, originals, _outputs(call.ty))
        except Exception as err:  # noqa: BLE001 - TVM's errors carry no type of their own
            raise ExportError(f"could not pack the weights of {name.removesuffix(PREPACK_SUFFIX)} at build "
                              f"time: {short_tvm_message(err)}") from err
        self.calls += 1
        consts = []
        for array in packed:  # the same bytes in the same shape: one constant (one parameter)
            key = (value_digest(array), array.shape)
            consts.append(self.done.setdefault(key, relax.const(array)))
        if len(originals) == 1 and len(packed) == 1:  # named after its weight only when that is certain
            self.packed_from[value_digest(packed[0])] = value_digest(originals[0])
        return consts[0] if not isinstance(call.ty, relax.TupleType) else relax.Tuple(consts)

    def visit_call_(self, op):  # noqa: N802 - TVM's visitor name
        call = super().visit_call_(op)
        found = kernel_call(call)
        if found is None:
            return call
        callee, args = found
        name = callee.name_hint
        if name.endswith(PREPACK_SUFFIX) and args and all(is_constant(a) for a in args):
            return self._pack(name, call, args)
        gv = self.functions[self.renamed.get(name, name)]  # the new module's function of that (first) name
        return relax.Call(call.op, [gv, *call.args[1:]], call.attrs, call.ty_args, call.span)

    def visit_global_var_(self, op):  # noqa: N802 - a Relax function called directly: the new module's
        return self.functions.get(op.name_hint, op)


def _used_prim_funcs(mod: tvm.IRModule) -> set[str]:
    """Names of the PrimFuncs that a Relax function of ``mod`` still calls."""
    used: set[str] = set()

    def visit(expr):
        found = kernel_call(expr)
        if found is not None:
            used.add(found[0].name_hint)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return used


def _stubbed(mod: tvm.IRModule, held: Mapping[str, tvm.tirx.PrimFunc]) -> tvm.IRModule:
    """``mod`` with the kernels in ``held`` emptied: TVM's split of layout rewrites visits every
    kernel and refuses some that have nothing to split: a hand-written one (a recurrent layer's,
    from :mod:`explorer.schedule.defaults.recurrence`: "There should be at least a block in the subtree", from
    its buffers allocated in blocks, though ``s_tir.Schedule`` takes it), an extern call with no
    block at all (TOPI's topk and sort on CPU: "There should be a compute block if there is only
    one subtree under the root"); they have no layout rewrite, and go back in unchanged."""
    if not held:
        return mod
    from tvm.script import tirx as T

    empty = tvm.script.from_source(_EMPTY_KERNEL, extra_vars={"T": T}).body
    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs, global_infos=mod.global_infos)
    for gv in list(out.functions.keys()):
        if gv.name_hint in held:
            out[gv] = held[gv.name_hint].with_body(empty)
    return out


_EMPTY_KERNEL = """
@T.prim_func(s_tir=True)
def empty():
    with T.sblock("root"):
        for i in range(1):
            with T.sblock("empty"):
                T.evaluate(0)
"""


def mark_weight_padding(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with each kernel's padded copy of a weight marked as a layout rewrite, so that it is
    computed once here with the packings: a default schedule pads a vector axis no whole number of
    vectors divides (``pad_einsum``: ``W_pad[k, j] = if_then_else(j < n, W[k, j], 0)``), on every
    call: the whole weight copied for each call's few multiply-adds per element.
    Only the export marks it: TVM's RemoveWeightLayoutRewriteBlock, which MetaSchedule and the
    search's timing run, takes only plain copies ("Check failed: (load)"), so a kernel timed alone
    still pads per call (its time errs on the slow side)."""
    out = mod
    for gv, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc) or not weight_positions(func):
            continue
        weights = {func.params[i] for i in weight_positions(func)}
        names = [b.name_hint for b in blocks(func) if b.name_hint.endswith("_pad") and len(b.reads) == 1
                 and LAYOUT_REWRITE_PREPROC not in b.annotations
                 and any(b.reads[0].source.same_as(p) for p in weights) and _padded_copy(b.body)]
        if not names:
            continue
        sch = s_tir.Schedule(tvm.IRModule({"main": func}))
        for name in names:
            sch.annotate(sch.get_sblock(name), LAYOUT_REWRITE_PREPROC, True)
        out = tvm.IRModule({**dict(out.functions), gv: sch.mod["main"]}, attrs=out.attrs,
                           global_infos=out.global_infos)
    return out


def _padded_copy(stmt) -> bool:
    """Whether ``stmt`` is ``X[...] = if_then_else(cond, W[...], constant)``."""
    from tvm.ir import TensorLoad  # what tirx.BufferLoad(...) builds

    call = stmt.value if isinstance(stmt, tvm.tirx.BufferStore) else None
    op = getattr(call, "op", None)
    return getattr(op, "name", "") == "prim.if_then_else" and isinstance(call.args[1], TensorLoad) \
        and isinstance(call.args[2], (tvm.tirx.FloatImm, tvm.tirx.IntImm))


def fold_weight_layouts(mod: tvm.IRModule) -> Folded:
    """``mod`` (scheduled, constants still in ``main``) with every weight's layout rewrite computed
    once here (a weight's padding too: :func:`mark_weight_padding`); kernels whose packed weight is
    not a constant keep computing it per call."""
    mod = mark_weight_padding(mod)
    if not has_layout_rewrites(mod):
        return Folded(mod)
    # only the kernels that pack go through TVM's split; the others are held out and go back unchanged
    held = {gv.name_hint: f for gv, f in mod.functions.items()
            if isinstance(f, tvm.tirx.PrimFunc) and not any(LAYOUT_REWRITE_PREPROC in b.annotations
                                                            for b in blocks(f))}
    try:
        split = relax.transform.SplitLayoutRewritePreproc()(_stubbed(mod, held))
    except Exception as err:  # noqa: BLE001 - TVM's errors carry no type of their own
        raise ExportError(f"could not move the weights' layout rewrites out of the kernels: "
                          f"{short_tvm_message(err)}") from err
    names = {gv.name_hint for gv in split.functions}
    renamed = {n: n.removesuffix(PREPACKED_SUFFIX) for n in names
               if n.endswith(PREPACKED_SUFFIX) and n.removesuffix(PREPACKED_SUFFIX) not in names}
    builder = relax.BlockBuilder(tvm.IRModule({}, attrs=split.attrs, global_infos=split.global_infos))
    functions = {}  # every function of the new module by name (kernels under their task names)
    for gv, func in split.functions.items():
        name = renamed.get(gv.name_hint, gv.name_hint)
        func = held.get(gv.name_hint, func)
        if isinstance(func, tvm.tirx.PrimFunc):
            func = func.with_attr("global_symbol", name)
        functions[name] = builder.add_func(func, name)
    folder = _Fold(split, functions, renamed)
    for gv, func in split.functions.items():
        if isinstance(func, relax.Function):
            builder.update_func(functions[gv.name_hint], folder.visit_expr(func))
    out = builder.get()
    used = _used_prim_funcs(out)
    kept = {gv: f for gv, f in out.functions.items()
            if not (gv.name_hint.endswith(PREPACK_SUFFIX) and gv.name_hint not in used)}
    out = tvm.IRModule(kept, attrs=out.attrs, global_infos=out.global_infos)
    return Folded(out, folder.packed_from, folder.calls)


__all__ = ["Folded", "fold_weight_layouts", "has_layout_rewrites", "mark_weight_padding"]
