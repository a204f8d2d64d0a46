"""``Bf16Convs``: a bf16 build's 2-D convolutions with constant weights as bf16 products, fp32
accumulation, through the same micro-kernels as the weight products of
:mod:`explorer.passes.bf16_dense` (one design: AVX512-BF16 ``vdpbf16ps`` or AMX-BF16 tiles).

A convolution ``y = conv2d(x, W)`` (NCHW data, OIHW weights, ``groups == 1``, any stride, padding
and dilation) is an implicit GEMM over the output pixels ``p = (n, oh, ow)`` and the reduction
``k = (kh, kw, ic)`` (input channels in pairs):

    Y[oc, p] = sum_k f32(Wb[oc, k]) * f32(Xp[p // 16, k // 2, p % 16, k % 2])

- ``Wb``: the weights rounded to bf16 (nearest even) **once, here**, as their 16 bits (uint16),
  ``[OC, K]`` with the output channels padded to 16 and K to 32 (zero weights: AMX takes 16
  channels x 32 K a tile);
- ``Xp``: the activations rounded to bf16 **once per layer**, in two packing blocks of the kernel:
  the input padded, channels in pairs and columns split by the stride's phase (``bf16_input``:
  ``[N, IC/2, H', stride, W'/stride, 2]``), then an im2col in panels of 16 pixels x pairs along K
  (``bf16_im2col``, zeros for the K tail): the panel that both ``vdpbf16ps`` (16 pixels as fp32
  lanes, one broadcast weight pair) and an AMX B tile (16 rows of 64 bytes) read. Where an output
  row padded to whole panels costs at most 1/7 more (:func:`row_panels`: 56 -> 64 pixels), each
  panel is 16 pixels of one row and each of its rows 64 contiguous bytes of ``bf16_input`` at any
  stride; else (7 x 7 maps) panels run across rows and are gathered;
- ``Y`` lands in NCHW order (channels are rows, pixels contiguous) and a copy block of the same
  kernel writes the ``[N, OC, OH, OW]`` output; bias, batch-norm (already folded into the
  weights), activation and residual adds stay fp32 operations after it.

The output channels are the product's rows and the pixels its columns, so the kernel's loops are
those of ``dense_bf16`` (``i, j, k2, kk``) and :mod:`explorer.schedule.defaults.bf16` tiles both.

**On a CPU with AMX-BF16 tiles** (:func:`bf16_convs` with ``amx``) a convolution the tiles fit
(:func:`explorer.passes.bf16_conv_nhwc.amx_direct_fits`: undilated, its channels a multiple of 32
or a kernel row of at most 32 values, output rows that split into tiles of 7-16 pixels) takes the
direct kernel instead: NHWC, the input rounded and padded once, the tiles' A rows read straight
from it (no im2col), NHWC fp32 out between transposes that ``SinkTransposes`` cancels between
convolutions (:mod:`explorer.passes.bf16_conv_nhwc`); where a convolution's chain computes its
input for it alone, that producer rounds it (:data:`PRODUCER_ROUNDS`,
:mod:`explorer.passes.bf16_conv_bits`). Without its copies it pays from a shorter
reduction, :data:`MIN_REDUCTION_DIRECT`. Below that, where the work per output pixel ``K x C_out``
is at least :data:`MIN_SPLIT_WORK` (MobileNetV2's 1x1 expansions, 64 -> 384 and 96 -> 576), the
direct kernel computes it as a **split product** (:mod:`explorer.passes.bf16_conv_split`: the
weights as two bf16 parts, the input rounded once, two products a value): faster than fp32 and
adding only the activations' rounding, where plain bf16 on them would miss the tolerance (measured per
layer, the error a convolution adds grows with the layers after it, not with its K: an early
layer's rounding is carried and amplified through the rest of the model). Any other convolution
keeps the im2col path (:data:`AMX_DIRECT_ENABLED` off: every one).

**On a CPU with AVX512-BF16 alone** (``vectors``: no AMX, its ``vdpbf16ps`` measured to pay, below) the
same direct NHWC kernel computes the convolutions it fits
(:func:`explorer.passes.bf16_conv_nhwc.vector_direct_fits`: undilated, output rows a tile of 2-16
pixels divides; input channels padded to pairs only) on ``vdpbf16ps``
(:mod:`explorer.schedule.defaults.bf16_vector_conv`), at the direct kernel's reduction cut
:data:`MIN_REDUCTION_DIRECT` (no split products: a shorter one stays fp32); the others take the
im2col path (:data:`VECTOR_DIRECT_ENABLED` off: every one). On a Zen 5 (2 cores) a 3x3 64 -> 64 @56
convolution ran at about 900 GFLOPS direct against about 500 through the im2col, and ResNet-18 at bf16
took 4.67 ms against 7.97 (fp32 7.20). Producers round for it as they do on AMX (:data:`PRODUCER_ROUNDS`).

Kept in fp32: depthwise and other grouped convolutions (a group's few channels make short
products with little to gain), convolutions of other layouts or ranks (1-D, 3-D, transposed),
those whose weights are not constants, and **those whose reduction** ``K = C_in * kh * kw`` **is
shorter than** :data:`MIN_REDUCTION` (:func:`why_fp32`, the one rule of where bf16 pays). A short
reduction is little work per output for the rounding of every input and output pixel (the
packing blocks and the output copy cost the same per pixel at any K), and every converted layer
adds its own rounding error to the model's (the figures: docs/notes/measurements.md, "bf16
convolutions"). :func:`bf16_convs` says which stayed fp32 and why. A build also keeps in fp32 any
convolution whose bf16 kernel the default schedule could not tile (without its tile it runs many times
slower than fp32): :mod:`explorer.passes.bf16_conv_retry`, and the build's precision lists them.

**Where bf16 convolutions pay at all** is a property of the target's bf16 instructions
(:func:`why_convs_fp32`, the one rule): on AMX-BF16 tiles they do (12-16x the fp32 FMAs'
FLOPs), layer by layer as above. A CPU whose bf16 instructions are vectors alone (``vdpbf16ps``:
AVX512-BF16 without AMX) gains from them only where its ``vdpbf16ps`` does at least
:data:`VECTOR_MIN_RATE` times the FLOPs of its fp32 FMAs, measured on the machine
(:func:`explorer.measure.calibration.measured_rate`): ResNet-18's convolutions are compute-bound
(and fp32 runs its 3x3 ones as Winograd, fewer FLOPs), so halving their bytes does not pay for
a slower instruction. On the Intel Xeon of 2026-12-06 with its tiles hidden ``vdpbf16ps`` ran at
0.50-0.57x the fp32 FMA rate, and ResNet-18's bf16 im2col convolutions at 38-100 GFLOPS against
fp32's 110-200 (one thread, busy): the model took 1.81x fp32's time. On a Zen 5 (2026-12-07) it ran at
1.8-1.95x the fp32 FMA rate (two ``vdpbf16ps`` a cycle), and the direct kernel above pays. A CPU not
measured on this machine (a cross-built ``cpu:znver4``) keeps every convolution fp32, and the build's
fp32 list says why; on such a machine itself the measured rate decides.

The pass first folds batch-norm into the convolutions' weights (the pipeline's own passes, run
early: after this rewrite a convolution is a kernel call they cannot see into).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, te

from explorer.ir.relax_walk import tensor_info
from explorer.passes.bf16_conv_bits import (add_of_bits, emit_bits, pool_of_bits, pools_reading_bits,
                                           rounded_by_producer, shared_as_bits)
from explorer.passes.bf16_conv_nhwc import (amx_direct_fits, conv2d_nhwc_bf16, conv2d_nhwc_bf16_flat, flat_rows,
                                            nhwc_channels, pack_nhwc_weights, row_tiled, vector_direct_fits)
from explorer.passes.bf16_conv_retry import conv_ordinals
from explorer.passes.bf16_conv_split import pack_split_weights, split_conv_func, split_group
from explorer.passes.bf16_dense import bf16_bits, constant_value
from explorer.passes.call_rewrite import rewrite_calls, static_ints
from explorer.schedule.bf16_dot import AMX_K, BF16_ATTR, PACK_ATTR, PAIR, PANEL, to_bits, widen

_CONV2D = tvm.ir.Op.get("relax.nn.conv2d")
_FLOAT_OUT = ("", "None", "void", "float32")
# the shortest reduction (C_in * kh * kw) a convolution is computed in bf16 for: measured one conv
# at a time against the default fp32 build (docs/notes/measurements.md, "bf16 convolutions")
MIN_REDUCTION = 512
# the same for the direct kernel (explorer.passes.bf16_conv_nhwc, on AMX tiles or on vdpbf16ps), which has
# no im2col copy nor output copy to pay for: on AMX it is faster than fp32 from K = 32 on, but every
# converted layer adds its rounding error, and MobileNetV2 with every K >= 32 in bf16 misses the 1e-2
# tolerance (1.35e-2); from 128 it verifies (docs/notes/measurements.md, "bf16 convolutions, direct on
# AMX"; measured on AMX, taken for vdpbf16ps as it is)
MIN_REDUCTION_DIRECT = 128
# Below that cut the direct kernel computes a convolution as a split product (explorer.passes.
# bf16_conv_split: two bf16 products a value, the weights' rounding gone; three, with the
# activations split too, when this cut was measured) where its work per output pixel, K x C_out, is
# at least this (:func:`split_product`); else fp32.
# Each conv + bias + ReLU alone, split / fp32 (benchmarks.bench_bf16_conv's timing, 2 threads, load
# ~4.5, best of 15 alternated rounds): 96 -> 576 @14 0.64, 64 -> 384 @14 0.71; under the cut
# 32 -> 192 @28 (6144) 0.97, ResNet's 64 -> 128 s2 (8192) 2.1, 24 -> 144 @56 (3456) slower.
# MobileNetV2, one thread, alternated rounds: 0.91x the model's time (median of 25), error 7.15e-3
# (7.69e-3 before); with plain bf16 there instead it missed the tolerance on one of 5 inputs (1.05e-2)
MIN_SPLIT_WORK = 16384
# A CPU without AMX-BF16 computes convolutions in bf16 only where its vdpbf16ps does at least this many
# times the FLOPs of its fp32 FMAs (measured: explorer.measure.calibration.measured_rate): a compute-bound
# convolution gains from bf16's halved bytes only through a faster instruction, and the im2col and
# rounding copies cost it a share of that (a choice, not a measurement: 0.50-0.57 measured on the one
# such CPU seen, bf16 ResNet-18 1.81x slower there)
VECTOR_MIN_RATE = 1.5
# Off: every bf16 convolution takes the im2col path, AMX CPUs too
AMX_DIRECT_ENABLED = True
# A CPU whose vdpbf16ps pays (:func:`vdpbf16ps_pays`, no AMX) computes the convolutions the direct kernel
# fits on it (:func:`explorer.passes.bf16_conv_nhwc.vector_direct_fits`) direct in NHWC too, at the direct
# kernel's reduction cut (no split products on vectors). Off: the im2col path, as before
VECTOR_DIRECT_ENABLED = True
# A direct kernel's input rounded to bf16 by the convolution's chain that computes it (a depthwise one, or a
# direct one), where the kernel is its only reader, and a max pool between them reading the bits
# (explorer.passes.bf16_conv_bits: identical numbers, half the bytes, no rounding pass in the consumer), on
# AMX tiles and on vdpbf16ps vectors alike (the figures: that module's docstring).
# Off: every direct kernel rounds its own fp32 input
PRODUCER_ROUNDS = True
# the pipeline's own passes that fold batch-norm into a convolution's constant weights
# (explorer.passes.pipelines' preparation, the part a convolution needs before it is rewritten)
FOLD_FIRST = ("SimplifyInference", "FoldConstantNumpy", "FoldBatchnormToConv2D", "BatchNormAsScaleShift",
              "DecomposeOpsForInference", "CanonicalizeBindings", "FoldConstantNumpy")


def _ceil(v: int, m: int) -> int:
    return -(-v // m) * m


def pack_conv_weights(w_oihw: np.ndarray) -> np.ndarray:
    """``[OC, IC, KH, KW]`` fp32 weights as bf16 bits ``[OC padded to 16, K padded to 32]``, K in
    the order (kh, kw, ic) with the input channels padded to pairs (the activations' order)."""
    oc, ic, kh, kw = w_oihw.shape
    hwio = np.zeros((oc, kh, kw, ic + ic % PAIR), np.float32)
    hwio[:, :, :, :ic] = w_oihw.transpose(0, 2, 3, 1)
    k = hwio[0].size
    wp = np.zeros((_ceil(oc, PANEL), _ceil(k, AMX_K)), np.float32)
    wp[:oc, :k] = hwio.reshape(oc, k)
    return bf16_bits(wp)


def conv2d_bf16(x: te.Tensor, w: te.Tensor, *, kernel: tuple[int, int], out_shape: tuple[int, int, int, int],
                strides=(1, 1), padding=(0, 0), dilation=(1, 1)) -> te.Tensor:
    """The NCHW convolution of fp32 ``x`` by the bf16 weights ``w`` (:func:`pack_conv_weights`),
    fp32 accumulation (module docstring); ``out_shape``: ``[N, OC, OH, OW]``, ``padding``: the top
    and left padding (the bottom and right are implied by the output size)."""
    n, c, h, wd = (int(v) for v in x.shape)
    _, oc, oh, ow = out_shape
    kh, kw = kernel
    (sh, sw), (ph, pw), (dh, dw) = strides, padding, dilation
    rows, kpad = (int(v) for v in w.shape)
    pairs = -(-c // PAIR)
    owp = _ceil(ow, PANEL) if row_panels(ow) else ow  # pixels per output row, as the product sees them
    hp = (oh - 1) * sh + (kh - 1) * dh + 1
    ws = owp + (kw - 1) * dw // sw  # input columns per phase: column xx is phase xx % sw, column xx // sw
    pixels, taps = n * oh * owp, kh * kw * pairs
    panels = -(-pixels // PANEL)
    zero = tvm.tirx.const(0, "uint16")

    def convert(b, c2, yy, phase, xs, kk):  # the input rounded once: padded, channels in pairs, columns by phase
        ci, iy, ix = c2 * PAIR + kk, yy - ph, xs * sw + phase - pw
        inside = tvm.tirx.all(ci < c, iy >= 0, iy < h, ix >= 0, ix < wd)
        return tvm.tirx.if_then_else(inside, to_bits(x[b, ci, iy, ix]), zero)

    xb = te.compute((n, pairs, hp, sw, ws, PAIR), convert, name="bf16_input", attrs={PACK_ATTR: 1})

    def gather(pp, k2, lane, kk):  # im2col into panels of 16 pixels x pairs
        if owp != ow:  # whole panels per output row: a panel row is 64 contiguous bytes of the input
            q = owp // PANEL
            b, y, xx = pp // q // oh, pp // q % oh, pp % q * PANEL + lane
        else:  # panels across rows (a tail pixel repeats the last one, its column is never read)
            p = tvm.te.min(pp * PANEL + lane, pixels - 1)
            b, y, xx = p // (oh * ow), p // ow % oh, p % ow
        tap = tvm.te.min(k2 // pairs, kh * kw - 1)
        ty, tx, c2 = tap // kw, tap % kw, k2 % pairs
        phase, shift = tx * dw % sw, tx * dw // sw
        return tvm.tirx.if_then_else(k2 < taps, xb[b, c2, y * sh + ty * dh, phase, xx + shift, kk], zero)

    xp = te.compute((panels, kpad // PAIR, PANEL, PAIR), gather, name="bf16_im2col", attrs={PACK_ATTR: 1})
    k2, kk = te.reduce_axis((0, kpad // PAIR), "k2"), te.reduce_axis((0, PAIR), "kk")
    y = te.compute(
        (rows, panels * PANEL),
        lambda i, j: te.sum(widen(w[i, k2 * PAIR + kk]) * widen(xp[j // PANEL, k2, j % PANEL, kk]), axis=[k2, kk]),
        name="conv2d_bf16", attrs={BF16_ATTR: panels})
    return te.compute((n, oc, oh, ow), lambda b, o, yy, xx: y[o, (b * oh + yy) * owp + xx], name="conv2d_bf16_out")


def row_panels(width: int) -> bool:
    """Whether an output row of ``width`` pixels is padded to whole 16-pixel panels (each panel row
    then a strided read of the input, not a gather): where that adds at most 1/7 (56 -> 64 pixels;
    7 -> 16 would more than double the product)."""
    return _ceil(width, PANEL) * 7 <= width * 8


def split_product(weight_shape: tuple[int, ...]) -> bool:
    """Whether the direct AMX kernel computes a convolution with OIHW weights of ``weight_shape``
    as a split product (:mod:`explorer.passes.bf16_conv_split`, the weights at about fp32's accuracy): its
    reduction is shorter than :data:`MIN_REDUCTION_DIRECT` (plain bf16 would add its rounding
    error) and its work per output pixel ``K x C_out`` is at least :data:`MIN_SPLIT_WORK` (less
    does not pay for two products and the packing)."""
    oc, ic, kh, kw = (int(v) for v in weight_shape)
    k = ic * kh * kw
    return k < MIN_REDUCTION_DIRECT and k * oc >= MIN_SPLIT_WORK


def why_fp32(weight_shape: tuple[int, ...], *, direct: bool = False, splittable: bool = False) -> str | None:
    """Why a convolution with OIHW weights of ``weight_shape`` stays fp32 (None: it is computed
    in bf16): a reduction ``K = C_in * kh * kw`` shorter than :data:`MIN_REDUCTION`, or for the
    direct kernel (``direct``: AMX's or vdpbf16ps', no im2col, no output copy) than
    :data:`MIN_REDUCTION_DIRECT` unless it is a split product (``splittable``: AMX's kernel takes one, :func:`split_fits`;
    :func:`split_product`)."""
    oc, ic, kh, kw = (int(v) for v in weight_shape)
    k, least = ic * kh * kw, MIN_REDUCTION_DIRECT if direct else MIN_REDUCTION
    if k < least and not (direct and splittable and split_product(weight_shape)):
        split = f" (K x C_out = {k * oc} < {MIN_SPLIT_WORK} for a split product)" if direct and splittable else ""
        return f"{ic}x{kh}x{kw} -> {oc}: reduction K = {k} < {least}, too short for bf16 to pay{split}"
    return None


def why_convs_fp32(target, mod: tvm.IRModule | None = None) -> str | None:
    """Why a bf16 build for ``target`` keeps every 2-D convolution (of ``mod``: None where it has
    none) in fp32, one line for the build's fp32 list; None where bf16 convolutions pay on it
    (layer by layer: :func:`why_fp32`). The rule of the module docstring: AMX-BF16 tiles pay;
    ``vdpbf16ps`` alone pays where it does :data:`VECTOR_MIN_RATE` times the fp32 FMA rate on this
    machine, and a CPU whose rate was not measured here keeps fp32."""
    from explorer.measure.calibration import measured_rate
    from explorer.schedule.bf16_dot import isa_from

    isa = isa_from(target.features, target.arch) if target.cpu_rules else ""
    if isa in ("amx", "") or (mod is not None and not has_convs(mod)) or vdpbf16ps_pays(target):
        return None
    rate = measured_rate(target, "bf16")
    head = "convolutions: the target's bf16 instruction is vdpbf16ps (AVX512-BF16, no AMX tiles), "
    if rate is None:
        return (head + f"whose rate on {target.label} was not measured here (on the one CPU measured it ran at "
                       f"0.50-0.57x the fp32 FMA rate); a compute-bound convolution pays only from "
                       f"{VECTOR_MIN_RATE}x")
    return (head + f"measured at {rate:.2f}x the fp32 FMA rate on this machine, under the {VECTOR_MIN_RATE}x a "
                   f"compute-bound convolution needs for bf16 to pay")


def vdpbf16ps_pays(target) -> bool:
    """Whether ``target``'s ``vdpbf16ps`` was measured on this machine at :data:`VECTOR_MIN_RATE` times
    its fp32 FMA rate or more: where compute-bound bf16 work (convolutions, products of many rows:
    :func:`explorer.passes.bf16_dense.why_fp32`) pays on vectors alone. False for a CPU not measured here."""
    from explorer.measure.calibration import measured_rate

    rate = measured_rate(target, "bf16")
    return rate is not None and rate >= VECTOR_MIN_RATE


def has_convs(mod: tvm.IRModule) -> bool:
    """Whether any Relax function of ``mod`` calls a 2-D convolution (a walk over its calls: rendering
    the functions as text to search them took 9 ms on MobileNetV2, three times a build)."""
    found: list[bool] = []

    def visit(expr) -> None:
        if not found and isinstance(expr, relax.Call) and expr.op.same_as(_CONV2D):
            found.append(True)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
            if found:
                return True
    return False


def split_fits(weight_shape: tuple[int, ...], out_width: int) -> bool:
    """Whether the direct kernel takes a convolution's split product: its input channels make
    parts of whole tile rows (:func:`explorer.passes.bf16_conv_split.split_group`) and its output
    rows split into tiles of 7-16 pixels (a split product is not tiled across rows)."""
    return split_group(int(weight_shape[1])) is not None and row_tiled(out_width)


def _direct(x, w: np.ndarray, builder: relax.BlockBuilder, *, strides, padding, out_shape, split: bool,
            bits: bool = False, vectors: bool = False, nhwc_bits: relax.Expr | None = None, const=relax.const):
    """The direct kernel (:mod:`explorer.passes.bf16_conv_nhwc`; ``split``: its split product,
    :mod:`explorer.passes.bf16_conv_split`) between the transposes to and from NHWC that
    ``SinkTransposes`` cancels between consecutive convolutions; ``bits``: its input rounded to bf16
    by the producer (:mod:`explorer.passes.bf16_conv_bits`; not for a split product, which reads fp32);
    ``vectors``: for ``vdpbf16ps`` alone (input channels in pairs, rows tiled, never across them); ``nhwc_bits``:
    its input's bits in NHWC, emitted already for its other readers (:func:`explorer.passes.bf16_conv_bits.shared_as_bits`);
    ``const``: makes the packed weights' constant."""
    oc, ic, kh, kw = w.shape
    if split and nhwc_bits is not None:
        raise ValueError("a split product reads its input in fp32, not as bits")
    if nhwc_bits is None:
        nhwc_bits = _nhwc_bits(x, builder) if bits and not split else None
    xn = nhwc_bits if nhwc_bits is not None else builder.emit(relax.op.permute_dims(x, [0, 2, 3, 1]))
    channels, out_hw = _ceil(ic, PAIR) if vectors else nhwc_channels(ic, kw), (out_shape[2], out_shape[3])
    packed = pack_split_weights(w) if split else pack_nhwc_weights(w, channels)
    weights = const(packed)
    if split:
        n, _, h, wd = (int(d) for d in tensor_info(x.ty)[0])
        func = split_conv_func((n, h, wd, ic), packed.shape, strides=strides, padding=padding, out_hw=out_hw)
        ty = relax.TensorType([n, *out_hw, _ceil(oc, PANEL)], "float32")
        gv = builder.add_func(func.without_attr("global_symbol"), "conv2d_nhwc_bf16")
        y = relax.call_tir(gv, [xn, weights], ty)
    elif not vectors and flat_rows((kh, kw), strides, out_shape[3], channels):
        y = builder.call_te(conv2d_nhwc_bf16_flat, xn, weights, padding=padding, out_hw=out_hw,
                            primfunc_name_hint="conv2d_nhwc_bf16")
    else:
        y = builder.call_te(conv2d_nhwc_bf16, xn, weights, strides=strides, padding=padding, out_hw=out_hw,
                            primfunc_name_hint="conv2d_nhwc_bf16")
    y = builder.emit(y)
    if oc % PANEL:
        y = builder.emit(relax.op.strided_slice(y, axes=[3], begin=[0], end=[oc]))
    return relax.op.permute_dims(y, [0, 3, 1, 2])


def _rewritable(call: relax.Call) -> bool:
    a = call.attrs
    return (int(a.groups) == 1 and str(a.data_layout) == "NCHW" and str(a.kernel_layout) == "OIHW"
            and str(a.out_layout) == "NCHW" and str(a.out_dtype) in _FLOAT_OUT)


def _plan(call: relax.Call, amx: bool, vectors: bool = False, fp32: frozenset = frozenset()):
    """``(weights, direct, why)`` for a convolution this pass would convert (``direct``: on the direct
    NHWC kernel, AMX's or, ``vectors``, vdpbf16ps'; ``why``: why :func:`why_fp32` keeps it fp32, else
    None), or None for any other call and for those whose weights are among ``fp32`` (their bf16 kernel
    could not be scheduled: :mod:`explorer.passes.bf16_conv_retry`)."""
    if not call.op.same_as(_CONV2D) or not _rewritable(call) or call.args[1] in fp32:
        return None
    shape, dtype = tensor_info(call.args[0].ty)
    out_shape, _ = tensor_info(call.ty)
    w = constant_value(call.args[1])
    if w is None or w.dtype != np.float32 or w.ndim != 4 or dtype != "float32" or shape is None \
            or out_shape is None or len(shape) != 4 or static_ints([*shape, *out_shape]) is None:
        return None
    a = call.attrs
    if vectors and amx:
        raise ValueError("a convolution's direct kernel is for AMX tiles or for vdpbf16ps, not both")
    if vectors:
        direct = VECTOR_DIRECT_ENABLED and vector_direct_fits(int(out_shape[3]), a.dilation)
        return w, direct, why_fp32(w.shape, direct=direct)
    direct = amx and AMX_DIRECT_ENABLED and amx_direct_fits(w.shape, int(out_shape[3]), a.dilation, a.strides)
    return w, direct, why_fp32(w.shape, direct=direct, splittable=direct and split_fits(w.shape, int(out_shape[3])))


def _converts(call: relax.Call, amx: bool, vectors: bool = False, fp32: frozenset = frozenset()) -> bool:
    """Whether this pass converts ``call`` to a bf16 kernel (:func:`_plan`, nothing keeping it fp32)."""
    plan = _plan(call, amx, vectors, fp32)
    return plan is not None and plan[2] is None


def _reads_bits(call: relax.Call, amx: bool, vectors: bool = False, fp32: frozenset = frozenset()) -> bool:
    """Whether this pass makes ``call`` a direct kernel that reads its input as its producer's bits (converted,
    direct, not a split product: :func:`_direct`)."""
    plan = _plan(call, amx, vectors, fp32)
    return plan is not None and plan[2] is None and plan[1] and not _split(plan[0])


def _split(w: np.ndarray) -> bool:
    """Whether a direct kernel computes weights ``w`` as a split product (a reduction under the direct cut that
    :func:`why_fp32` let through)."""
    return int(np.prod(w.shape[1:])) < MIN_REDUCTION_DIRECT


def _nhwc_bits(x: relax.Expr, builder: relax.BlockBuilder) -> relax.Expr:
    """NCHW fp32 ``x`` as NHWC bf16 bits: the transpose ``SinkTransposes`` cancels against its producer's, and the
    rounding ``FuseOps`` fuses into that producer."""
    return emit_bits(builder.emit(relax.op.permute_dims(x, [0, 2, 3, 1])), builder)


def _rewrite(call: relax.Call, builder: relax.BlockBuilder, kept: list[str], amx: bool,
             rounded: frozenset = frozenset(), vectors: bool = False, nhwc_bits: relax.Expr | None = None,
             fp32: frozenset = frozenset(), const=relax.const):
    """The bf16 kernel call for ``call`` where it is a convolution this pass converts, else None
    (and why, in ``kept``, where only :func:`why_fp32` keeps it fp32); ``amx``: the CPU has
    AMX-BF16 tiles, and the direct NHWC kernel takes the convolutions it fits (``vectors``: the CPU's
    vdpbf16ps pays, and its direct kernel takes them); ``rounded``: inputs
    their producer may round to bf16 (:func:`explorer.passes.bf16_conv_bits.rounded_by_producer`); ``fp32``:
    weights whose convolutions stay fp32 (:func:`_plan`); ``const``: makes the packed weights' constants."""
    plan = _plan(call, amx, vectors, fp32)
    if plan is None:
        return None
    w, direct, why = plan
    if why is not None:
        kept.append(why)
        return None
    out_shape, _ = tensor_info(call.ty)
    a = call.attrs
    pad = [int(v) for v in a.padding]
    if direct:  # (a reduction under the direct cut that why_fp32 let through is a split product)
        split = _split(w)
        return _direct(call.args[0], w, builder, strides=tuple(int(v) for v in a.strides), padding=(pad[0], pad[1]),
                       out_shape=tuple(int(d) for d in out_shape), split=split, bits=call.args[0] in rounded,
                       vectors=vectors, nhwc_bits=nhwc_bits, const=const)
    return builder.call_te(
        conv2d_bf16, call.args[0], const(pack_conv_weights(w)), kernel=(int(w.shape[2]), int(w.shape[3])),
        out_shape=tuple(int(d) for d in out_shape), strides=tuple(int(v) for v in a.strides),
        padding=(pad[0], pad[1]), dilation=tuple(int(v) for v in a.dilation), primfunc_name_hint="conv2d_bf16")


def fold_batch_norms(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with batch-norm folded into its convolutions' constant weights (:data:`FOLD_FIRST`)."""
    from explorer.passes.catalog import make_pass

    return tvm.transform.Sequential([make_pass(name) for name in FOLD_FIRST])(mod)


def bf16_convs(mod: tvm.IRModule, *, amx: bool = False, vectors: bool = False,
               folded: tvm.IRModule | None = None, fp32: frozenset[int] = frozenset(),
               packed_from: dict | None = None) -> tuple[tvm.IRModule, int, tuple[str, ...]]:
    """``mod`` with its 2-D convolutions as bf16 kernels (module docstring; ``amx``: for a CPU with
    AMX-BF16 tiles, the direct NHWC kernel where it fits; ``vectors``: for a CPU whose vdpbf16ps pays, its
    direct NHWC kernel where it fits), how many, and the convolutions
    :func:`why_fp32` kept in fp32 (why, one line each). ``folded``: ``mod`` with its batch norms
    folded already (:func:`fold_batch_norms`, a quarter of a second on ResNet-18), where the caller
    has it; None: folded here. ``mod`` itself comes back where no convolution is converted. ``fp32``:
    the ordinals of convolutions kept fp32 whatever their size (their bf16 kernel could not be
    scheduled); ``packed_from``: filled with each packed weight constant's ordinal
    (:mod:`explorer.passes.bf16_conv_retry`)."""
    if not has_convs(mod):
        return mod, 0, ()
    converted, kept = [], []
    folded = fold_batch_norms(mod) if folded is None else folded
    ordinals = conv_ordinals(folded)
    fp32_weights = frozenset(w for w, n in ordinals.items() if n in fp32)
    packed_from = {} if packed_from is None else packed_from
    producers_round = (amx or vectors) and PRODUCER_ROUNDS
    rounded = frozenset(rounded_by_producer(folded)) if producers_round else frozenset()
    pooled = frozenset(pools_reading_bits(folded, lambda conv: _converts(conv, amx, vectors, fp32_weights))) \
        if producers_round else frozenset()
    shared = frozenset(shared_as_bits(folded, lambda conv: _reads_bits(conv, amx, vectors, fp32_weights))) \
        if producers_round else frozenset()
    bits_of: dict = {}  # a shared output -> its bits (NHWC), emitted where its first reader is

    def bits(var, builder):
        if var not in bits_of:
            bits_of[var] = _nhwc_bits(var, builder)
        return bits_of[var]

    def counted(call, builder):
        pool = pool_of_bits(call, builder, pooled)  # (a max pool reading its producer's bits: no conversion)
        if pool is not None:
            return pool
        add = add_of_bits(call, shared, bits, builder)  # a residual add: the bits widened
        if add is not None:
            return add
        given = bits(call.args[0], builder) if call.op.same_as(_CONV2D) and call.args[0] in shared else None

        def const(packed):  # the packed weights remember the convolution they came from
            made = relax.const(packed)
            if call.args[1] in ordinals:
                packed_from[made] = ordinals[call.args[1]]
            return made

        new = _rewrite(call, builder, kept, amx, rounded, vectors, nhwc_bits=given, fp32=fp32_weights, const=const)
        converted.extend([call] if new is not None else [])
        return new

    rewritten = rewrite_calls(folded, counted)
    if not converted:
        return mod, 0, tuple(kept)
    return relax.transform.DeadCodeElimination()(rewritten), len(converted), tuple(kept)


@tvm.transform.module_pass(opt_level=0, name="Bf16Convs")
def Bf16Convs(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """2-D convolutions with constant weights as bf16 kernels with fp32 accumulation (module
    docstring), through the im2col kernel (the direct one needs to know the CPU has AMX tiles or a
    vdpbf16ps that pays: :func:`explorer.precision.bf16_module`)."""
    return bf16_convs(mod)[0]


__all__ = ["AMX_DIRECT_ENABLED", "FOLD_FIRST", "MIN_REDUCTION", "MIN_REDUCTION_DIRECT", "MIN_SPLIT_WORK",
           "PRODUCER_ROUNDS", "VECTOR_DIRECT_ENABLED", "VECTOR_MIN_RATE", "Bf16Convs", "bf16_convs", "conv2d_bf16",
           "fold_batch_norms", "has_convs",
           "pack_conv_weights", "row_panels", "split_fits", "split_product", "vdpbf16ps_pays", "why_convs_fp32", "why_fp32"]
