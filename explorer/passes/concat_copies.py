"""``ConcatAsCopies``: a concatenation becomes one kernel of plain copies, a block per input.

TOPI writes ``concatenate`` as one expression per output element that picks its input with a chain
of ``if_then_else``, one link per input. Vectorized, the chain becomes selects that load every
input (and compute every producer fused into it) for every element: the 80 hidden states an
unrolled bidirectional LSTM concatenates (:mod:`explorer.models.recurrent`), with the last step's
gates fused in, took 0.07 ms, 27% of the model; GhostNet's two-input channel concatenations,
whose widths are not whole vectors, were its slowest kernel. A concatenation of tensors with
static shapes is written instead as a PrimFunc with one block per input that copies it into its
slice of the output: one load and one store per element, each block vectorized along its own rows
(:func:`explorer.schedule.defaults.simple.schedule_spatial`). GoogLeNet's 4-input concatenation
of 28x28 maps: 45 us -> 18 us timed alone. The kernel stays a kernel of its own (AnnotateTIROpPattern
calls a function of several blocks opaque, so fusion leaves it alone).
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from explorer.passes.call_rewrite import rewrite_calls, static_ints

_CONCAT = tvm.ir.Op.get("relax.concat")


def concat_by_copies(shapes: list[list[int]], axis: int, dtype: str) -> tvm.tirx.PrimFunc:
    """A PrimFunc ``(x0, .., xn-1, out)`` that writes each ``xi`` into its slice of ``out`` along ``axis``."""
    out_shape = list(shapes[0])
    out_shape[axis] = sum(s[axis] for s in shapes)
    as_i64 = lambda dims: [tvm.tirx.IntImm("int64", d) for d in dims]
    with IRBuilder() as builder:
        with T.prim_func():  # no global symbol: a model has several, named by the builder
            T.func_attr({"tirx.noalias": True})
            inputs = [T.arg(f"x{i}", T.Buffer(as_i64(shape), dtype)) for i, shape in enumerate(shapes)]
            out = T.arg("out", T.Buffer(as_i64(out_shape), dtype))
            offset = 0
            with T.sblock("root"):
                for i, (x, shape) in enumerate(zip(inputs, shapes)):
                    with T.grid(*as_i64(shape)) as loops:
                        loops = [loops] if isinstance(loops, tvm.tirx.Var) else loops  # one dim: one Var
                        with T.sblock(f"copy_{i}"):
                            v = T.axis.remap("S" * len(shape), loops)
                            v = [v] if isinstance(v, tvm.tirx.Var) else v
                            at = list(v)
                            at[axis] = v[axis] + tvm.tirx.IntImm("int64", offset)
                            T.reads(x[tuple(v)])
                            T.writes(out[tuple(at)])
                            T.buffer_store(out, x[tuple(v)], at)
                    offset += shape[axis]
    return builder.get()


def _as_copies(call: relax.Call, builder: relax.BlockBuilder):
    if not call.op.same_as(_CONCAT) or call.attrs.axis is None:
        return None
    tensors = call.args[0]
    if not isinstance(tensors, relax.Tuple) or len(tensors.fields) < 2:
        return None
    infos = [f.ty for f in tensors.fields]
    if not all(isinstance(s, relax.TensorType) and s.shape is not None for s in infos):
        return None
    shapes = [static_ints(s.shape.values) for s in infos]
    dtypes = {s.dtype for s in infos}
    if any(shape is None for shape in shapes) or len(dtypes) != 1:
        return None
    axis = int(call.attrs.axis) % len(shapes[0])
    func = concat_by_copies(shapes, axis, dtypes.pop())
    gv = builder.add_func(func, "concat_by_copies")
    return relax.call_tir(gv, list(tensors.fields), call.ty)


@tvm.transform.module_pass(opt_level=0, name="ConcatAsCopies")
def ConcatAsCopies(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """Concatenations of static tensors as copy kernels (see the module docstring)."""
    return rewrite_calls(mod, _as_copies)


__all__ = ["ConcatAsCopies", "concat_by_copies"]
