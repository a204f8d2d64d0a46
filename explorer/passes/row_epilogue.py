"""The element-wise steps after a convolution on tiled rows, computed on its rows: in its kernel.

:mod:`explorer.passes.conv_rows` computes a convolution over rows the direct AMX kernel tiles (a 1x1
one over its ``H x W`` map as one row of ``H * W`` pixels padded to ``P``; a strided one with wider
output rows) and reads the map off those rows: ``permute_dims(reshape(strided_slice(row)), NCHW)``.
What follows the convolution (its bias, a batch-norm's scale and shift, its ReLU, the residual add)
came after that reshape, and ``FuseOps`` fuses no reshape into a convolution's kernel: each step ran as
a kernel of its own, reading and writing the whole map again (TensorFlow's ResNet50V2 at 160 x 160:
~0.8 ms of 8.5 at one thread).

Here such a step is computed on the rows instead, before the slice and the reshape, where it joins
the convolution's epilogue:

- **A step by a per-channel constant or a scalar** (bias, batch-norm scale and shift, ``max(x, 0)``),
  **or with no other tensor** (ReLU, clip, sigmoid): the slice cuts pixels and the reshape regroups
  them, the channel axis stays last and whole, so the step commutes with both exactly (the constant
  laid out channels last). The padded pixels get the step too, and are cut after, as before.
- **A step between two maps both read off rows** (ResNet50V2's residual add: the block's output and
  the previous block's sum, or its shortcut convolution): computed on the two rows after their
  slices (``1 x 1 x HW x C``: the reshape of a whole row is a view, no copy), the sum a row in turn,
  so the next block's batch-norm, ReLU and convolution read it as a row. A map computed otherwise (a
  max pool's) stays where it is: that add is fused with the pool and the next batch-norm already.

A step on rows a map read twice (a block's sum: the next batch-norm and the next residual add) is
computed after the slice, on the sum's row (its slice then has both readers; before it, the slice
would be read twice and no longer fuse into the convolution). A convolution on tiled rows whose
input is itself read off a row reads that row (``reshape(reshape(row))`` is the row). The values are
those of the graph as it was: the same operations on the same numbers.

bf16 on AMX (2-core KVM guest), bundles alternated in one process, outputs identical to before: ResNet50V2
at 2 threads (idle rounds only, load 1.0-2.0) 0.985x, 0.968x, 0.988x, 0.981x wall (medians of 12-14 rounds,
order swapped in turn); at 1 thread 0.993x, 0.993x, 0.998x: its element-wise kernels 1.008 -> 0.620 ms, its
convolutions 7.279 -> 7.533 ms (a residual add in the epilogue costs nearly what its own kernel did).
2 threads: MobileNetV2 (ReLU6 after its padded 1x1s) 0.885x, pd_ocr_det_db 0.941x, DenseNet-121 0.986x.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from explorer.ir.relax_walk import is_constant, op_name, tensor_info, use_counts
from explorer.passes.call_rewrite import static_ints
from explorer.passes.clip_ops import scalar_min_max
# (the element-wise operators SinkTransposes moves a transpose through, ReLU6's TensorIR halves: one list each)
from explorer.passes.sink_transposes import BINARY_OPS, UNARY_OPS

TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)
_PERMUTE, _RESHAPE, _SLICE, _CONV2D = "relax.permute_dims", "relax.reshape", "relax.strided_slice", "relax.nn.conv2d"


class _View(NamedTuple):
    """An NCHW map read off an NHWC row: ``permute_dims(reshape?(strided_slice?(row)), NCHW)``."""

    row: relax.Expr
    cut: relax.Call | None  # the strided_slice of the row (its padded pixels off)
    flat: relax.Expr  # what the reshape reads: the sliced row, or the row
    reshape: relax.Call | None  # the reshape to the map's pixels


def _shape(expr) -> list[int] | None:
    shape = tensor_info(getattr(expr, "ty", None))[0]
    return None if shape is None else static_ints(shape)


def _channel_constant(expr, channels: int) -> relax.Expr | None:
    """``expr`` for an NHWC row where it is a constant that broadcasts over an NCHW map of ``channels``
    channels along its channel axis alone (a bias, a batch-norm's scale: ``1 x C x 1 x 1``) or not at
    all (a scalar); None for anything else."""
    if not is_constant(expr):
        return None
    value = expr.value.numpy()
    if value.ndim > 4:
        return None
    if value.size == 1:
        return expr  # broadcasts the same either way
    n, c, h, w = (1,) * (4 - value.ndim) + value.shape
    if (n, h, w) != (1, 1, 1) or c != channels:
        return None
    return relax.const(np.ascontiguousarray(value.reshape(1, 1, 1, c)), str(value.dtype))


@mutator
class _RowEpilogues(PyExprMutator):
    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.mod = mod
        self.uses: dict = {}
        self.rows: set = set()  # the rows this walk computed (a step's output)
        self.moved = 0

    def _bound(self, expr, name: str) -> relax.Call | None:
        """The call of operator ``name`` that ``expr`` (a variable) is bound to, else None."""
        value = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
        return value if isinstance(value, relax.Call) and op_name(value) == name else None

    def _permute(self, expr, axes: tuple[int, ...]) -> relax.Call | None:
        call = self._bound(expr, _PERMUTE)
        return call if call is not None and tuple(int(a) for a in call.attrs.axes) == axes else None

    def _is_row(self, expr) -> bool:
        """A convolution's output transposed to NHWC, or a row a step here computed."""
        if expr in self.rows:
            return True
        nhwc = self._permute(expr, TO_NHWC)
        return nhwc is not None and self._bound(nhwc.args[0], _CONV2D) is not None

    def _view(self, expr) -> _View | None:
        """``expr`` as a map read off a row (the channel axis last and whole all along), else None."""
        nchw = self._permute(expr, TO_NCHW)
        if nchw is None:
            return None
        reshape = self._bound(nchw.args[0], _RESHAPE)
        flat = reshape.args[0] if reshape is not None else nchw.args[0]
        cut = self._bound(flat, _SLICE)
        row = cut.args[0] if cut is not None else flat
        if (reshape is None and cut is None) or not self._is_row(row):
            return None
        before, after = _shape(flat), _shape(nchw.args[0])
        if before is None or after is None or len(before) != 4 or before[-1] != after[-1]:
            return None  # a reshape that regroups the channels
        if cut is not None and 3 in {int(a) % 4 for a in cut.args[1]}:
            return None  # a slice of the channels (axis 3 or -1)
        return _View(row, cut, flat, reshape)

    def _again(self, call: relax.Call, first: relax.Expr) -> relax.Expr:
        """``call`` with ``first`` for its first argument, emitted."""
        return self.builder_.emit(relax.Call(call.op, [first, *call.args[1:]], call.attrs))

    def _on_row(self, call: relax.Call, args: list, at: int, view: _View) -> relax.Expr | None:
        """``call`` computed on the row of its argument ``at`` (``args``: the others, for the row)."""
        if self.uses.get(call.args[at], 0) == 1:  # before the slice: into the convolution's epilogue
            row, cut = view.row, view.cut
        elif view.reshape is not None:  # the map has other readers: after the slice, which they share
            row, cut = view.flat, None
        else:
            return None
        args[at] = row
        step = self.builder_.emit(relax.Call(call.op, args, call.attrs))
        self.rows.add(step)
        flat = self._again(cut, step) if cut is not None else step
        return relax.op.permute_dims(self._again(view.reshape, flat) if view.reshape is not None else flat, TO_NCHW)

    def _on_rows(self, call: relax.Call, views: list[_View]) -> relax.Expr | None:
        """A step between two maps read off rows, on the rows after their slices (module docstring)."""
        shape = _shape(call)
        if (shape is None or len(shape) != 4 or any(_shape(a) != shape for a in call.args[:2])
                or all(v.reshape is None for v in views)):
            return None  # a step between two strided convolutions' rows fuses after the slice already
        n, c, h, w = shape
        flats = [self._flat(v.flat, [n, 1, h * w, c]) for v in views]
        step = self.builder_.emit(relax.Call(call.op, flats, call.attrs))
        self.rows.add(step)
        return relax.op.permute_dims(self.builder_.emit(relax.op.reshape(step, [n, h, w, c])), TO_NCHW)

    def _flat(self, expr, shape: list[int]) -> relax.Expr:
        """``expr`` reshaped to ``shape``: itself where it has that shape, what a reshape reads reshaped again."""
        earlier = self._bound(expr, _RESHAPE)
        expr = earlier.args[0] if earlier is not None else expr
        return expr if _shape(expr) == shape else self.builder_.emit(relax.op.reshape(expr, shape))

    def _relax_op(self, call: relax.Call) -> relax.Call:
        """``call`` as a Relax operator where it is a ``call_tir`` of the ONNX importer's ReLU6 halves
        (a scalar ``max`` or ``min``: :mod:`explorer.passes.clip_ops`), else itself."""
        if op_name(call) != "relax.call_tir" or len(call.args) < 2 or not isinstance(call.args[1], relax.Tuple):
            return call
        func = self.mod.functions.get(call.args[0]) if isinstance(call.args[0], tvm.ir.GlobalVar) else None
        make = scalar_min_max(func) if isinstance(func, tvm.tirx.PrimFunc) and len(call.args[1].fields) == 2 else None
        return call if make is None else make(*call.args[1].fields)

    def _step(self, call: relax.Call) -> relax.Expr | None:
        call = self._relax_op(call)
        name = op_name(call)
        if name in UNARY_OPS and call.args:
            view = self._view(call.args[0])
            return None if view is None else self._on_row(call, list(call.args), 0, view)
        if name not in BINARY_OPS or len(call.args) != 2:
            return None
        views = [self._view(a) for a in call.args]
        if all(v is not None for v in views):
            return self._on_rows(call, views)
        for at, view in enumerate(views):
            if view is not None:
                channels = _shape(call.args[at])
                other = _channel_constant(call.args[1 - at], channels[1]) if channels else None
                if other is None:
                    return None
                args = list(call.args)
                args[1 - at] = other
                return self._on_row(call, args, at, view)
        return None

    def _reshape(self, call: relax.Call) -> relax.Expr | None:
        """``reshape(permute_dims(permute_dims(u, NCHW), NHWC))`` (a convolution on tiled rows reading a
        map read off a row) as a reshape of ``u`` (of what ``u`` reshapes: the row itself)."""
        if op_name(call) != _RESHAPE:
            return None
        nhwc = self._permute(call.args[0], TO_NHWC)
        nchw = self._permute(nhwc.args[0], TO_NCHW) if nhwc is not None else None
        shape = _shape(call)
        return None if nchw is None or shape is None else self._flat(nchw.args[0], shape)

    def visit_call_(self, op):
        call = self.visit_expr_post_order(op)
        if not isinstance(call, relax.Call):
            return call
        new = self._step(call)
        new = self._reshape(call) if new is None else new
        if new is None:
            return call
        self.moved += 1
        return new


def epilogues_on_rows(mod: tvm.IRModule) -> tuple[tvm.IRModule, int]:
    """``mod`` (convolutions on tiled rows: :func:`explorer.passes.conv_rows.convs_on_tiled_rows`) with
    the element-wise steps after them computed on their rows (module docstring), and how many rewrites
    (steps moved, reshapes of reshapes joined); ``mod`` itself where there were none."""
    walker = _RowEpilogues(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            walker.uses = use_counts(func)
            walker.builder_.update_func(gv, walker.visit_expr(func))
    if not walker.moved:
        return mod, 0
    # the chains read off the rows before, now unread; the aliases left (``y = row``) gone: FuseOps
    # reads an alias as a step of its own
    out = relax.transform.DeadCodeElimination()(walker.builder_.get())
    return relax.transform.CanonicalizeBindings()(out), walker.moved


__all__ = ["epilogues_on_rows"]
