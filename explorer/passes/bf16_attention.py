"""A bf16 build's products of two activations (attention's ``Q K^T`` and ``P V``) as bf16 kernels,
fp32 accumulation: what :func:`explorer.passes.bf16_dense.bf16_products` writes for a matmul with no
weights.

For ``R.matmul(a, b)`` with ``a`` ``[..., M, K]`` and ``b`` ``[..., K, N]`` both computed at run
time (float32, static shapes, the same batch axes, at least one: attention's batch and heads), K
even and N a multiple of 16 once padded (:func:`fits`, :func:`padded_shape`), it writes one kernel,
:func:`batch_dense_bf16`, that multiplies the operands' bf16 bits (rounded to nearest even) and
sums in fp32. ``b`` is read in panels of 16 columns x pairs along K (``[..., N/16, K/2, 16, 2]``:
the layout a weight product's packed weights have, so the same AMX and AVX512-BF16 instructions
read it, :mod:`explorer.schedule.bf16_dot`). Softmax stays fp32.

The main path: an operand that is a heads split (Q, K, V: a ``permute_dims`` of the Q/K/V
product's slices, :func:`split_heads`) is packed ahead, by a kernel of its own (:func:`bf16_rows`,
:func:`bf16_panels`) that FuseOps fuses into the split's copy, so the copy reads the product's
fp32 output and writes the bf16 bits in the layout the product reads (half the bytes; panels
scheduled by :mod:`explorer.schedule.defaults.bf16_panels`). Where ``b`` is a transpose (``K^T``:
the heads split with ``[0, 2, 3, 1]``), K is split as Q and V are (``[0, 2, 1, 3]``,
:func:`untransposed`) and its panels read its rows. A scale after ``Q K^T`` that is a power of two
(``1/8`` for 64-wide heads) multiplies Q in its packing instead (:func:`folded_scales`: exact), so
the product's tiles store the scores themselves; any other scale fuses into the product's kernel
as a weight product's bias does. BERT's layer, 1 thread, profile: ``Q K^T`` 0.100 -> 0.055 ms,
``P V`` 0.082 -> 0.048, the three copies ~0.08 -> 0.071; the layer 0.96x (alternated bundles, CPU
time, busy machine). Before that, K's rows read by the kernel's own packing: 0.073 -> 0.025 ms.

Heads whose width is no whole AMX tile (SVTR's 24): on a CPU with AMX-BF16, K is padded with zeros
to a tile row (32) and N to whole panels of 16 in the packings (:func:`padded_shape`), the padded
columns sliced off after (FuseOps fuses the slice into the product's kernel); zeros times zeros add
nothing. K = 24 had run on ``vdpbf16ps`` at half the fp32 FMA rate and N = 24 stayed an fp32
matmul: SVTR (pd_ocr_rec_svtr, 4 heads of 24 over 256 tokens), 1 thread, kernels alone: ``Q K^T``
0.123 -> 0.041 ms, ``P V`` 0.093 -> 0.053; the model at 2 threads 0.862x (bundles alternated, 16
idle rounds, quartiles 0.847-0.908). Without AMX they stay as they were (32 columns are a third more
than 24).

Rows and columns no tile divides (a ViT's 197 tokens) are padded to whole tiles where that adds at
most a quarter, on either instruction, the padded rows sliced off with the columns: a ViT's ``Q
K^T`` ran fp32 on vdpbf16ps (N = 197), and now runs in bf16 on 200 x 224 (vit_tiny, profiled on Zen
5: 0.71 -> 0.48 ms, 12 calls); its ``P V`` (K = 197, odd) stays fp32.

The fallback: an operand that is no heads split (the softmax's output, ``P``) is rounded by the
product's kernel itself, in a packing block of its own.

Rounding both operands costs about 2^-9 of each; the sums stay well inside the build's tolerance
(:data:`explorer.precision.BF16_TOLERANCE`; OpenVINO's bf16 runs attention so too).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax, te

from explorer.ir.relax_walk import is_constant, iter_bindings, tensor_info, use_counts
from explorer.schedule.bf16_dot import (AMX_K, BATCH_ATTR, BF16_ATTR, PACK_ATTR, PAIR, PANEL, PANEL_READ_ATTR,
                                        padded_rows, padded_to, runs_on_tiles, to_bits, widen, zero_beyond)

_MATMUL, _PERMUTE = tvm.ir.Op.get("relax.matmul"), tvm.ir.Op.get("relax.permute_dims")
_MULTIPLY = tvm.ir.Op.get("relax.multiply")
_FLOAT_OUT = ("", "None", "void", "float32")
# The multiply-adds of one head's product (M x K x N) below which it stays fp32: less than one 2x2
# grid of 16-row tiles over K = 32, where packing both operands each call costs more than the tiles
# save. Small encoders (sequence 7-16, heads of 16: 4096) ran 1.4-2.8x slower at bf16 than fp32 at 2
# threads with their attention on AMX (bench_corpus --precision bf16, 2026-12-06); BERT's heads
# (128 x 64 x 128) gain.
MIN_HEAD_PRODUCT = 32 * 32 * 32


def bf16_rows(a: te.Tensor, scale: float = 1.0, k_to: int | None = None, rows_to: int | None = None) -> te.Tensor:
    """``a`` (times ``scale``, a power of two: :func:`folded_scales`) rounded to bf16 (nearest even),
    as its bits (uint16), in its own layout: a product's ``a`` operand packed ahead (fused into the
    kernel that computes ``a``), or a weight product's activations (:func:`~explorer.passes.bf16_dense.dense_bf16`'s
    packing block). ``k_to``, ``rows_to``: its rows padded with zeros to that length, and more rows
    of zeros to that many (:func:`padded_shape`); only static sizes pad (a symbolic one packs as it
    is)."""
    value = (lambda ix: a[ix]) if scale == 1.0 else (lambda ix: a[ix] * tvm.tirx.const(scale, "float32"))
    *lead, m, k = a.shape
    static = all(isinstance(v, (int, tvm.tirx.IntImm)) for v in (m, k))
    pad_rows = rows_to is not None and (not static or rows_to != int(m))
    pad_k = k_to is not None and (not static or k_to != int(k))
    if not (pad_rows or pad_k):
        return te.compute(a.shape, lambda *ix: to_bits(value(ix)), name="bf16_pack", attrs={PACK_ATTR: 1})
    if not static:
        raise ValueError(f"bf16 packing pads static rows only, not {m} x {k} (rows_to={rows_to}, k_to={k_to})")
    m, k = int(m), int(k)

    def padded(*ix):
        *h, i, j = ix
        bits = to_bits(value((*h, tvm.tirx.min(i, m - 1) if pad_rows else i, tvm.tirx.min(j, k - 1) if pad_k else j)))
        bits = zero_beyond(j, k, bits) if pad_k else bits
        return zero_beyond(i, m, bits) if pad_rows else bits
    return te.compute((*lead, rows_to if pad_rows else m, k_to if pad_k else k), padded, name="bf16_pack",
                      attrs={PACK_ATTR: 1})


def bf16_panels(b: te.Tensor, b_rows: bool = False, k_to: int | None = None, n_to: int | None = None) -> te.Tensor:
    """``b`` (``[..., K, N]``; ``b_rows``: given as its transpose ``[..., N, K]``) rounded to bf16 as
    bits, in panels of 16 columns x pairs along K (``[..., N/16, K/2, 16, 2]``): a product's ``b``
    operand packed ahead, or by the product's own packing block. ``k_to``, ``n_to``: K and N padded
    with zeros to those lengths (:func:`padded_shape`)."""
    *lead, k, n = (int(v) for v in b.shape)
    if b_rows:
        k, n = n, k
    kp, np_ = k_to or k, n_to or n

    def panel(*ix):
        *h, p, k2, c, kk = ix
        i, j = k2 * PAIR + kk, p * PANEL + c
        if kp != k:
            i = tvm.tirx.min(i, k - 1)
        if np_ != n:
            j = tvm.tirx.min(j, n - 1)
        bits = to_bits(b[(*h, j, i)] if b_rows else b[(*h, i, j)])
        if kp != k:
            bits = zero_beyond(k2 * PAIR + kk, k, bits)
        if np_ != n:
            bits = zero_beyond(p * PANEL + c, n, bits)
        return bits
    return te.compute((*lead, np_ // PANEL, kp // PAIR, PANEL, PAIR), panel, name="bf16_pack_b",
                      attrs={PACK_ATTR: 1, PANEL_READ_ATTR: "rows" if b_rows else "columns"})


def batch_dense_bf16(a: te.Tensor, b: te.Tensor, b_rows: bool = False, isa: str | None = None,
                     to: tuple[int, int, int] | None = None) -> te.Tensor:
    """``c[..., i, j] = sum f32(bf16(a[..., i, k])) * f32(bf16(b[..., k, j]))``, fp32 sums; the
    rounding of each operand a block of its own (``b``'s into panels of 16 columns x pairs).
    ``b_rows``: ``b`` is given as its transpose ``[..., N, K]`` (attention's K as it comes, one
    row a token: its panels then read rows, pairs along K side by side). An operand given as
    uint16 is already packed (:func:`bf16_rows`, :func:`bf16_panels`): read as it is. ``to``: the
    (M, K, N) the kernel computes (the caller's :func:`padded_shape` of the real sizes, which also
    packed any operand packed ahead); else :func:`padded_shape` for ``isa`` where neither operand
    is packed ahead, the sizes as they are where one is. The result has the padded rows and
    columns (sliced by the caller)."""
    *lead, m, k = (int(v) for v in a.shape)
    n = int(b.shape[-4]) * PANEL if b.dtype == "uint16" else int(b.shape[-2] if b_rows else b.shape[-1])
    packed = a.dtype == "uint16" or b.dtype == "uint16"
    mp, kp, np_ = to or ((m, k, n) if packed else padded_shape(m, k, n, isa))
    ab = a if a.dtype == "uint16" else bf16_rows(a, k_to=kp, rows_to=mp)
    bb = b if b.dtype == "uint16" else bf16_panels(b, b_rows, k_to=kp, n_to=np_)
    m, k = int(ab.shape[-2]), int(ab.shape[-1])
    if int(bb.shape[-3]) * PAIR != k:  # (operands packed ahead each padded their own way)
        raise ValueError(f"the product's operands disagree on K: {k} in a's rows, {int(bb.shape[-3]) * PAIR} "
                         f"in b's panels")
    if to is not None and (m, k, int(bb.shape[-4]) * PANEL) != tuple(to):
        raise ValueError(f"operands packed ahead at {m} x {k} x {int(bb.shape[-4]) * PANEL}, not the {to} the "
                         f"product computes")
    panels = int(bb.shape[-4])
    k2, kk = te.reduce_axis((0, k // PAIR), "k2"), te.reduce_axis((0, PAIR), "kk")

    def product(*idx):
        *h, i, j = idx
        return te.sum(widen(ab[(*h, i, k2 * PAIR + kk)]) * widen(bb[(*h, j // PANEL, k2, j % PANEL, kk)]),
                      axis=[k2, kk])
    return te.compute((*lead, m, panels * PANEL), product, name="batch_dense_bf16",
                      attrs={BF16_ATTR: panels, BATCH_ATTR: len(lead)})


@dataclass(frozen=True)
class ScaleFolds:
    """The decision of :func:`folded_scales`, made once on the function before the rewrite: each
    folded product's call -> its scale (the rewrite packs that product's ``a`` ahead with the scale,
    always), each folded multiply's call -> the product's variable (the multiply is dropped)."""

    scale_of: dict = field(default_factory=dict)
    product_of: dict = field(default_factory=dict)


def folded_scales(func: relax.Function, isa: str | None = None) -> ScaleFolds:
    """The products of two activations of ``func`` whose result is only multiplied by a constant power
    of two (attention's ``Q K^T / 8``) and whose ``a`` is a heads split (packed ahead anyway). The
    scale then multiplies ``a`` in its packing (:func:`bf16_rows`), exactly (bf16 and fp32 keep a
    power of two's product exact), and the product's kernel has no epilogue: its tiles store the
    scores themselves. ``isa``: as :func:`fits` takes it."""
    bindings = [b for b in iter_bindings(func) if isinstance(b, relax.VarBinding)]
    values = {b.var: b.value for b in bindings}
    bound = lambda v: values.get(v, v)  # noqa: E731
    uses = use_counts(func)
    scale_of, product_of = {}, {}
    for b in bindings:
        call = b.value
        if not (isinstance(call, relax.Call) and call.op.same_as(_MULTIPLY)):
            continue
        for side, other in ((0, 1), (1, 0)):
            x, c = call.args[side], call.args[other]
            product = values.get(x) if isinstance(x, relax.Var) else None
            scale = _power_of_two(c)
            if product is not None and scale is not None and uses.get(x) == 1 and fits(product, isa) \
                    and split_heads(product.args[0], bound):
                scale_of[product], product_of[call] = scale, x
                break
    return ScaleFolds(scale_of, product_of)


def _power_of_two(expr) -> float | None:
    """The value of ``expr`` where it is a float32 scalar constant that is a power of two."""
    value = getattr(expr, "value", None) if is_constant(expr) else None
    if not hasattr(value, "numpy"):
        return None
    value = value.numpy()
    if value.dtype != "float32" or value.size != 1 or not np.isfinite(value).all() or value.reshape(-1)[0] == 0:
        return None
    mantissa, _ = np.frexp(float(value.reshape(-1)[0]))
    return float(value.reshape(-1)[0]) if abs(mantissa) == 0.5 else None


def split_heads(x, bound) -> bool:
    """Whether ``x`` is a ``permute_dims`` (attention's heads split off a product's output): a copy
    that can write the operand's bf16 bits, packed, instead of fp32 (module docstring)."""
    rhs = bound(x)
    return isinstance(rhs, relax.Call) and rhs.op.same_as(_PERMUTE)


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


def padded_shape(m: int, k: int, n: int, isa: str | None) -> tuple[int, int, int]:
    """(M, K, N) of a ``m x k x n`` product of two activations as its bf16 kernel computes it on a CPU
    whose bf16 instructions are ``isa`` (None: no rule, as they are), the padding zeros (sliced off
    after). On AMX, where the rows fill whole tiles (:func:`~explorer.schedule.bf16_dot.padded_rows`:
    197 tokens as 208) and K is even: K to a whole tile row (:data:`AMX_K`) and N to whole panels
    (SVTR's heads of 24: K = 24 ran on vdpbf16ps at half the fp32 FMA rate, N = 24 stayed fp32).
    Else, for vdpbf16ps: the rows to whole tiles of 8 and N to whole pairs of panels (or whole
    panels), each where that adds at most a quarter (:func:`~explorer.schedule.bf16_dot.padded_to`):
    a ViT's ``Q K^T`` of 197 tokens as 200 rows by 224 columns (unpadded, it stayed fp32; 13 panels
    took one a tile, 8 chains). An N of 24 (32 is a third more) or an odd K (``P V``'s 197) stays
    as it is there, and :func:`fits` leaves its product fp32: an odd K padded in P's own packing
    made that packing test each value's column (1.7 ms on vdpbf16ps against the fp32 product's
    0.44; the AMX build's not measured)."""
    if isa is None:
        return m, k, n
    if isa == "amx" and k % PAIR == 0:
        k_tile = -(-k // AMX_K) * AMX_K
        m_to = padded_rows(m, k_tile, isa)
        if runs_on_tiles(m_to, k_tile, isa):
            return m_to, k_tile, -(-n // PANEL) * PANEL
    return padded_rows(m, k, "avx512bf16"), k, padded_to(n, (2 * PANEL, PANEL))


def fits(call, isa: str | None = None) -> bool:
    """Whether ``call`` is a product of two activations this pass computes in bf16 (module docstring)."""
    if not (isinstance(call, relax.Call) and call.op.same_as(_MATMUL)) or str(call.attrs.out_dtype) not in _FLOAT_OUT:
        return False
    a, b = call.args
    if is_constant(a) or is_constant(b):
        return False
    (sa, da), (sb, db) = tensor_info(a.ty), tensor_info(b.ty)
    if sa is None or sb is None or da != "float32" or db != "float32" or len(sa) < 3 or len(sa) != len(sb):
        return False
    if not (tuple(sa[:-2]) == tuple(sb[:-2]) and sa[-1] == sb[-2]):
        return False
    _, k, n = padded_shape(int(sa[-2]), int(sa[-1]), int(sb[-1]), isa)
    if k % PAIR or n % PANEL:
        return False
    return int(sa[-2]) * int(sa[-1]) * int(sb[-1]) >= MIN_HEAD_PRODUCT


__all__ = ["MIN_HEAD_PRODUCT", "ScaleFolds", "batch_dense_bf16", "bf16_panels", "bf16_rows", "fits", "folded_scales",
           "padded_shape", "split_heads", "untransposed"]
