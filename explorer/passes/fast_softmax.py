"""Softmax with TVM's fast exponential, normalised by a multiplication: what ``FastMathTransform``
(:mod:`explorer.passes.fast_math`) makes of ``relax.nn.softmax``.

TOPI's ``fast_softmax`` divides every exponential by its row's sum; a vector division is several
times the cost of a multiplication (``vdivps``), and the division was the largest part of the
kernel after the exponentials. Here each row's sum is inverted once (``T_softmax_recip``, a row's
scalar) and the exponentials multiplied by it: BERT's 12 x 128 x 128 softmax 0.82x, SVTR's
4 x 256 x 256 0.84x (row by row, :mod:`explorer.schedule.defaults.row_chain`; 2 threads, a busy
machine, alternated). ``e * (1 / s)`` differs from ``e / s`` by at most about one unit in the last
place, far inside any fp32 tolerance. The block names are TOPI's, with the reciprocal added."""

from __future__ import annotations

import tvm
from tvm import te, topi


def fast_softmax(x: te.Tensor, axis: int = -1) -> te.Tensor:
    """``softmax(x)`` along ``axis``: the row's max, ``fast_exp`` of the differences, their sum, its
    reciprocal, the exponentials times it."""
    shape = x.shape
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis < len(shape):
        raise ValueError(f"softmax axis {axis} is outside a tensor of {len(shape)} dimensions")

    def row(indices):  # the indices of a row's scalar: all but the softmax axis
        return tuple(v for i, v in enumerate(indices) if i != axis)

    def along(indices, k):  # the element of the row at ``k``
        return (*indices[:axis], k, *indices[axis:])

    reduced = tuple(d for i, d in enumerate(shape) if i != axis)
    k_max = te.reduce_axis((0, shape[axis]), name="k")
    max_elem = te.compute(reduced, lambda *ix: te.max(x[along(ix, k_max)], axis=k_max), name="T_softmax_maxelem")
    delta = te.compute(shape, lambda *ix: x[ix] - max_elem[row(ix)], name="T_softmax_delta")
    exp = topi.math.fast_exp(delta)
    k_sum = te.reduce_axis((0, shape[axis]), name="k")
    expsum = te.compute(reduced, lambda *ix: te.sum(exp[along(ix, k_sum)], axis=k_sum), name="T_softmax_expsum")
    recip = te.compute(reduced, lambda *ix: tvm.tirx.const(1, expsum.dtype) / expsum[ix], name="T_softmax_recip")
    return te.compute(shape, lambda *ix: exp[ix] * recip[row(ix)], name="T_softmax_norm", attrs={"axis": axis})


__all__ = ["fast_softmax"]
