"""A bf16 build's products of two activations (attention's ``Q K^T`` and ``P V``) as bf16 kernels,
fp32 accumulation: what :func:`explorer.passes.bf16_dense.bf16_products` writes for a matmul with no
weights.

For ``R.matmul(a, b)`` with ``a`` ``[..., M, K]`` and ``b`` ``[..., K, N]`` both computed at run
time (float32, static shapes, the same batch axes, at least one: attention's batch and heads), K
even and N a multiple of 16, it writes one kernel, :func:`batch_dense_bf16`, that rounds both to
bf16 (nearest even) in packing blocks of its own (``a`` as rows of bf16 bits; ``b`` into panels of
16 columns x pairs along K, ``[..., N/16, K/2, 16, 2]``: the layout a weight product's packed
weights have, so the same AMX and AVX512-BF16 instructions read it,
:mod:`explorer.schedule.bf16_dot`), then multiplies in bf16 and sums in fp32. The scale after
``Q K^T`` fuses into the kernel as a weight product's bias does. Softmax stays fp32. Where ``b``
is a transpose (``K^T``: the heads split with ``[0, 2, 3, 1]``), the kernel reads ``K`` as Q and
V come (``[0, 2, 1, 3]``, :func:`untransposed`) and packs its rows: the copy that splits K's
heads then writes whole rows, as Q's and V's do (0.073 -> 0.025 ms in BERT's 1-thread profile).

Rounding both operands costs about 2^-9 of each; the sums stay well inside the build's tolerance
(:data:`explorer.precision.BF16_TOLERANCE`; OpenVINO's bf16 runs attention so too).
"""

from __future__ import annotations

import tvm
from tvm import relax, te

from explorer.ir.relax_walk import is_constant, tensor_info
from explorer.schedule.bf16_dot import BATCH_ATTR, BF16_ATTR, PACK_ATTR, PAIR, PANEL, to_bits, widen

_MATMUL, _PERMUTE = tvm.ir.Op.get("relax.matmul"), tvm.ir.Op.get("relax.permute_dims")
_FLOAT_OUT = ("", "None", "void", "float32")


def batch_dense_bf16(a: te.Tensor, b: te.Tensor, b_rows: bool = False) -> te.Tensor:
    """``c[..., i, j] = sum f32(bf16(a[..., i, k])) * f32(bf16(b[..., k, j]))``, fp32 sums; the
    rounding of each operand a block of its own (``b``'s into panels of 16 columns x pairs).
    ``b_rows``: ``b`` is given as its transpose ``[..., N, K]`` (attention's K as it comes, one
    row a token: its panels then read rows, pairs along K side by side)."""
    *lead, m, k = (int(v) for v in a.shape)
    n = int(b.shape[-2 if b_rows else -1])
    panels = n // PANEL
    ab = te.compute(a.shape, lambda *ix: to_bits(a[ix]), name="bf16_pack", attrs={PACK_ATTR: 1})

    def panel(*ix):
        *h, p, k2, c, kk = ix
        return to_bits(b[(*h, p * PANEL + c, k2 * PAIR + kk)] if b_rows else b[(*h, k2 * PAIR + kk, p * PANEL + c)])
    bb = te.compute((*lead, panels, k // PAIR, PANEL, PAIR), panel, name="bf16_pack_b", attrs={PACK_ATTR: 1})
    k2, kk = te.reduce_axis((0, k // PAIR), "k2"), te.reduce_axis((0, PAIR), "kk")

    def product(*idx):
        *h, i, j = idx
        return te.sum(widen(ab[(*h, i, k2 * PAIR + kk)]) * widen(bb[(*h, j // PANEL, k2, j % PANEL, kk)]),
                      axis=[k2, kk])
    return te.compute((*lead, m, n), product, name="batch_dense_bf16",
                      attrs={BF16_ATTR: panels, BATCH_ATTR: len(lead)})


def batch_dense_bf16_rows(a: te.Tensor, bt: te.Tensor) -> te.Tensor:
    """:func:`batch_dense_bf16` of ``a`` by the transpose of ``bt`` (``[..., N, K]``)."""
    return batch_dense_bf16(a, bt, b_rows=True)


def untransposed(b, bound):
    """Where ``b`` is a ``permute_dims`` of some ``x`` (attention's ``K^T``: ``[0, 2, 3, 1]`` of the
    split heads), ``(x, axes)`` with the last two axes swapped, i.e. the permutation that gives
    ``b``'s transpose (``[0, 2, 1, 3]``: what Q and V get) where that keeps ``x``'s last axis last
    (its rows then read whole); else None. ``bound(var)`` is the value a
    variable is bound to."""
    rhs = bound(b)
    if not (isinstance(rhs, relax.Call) and rhs.op.same_as(_PERMUTE)) or rhs.attrs.axes is None:
        return None
    axes = [int(v) for v in rhs.attrs.axes]
    if len(axes) < 3 or axes[-2] != len(axes) - 1:  # only where the transpose keeps x's last axis last
        return None
    return rhs.args[0], axes[:-2] + [axes[-1], axes[-2]]


def fits(call) -> bool:
    """Whether ``call`` is a product of two activations this pass computes in bf16 (module docstring)."""
    if not (isinstance(call, relax.Call) and call.op.same_as(_MATMUL)) or str(call.attrs.out_dtype) not in _FLOAT_OUT:
        return False
    a, b = call.args
    if is_constant(a) or is_constant(b):
        return False
    (sa, da), (sb, db) = tensor_info(a.ty), tensor_info(b.ty)
    if sa is None or sb is None or da != "float32" or db != "float32" or len(sa) < 3 or len(sa) != len(sb):
        return False
    return tuple(sa[:-2]) == tuple(sb[:-2]) and sa[-1] == sb[-2] and sa[-1] % PAIR == 0 and sb[-1] % PANEL == 0


__all__ = ["batch_dense_bf16", "batch_dense_bf16_rows", "fits", "untransposed"]
