"""``Bf16Products``: a bf16 build's matmuls as bf16 kernels, fp32 accumulation: those with constant
weights (below), and products of two activations (attention's ``Q K^T`` and ``P V``,
:mod:`explorer.passes.bf16_attention`).

For ``R.matmul(x, W)`` (``x`` float32 of rank >= 2, ``W`` a constant float32 ``[K, N]``, or the
transpose of a constant ``[N, K]``) it writes

    y = dense_bf16(reshape(x, [M, K]), packed(W))          reshaped back to x's leading axes

except where ``x`` is ``[1, M, K]`` (a transformer's hidden states at batch 1): then the kernel
reads ``x`` and writes ``[1, M, N]`` as they are, with no reshape on either side, so the bias,
residual and activation after it fuse into the product's kernel (a reshape between them keeps
FuseOps from fusing: measured on the BERT layer, docs/notes/measurements.md).

where ``packed(W)`` is the weights rounded to bf16 (nearest even) **once, here**, stored as their
16 bits (uint16: numpy and the bundle's parameter files have no bf16) in panels of 16 output
channels x pairs along K (``[N/16, K/2, 16, 2]``, channels padded with zero weights, sliced off
after), the layout :mod:`explorer.schedule.bf16_dot`'s instructions read. The kernel itself
rounds its fp32 activations to bf16 in a packing block of its own, then multiplies in bf16 and
accumulates in fp32.

Products that read the same activations (a transformer's Q, K and V projections) become one
kernel on their weights side by side (``[K, N1 + N2 + N3]``, packed once), sliced after: one
packing of the activations instead of three, one kernel with three times the tiles to spread over
the cores (:func:`sibling_products`; BERT's layer 3-5% faster, docs/notes/measurements.md).
Their bias adds then join the slices' reshape and transpose kernels.

Kept in fp32 (unchanged): everything else, i.e. element-wise work, bias adds, activations,
softmax, layer and batch normalisation, reductions, recurrent state, convolutions (their own
pass: :mod:`explorer.passes.bf16_conv`). Products of two activations (attention's ``Q K^T`` and
``P V``) have no weights to convert at build time: :mod:`explorer.passes.bf16_attention` rounds
both at run time, a heads split in the copy that splits it, the softmax's output in the product's
kernel (:func:`explorer.passes.bf16_attention.fits` says which products). A matmul whose K is
odd, or whose weights are not constants, is left.

Where a weight product pays in bf16 depends on the CPU's bf16 instructions (:func:`why_fp32`, the
one rule; each product a build keeps in fp32 is listed with why, :func:`kept_in_fp32`). Swept with
``benchmarks/bench_bf16_sizes.py`` (rows 1-256, N and K 64-768, alternated with fp32 in one process,
the AMX CPU of 2026-12-06 at load 3-6): on AMX tiles every product the tiles take paid, 16 x 64 x 64
included (0.1-0.6x fp32's time at 1 and 2 threads), once products under 2^21 multiply-adds ran on
one core (:data:`explorer.schedule.defaults.bf16.AMX_PARALLEL_MIN_MACS`; before, parallel, 16 x 64 x
64 took 4.1x and 64 x 64 x 64 1.3x fp32's time at 2 threads). On vdpbf16ps (the same CPU with its
tiles hidden: it runs at half the fp32 FMA rate there) bf16 paid only where few rows read many
weights: 0.2-1.0x at 8-16 rows by >= 256 outputs and N x K >= 65536 (one row of 256-768 outputs
by 256 went either way, 0.85-2.2x), and 1.1-3x slower elsewhere (every product of >= 64 rows at 1
thread; 16 x 64 x 64-768 1.3-2.4x), so those stay fp32 (under 2^14 multiply-adds, a classifier's
1 x 64 -> 10, bf16 as before: sub-microsecond either way, 1 x 64 x 64 0.74-0.78x). A CPU whose
vdpbf16ps was measured on it at the rate where compute-bound convolutions pay
(:func:`explorer.passes.bf16_conv.vdpbf16ps_pays`: 1.5x its fp32 FMAs; none measured so far) runs
the products of more rows in bf16 too (``fast_vectors``): one measured rate decides both. Products
of rows that no tile takes (not a multiple of 16 nor padded to one: an encoder at sequence 7) run on
vdpbf16ps on an AMX CPU too, and its rule holds for them.

Rows that the largest tile does not divide are padded with zeros to whole tiles where that adds at
most a quarter of them (:func:`~explorer.schedule.bf16_dot.padded_rows`; the packing block writes
the zeros, a strided_slice that FuseOps fuses into the product's own kernel takes them off, in the
epilogue it runs per tile): a ViT's 197 tokens are computed as 200 rows on
vdpbf16ps (tiles of 8 rows; 197 took tiles of one row, 3.4x slower alone) and 208 on AMX (whole
tiles); Swin's 196 as 200 (196 took tiles of 4, 1.4x slower alone).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, te
from tvm.relax.expr_functor import PyExprMutator, mutator

from explorer.ir.relax_walk import is_constant, iter_bindings, tensor_info
from explorer.passes.bf16_attention import (ScaleFolds, batch_dense_bf16, bf16_panels, bf16_rows, fits, folded_scales,
                                            padded_shape, split_heads, untransposed)
from explorer.passes.call_rewrite import static_ints
from explorer.schedule.bf16_dot import BF16_ATTR, PAIR, PANEL, QUIET_NAN_BIT, padded_rows, runs_on_tiles, widen

_MATMUL, _PERMUTE = tvm.ir.Op.get("relax.matmul"), tvm.ir.Op.get("relax.permute_dims")
_FLOAT_OUT = ("", "None", "void", "float32")


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """fp32 ``x`` rounded to nearest even bf16, as uint16 bits (what :func:`to_bits` computes, NaN included)."""
    f = np.ascontiguousarray(x, np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    return np.where(np.isnan(f), (u >> 16) | QUIET_NAN_BIT, (u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_round(x: np.ndarray) -> np.ndarray:
    """fp32 ``x`` rounded to bf16 and back to fp32 (a reference for tests)."""
    return (bf16_bits(x).astype(np.uint32) << 16).view(np.float32)


def pack_weights(w_kn: np.ndarray) -> np.ndarray:
    """``[K, N]`` fp32 weights as bf16 bits in panels ``[ceil(N/16), K/2, 16, 2]`` (K even)."""
    k, n = w_kn.shape
    npad = -(-n // PANEL) * PANEL
    wp = np.zeros((k, npad), np.float32)
    wp[:, :n] = w_kn
    bits = bf16_bits(wp)  # [K, Np]
    return np.ascontiguousarray(bits.reshape(k // PAIR, PAIR, npad // PANEL, PANEL).transpose(2, 0, 3, 1))


def dense_bf16(x: te.Tensor, w: te.Tensor, rows_to: int | None = None) -> te.Tensor:
    """``y[i, j] = sum f32(bf16(x[i, 2 k2 + kk])) * f32(W[j // 16, k2, j % 16, kk])``, fp32
    accumulation; ``x`` fp32 ``[M, K]`` or ``[1, M, K]`` (then ``y`` is ``[1, M, N]``: a unit loop
    outside the product's four), ``W`` bf16 bits (see :func:`pack_weights`). ``rows_to``: the rows
    padded with zeros to that many (:func:`~explorer.schedule.bf16_dot.padded_rows`; ``y`` has as many,
    to be sliced)."""
    *lead, m, k = x.shape
    if len(lead) > 1 or any(int(v) != 1 for v in lead):
        raise ValueError(f"dense_bf16 takes [M, K] or [1, M, K] activations, not {list(x.shape)}")
    panels, half = int(w.shape[0]), int(w.shape[1])
    xb = bf16_rows(x, rows_to=rows_to)  # (the rows padded with zeros where rows_to says: static rows only)
    m_to = xb.shape[-2]
    k2, kk = te.reduce_axis((0, half), "k2"), te.reduce_axis((0, PAIR), "kk")

    def product(*idx):
        *rows, j = idx
        return te.sum(widen(xb[(*rows, k2 * 2 + kk)]) * widen(w[j // PANEL, k2, j % PANEL, kk]), axis=[k2, kk])
    return te.compute((*lead, m_to, panels * PANEL), product, name="dense_bf16", attrs={BF16_ATTR: panels})


def constant_value(expr) -> np.ndarray | None:
    """The value of ``expr`` where it is a Relax constant (else None)."""
    value = getattr(expr, "value", None) if is_constant(expr) else None
    return value.numpy() if hasattr(value, "numpy") else None


def _weights_of(expr, bound) -> np.ndarray | None:
    """The ``[K, N]`` fp32 weights ``expr`` stands for (a constant, or a constant's transpose);
    ``bound(var)`` is the value a variable is bound to (or the variable)."""
    w = constant_value(expr)
    if w is None:
        rhs = bound(expr)
        if isinstance(rhs, relax.Call) and rhs.op.same_as(_PERMUTE) and rhs.attrs.axes is not None \
                and [int(a) for a in rhs.attrs.axes] == [1, 0]:
            inner = constant_value(rhs.args[0])
            w = None if inner is None else inner.T
    if w is None or w.ndim != 2 or w.dtype != np.float32 or w.shape[0] % PAIR:
        return None
    return w


def _product_weights(call, bound) -> np.ndarray | None:
    """The weights of ``call`` where it is a matmul this pass computes in bf16 (else None)."""
    if not (isinstance(call, relax.Call) and call.op.same_as(_MATMUL)) or str(call.attrs.out_dtype) not in _FLOAT_OUT:
        return None
    shape, dtype = tensor_info(call.args[0].ty)
    out_shape, _ = tensor_info(call.ty)
    w = _weights_of(call.args[1], bound)
    if w is None or shape is None or out_shape is None or len(shape) < 2 or dtype != "float32" \
            or shape[-1] != w.shape[0]:
        return None
    return w


def product_weights(func: relax.Function) -> dict:
    """Each weight product of ``func`` (the call a binding holds) -> its ``[K, N]`` fp32 weights,
    in binding order: every weight read out of its constant once, for the whole rewrite."""
    values = {b.var: b.value for b in iter_bindings(func) if isinstance(b, relax.VarBinding)}
    found = ((value, _product_weights(value, lambda v: values.get(v, v))) for value in values.values())
    return {call: w for call, w in found if w is not None}


def sibling_products(weights: dict) -> list[list[tuple[relax.Call, np.ndarray]]]:
    """The groups of two or more of the weight products ``weights`` (:func:`product_weights`) that
    read the same activations (attention's Q, K and V projections), each product with its ``[K, N]``
    weights, in binding order: each group becomes one kernel on the weights side by side (one
    packing of the activations, one wider product, sliced after)."""
    groups: dict = {}
    for call, w in weights.items():
        if isinstance(call.args[0], relax.Var):
            groups.setdefault(call.args[0], []).append((call, w))
    return [g for g in groups.values() if len(g) > 1]


# On a CPU whose bf16 instructions are vectors alone (vdpbf16ps, measured at half the fp32 FMA rate on
# the AMX CPU with its tiles hidden), a bf16 product gains by reading half the weight bytes: where its
# rows are few and its weights many (module docstring, benchmarks/bench_bf16_sizes.py); a product of
# more rows (compute-bound) gains only where vdpbf16ps was measured fast (``fast_vectors``: the rate at
# which convolutions pay, :func:`explorer.passes.bf16_conv.why_convs_fp32`)
VECTOR_MAX_ROWS = 16
VECTOR_MIN_WEIGHTS = 256 * 256  # N x K
VECTOR_MIN_CHANNELS = 256  # N
VECTOR_ANY_MACS = 1 << 14  # below: bf16 as it comes (1 x 64 x 64 0.74-0.78x fp32's time; sub-microsecond)


def why_fp32(rows: int, channels: int, reduction: int, isa: str, *, fast_vectors: bool = False) -> str | None:
    """Why a weight product of ``rows`` x ``reduction`` -> ``channels`` stays fp32 on a CPU whose bf16
    instructions are ``isa`` (``amx`` or ``avx512bf16``), None where it runs in bf16: the one rule
    of where a bf16 weight product pays. On AMX tiles every size measured paid (16 x 64 x 64 up:
    0.1-0.5x fp32's time, products under :data:`~explorer.schedule.defaults.bf16.AMX_PARALLEL_MIN_MACS`
    on one core); on vdpbf16ps few rows by many weights (:data:`VECTOR_MAX_ROWS`,
    :data:`VECTOR_MIN_CHANNELS`, :data:`VECTOR_MIN_WEIGHTS`), a product too small to matter
    (:data:`VECTOR_ANY_MACS`: a classifier's 1 x 64 -> 10), and where ``fast_vectors`` (vdpbf16ps
    measured on this machine at the rate where compute-bound convolutions pay) the products of more
    rows as well. The tiles' rule reads the rows the kernel computes (:func:`padded_rows`: a ViT's 197
    tokens on AMX tiles as 208)."""
    if runs_on_tiles(padded_rows(rows, reduction, isa), reduction, isa) or \
            rows * channels * reduction < VECTOR_ANY_MACS:
        return None
    shape = f"{rows}x{reduction} -> {channels}"
    if rows > VECTOR_MAX_ROWS:
        return None if fast_vectors else (
            f"{shape}: {rows} rows > {VECTOR_MAX_ROWS} on vdpbf16ps (compute-bound: no faster than fp32's FMAs "
            f"unless vdpbf16ps was measured here at the rate where bf16 convolutions pay)")
    if channels < VECTOR_MIN_CHANNELS or channels * reduction < VECTOR_MIN_WEIGHTS:
        return (f"{shape}: weights N x K = {channels * reduction} (N = {channels}) under {VECTOR_MIN_WEIGHTS} "
                f"(N >= {VECTOR_MIN_CHANNELS}) on vdpbf16ps, too few for half their bytes to pay")
    return None


def kept_in_fp32(why: tuple[str, ...]) -> tuple[str, ...]:
    """One line for the weight products :func:`why_fp32` kept in fp32 (a build's list of what stayed fp32)."""
    if not why:
        return ()
    from collections import Counter

    shapes = ", ".join(w.split(":")[0] + (f" x{n}" if n > 1 else "") for w, n in Counter(why).items())
    return (f"{len(why)} weight product(s) where bf16 does not pay on the target's vdpbf16ps "
            f"(rows x K -> N): {shapes}",)


def _rows(call: relax.Call) -> int | None:
    """The rows of a product's activations (all their axes but the last), where static."""
    shape, _ = tensor_info(call.args[0].ty)
    ints = None if shape is None else static_ints(shape)
    return None if ints is None else int(np.prod(ints[:-1]))


def bf16_kernels(func: relax.Function, isa: str | None, *,
                 fast_vectors: bool = False) -> tuple[list[list[tuple[relax.Call, np.ndarray]]], list[str]]:
    """The kernels a bf16 build makes of ``func``'s weight products on a CPU whose bf16 instructions
    are ``isa`` (:func:`why_fp32`, with ``fast_vectors``; None: every product the kernel takes, no size rule): each a list of
    the products it computes (one, or siblings side by side) with their weights, and why each product
    left out stays fp32 (one line each)."""
    weights = product_weights(func)
    grouped = sibling_products(weights)
    in_groups = {call for group in grouped for call, _ in group}
    kernels = grouped + [[(call, w)] for call, w in weights.items() if call not in in_groups]
    kept, chosen = [], []
    for kernel in kernels:
        m, k, n = _rows(kernel[0][0]), kernel[0][1].shape[0], sum(w.shape[1] for _, w in kernel)
        why = None if isa is None or m is None else why_fp32(m, n, k, isa, fast_vectors=fast_vectors)
        if why is None:
            chosen.append(kernel)
        else:
            kept += [why] * len(kernel)
    return chosen, kept


@mutator
class _Rewriter(PyExprMutator):
    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.rewritten = 0
        # the function's bf16_kernels, by the first product each computes
        self.kernels: dict[relax.Call, list[tuple[relax.Call, np.ndarray]]] = {}
        # a sibling's result (a slice of its group's product), bound where the sibling was: emitted with the
        # group's first instead, its uses would read it through a variable alias, which keeps FuseOps from
        # fusing the slice into what follows (K's and V's heads split: one more copy each)
        self.done: dict[relax.Call, relax.Expr] = {}
        self.scales = ScaleFolds()  # the function's folded_scales
        # the CPU's bf16 instructions: what products pad to (padded_rows, bf16_attention.padded_shape)
        self.isa: str | None = None

    def start(self, func: relax.Function, isa: str | None, fast_vectors: bool = False) -> list[str]:
        """Take ``func``'s decisions (its kernels, its folded scales) before its rewrite; why the
        products left out stay fp32."""
        kernels, kept = bf16_kernels(func, isa, fast_vectors=fast_vectors)
        self.isa = isa
        self.kernels, self.done, self.scales = {k[0][0]: k for k in kernels}, {}, folded_scales(func, isa)
        return kept

    def _bound(self, expr):
        if isinstance(expr, relax.Var):
            value = self.lookup_binding(expr)
            if value is not None:
                return value
        return expr

    def visit_call_(self, op):
        earlier = self.done.get(op)
        if earlier is not None:
            return earlier
        product = self.scales.product_of.get(op)
        if product is not None:  # a scale folded into its product's packing: the product itself
            return self.visit_expr(product)
        kernel = self.kernels.get(op)
        call = self.visit_expr_post_order(op)
        if kernel is not None:
            results = self._product(call.args[0], [w for _, w in kernel], [tensor_info(c.ty)[0] for c, _ in kernel])
            self.done.update((c, r) for (c, _), r in zip(kernel[1:], results[1:]))
            return results[0]
        scale = self.scales.scale_of.get(op)
        if not fits(call, self.isa):  # (a folded scale's multiply was dropped: it multiplies the fp32 product here)
            return call if scale is None else relax.op.multiply(self.builder_.emit(call), relax.const(scale, "float32"))
        self.rewritten += 1  # a product of two activations (explorer.passes.bf16_attention)
        return self._activations_product(*call.args, scale=scale)

    def _activations_product(self, a, b, scale: float | None = None) -> relax.Expr:
        """The bf16 kernel of ``a @ b`` (both computed at run time), a heads split packed ahead.
        ``scale``: the product's folded scale (:func:`~explorer.passes.bf16_attention.folded_scales`,
        which decided that ``a`` is a heads split): ``a`` is then packed ahead with it, whatever its
        binding looks like now, so the scale is never dropped."""
        emit, call_te = self.builder_.emit, self.builder_.call_te
        (sa, _), (sb, _) = tensor_info(a.ty), tensor_info(b.ty)
        m, n = int(sa[-2]), int(sb[-1])
        m_to, k_to, n_to = padded_shape(m, int(sa[-1]), n, self.isa)
        swapped = untransposed(b, self._bound)
        if swapped is not None:  # K^T: K as it comes, split as Q and V are, its panels read by rows
            b = emit(call_te(bf16_panels, emit(relax.op.permute_dims(*swapped)), b_rows=True, k_to=k_to,
                             n_to=n_to, primfunc_name_hint="bf16_pack_b"))
        elif split_heads(b, self._bound):
            b = emit(call_te(bf16_panels, b, k_to=k_to, n_to=n_to, primfunc_name_hint="bf16_pack_b"))
        if scale is not None or split_heads(a, self._bound):
            a = emit(call_te(bf16_rows, a, 1.0 if scale is None else scale, k_to, m_to, primfunc_name_hint="bf16_pack"))
        product = call_te(batch_dense_bf16, a, b, to=(m_to, k_to, n_to), primfunc_name_hint="batch_dense_bf16")
        padded = [(axis, end) for axis, end, to in ((len(sb) - 2, m, m_to), (len(sb) - 1, n, n_to)) if to != end]
        if not padded:
            return product
        return relax.op.strided_slice(emit(product), axes=[a for a, _ in padded], begin=[0] * len(padded),
                                      end=[e for _, e in padded])

    def _product(self, x, weights: list[np.ndarray], out_shapes: list) -> list[relax.Expr]:
        """One bf16 kernel of ``x`` by ``weights`` side by side: each product's result, not emitted."""
        shape, _ = tensor_info(x.ty)
        k, n = weights[0].shape[0], sum(w.shape[1] for w in weights)
        emit = self.builder_.emit
        m = int(np.prod(shape[:-1]))
        # [1, M, K] as it is (no reshape: what follows fuses into the kernel); else rows [M, K]
        as_is = len(shape) == 2 or (len(shape) == 3 and int(shape[0]) == 1)
        x2 = x if as_is else emit(relax.op.reshape(x, [m, k]))
        w = weights[0] if len(weights) == 1 else np.concatenate(weights, axis=1)
        m_to = padded_rows(m, k, self.isa)
        y = emit(self.builder_.call_te(dense_bf16, x2, relax.const(pack_weights(w)), rows_to=m_to,
                                       primfunc_name_hint="dense_bf16"))
        self.rewritten += len(weights)
        axis, results, start = len(shape) - 1 if as_is else 1, [], 0
        for wi, out_shape in zip(weights, out_shapes):
            whole = wi.shape[1] == n and n % PANEL == 0
            axes, begin, end = ([], [], []) if whole else ([axis], [start], [start + wi.shape[1]])
            if m_to != m:  # the padded rows sliced off too
                axes, begin, end = [axis - 1, *axes], [0, *begin], [m, *end]
            part = relax.op.strided_slice(y, axes=axes, begin=begin, end=end) if axes else y
            start += wi.shape[1]
            results.append(part if as_is else relax.op.reshape(part if part is y else emit(part), list(out_shape)))
        return results


def bf16_products(mod: tvm.IRModule, *, isa: str | None = None,
                  fast_vectors: bool = False) -> tuple[tvm.IRModule, int, tuple[str, ...]]:
    """``mod`` with its weight products as bf16 kernels (see the module docstring), its products of
    two activations too (:mod:`explorer.passes.bf16_attention`), how many in all, and why the weight
    products :func:`why_fp32` keeps for a CPU whose bf16 instructions are ``isa`` (``fast_vectors``:
    its vdpbf16ps measured fast) stay fp32 (one line each; ``isa`` None: no size rule)."""
    rewriter, kept = _Rewriter(mod), []
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            kept += rewriter.start(func, isa, fast_vectors)
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    if not rewriter.rewritten:
        return mod, 0, tuple(kept)
    # (CanonicalizeBindings: a folded scale's multiply leaves its product bound to a second variable)
    mod = relax.transform.DeadCodeElimination()(rewriter.builder_.get())
    return relax.transform.CanonicalizeBindings()(mod), rewriter.rewritten, tuple(kept)


@tvm.transform.module_pass(opt_level=0, name="Bf16Products")
def Bf16Products(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """Matmuls with constant weights, and products of two activations (attention's), as bf16 kernels
    with fp32 accumulation (module docstring)."""
    return bf16_products(mod)[0]


__all__ = ["VECTOR_ANY_MACS", "VECTOR_MAX_ROWS", "VECTOR_MIN_CHANNELS", "VECTOR_MIN_WEIGHTS", "Bf16Products",
           "bf16_bits", "bf16_kernels", "bf16_products", "bf16_round", "constant_value", "dense_bf16", "kept_in_fp32",
           "pack_weights", "product_weights", "sibling_products", "why_fp32"]
