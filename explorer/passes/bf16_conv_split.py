"""The split product: a bf16 convolution on AMX-BF16 tiles whose weights keep about fp32's accuracy,
for the convolutions whose reduction is too short for plain bf16 to be worth its rounding error
(:func:`explorer.passes.bf16_conv.split_product`).

Each weight is split into two bf16 parts, ``w = Wh + Wl`` (``Wh`` rounded to nearest even, ``Wl``
what that left, rounded: :data:`WEIGHT_PARTS`); the input is rounded once, ``Xh``. The direct NHWC
kernel of :mod:`explorer.passes.bf16_conv_nhwc` then runs with twice the input channels:

    y = sum over taps and channels  Xh Wh + Xh Wl

the weights' rounding gone (about 2^-16 of each product left), the activations' kept (2^-8, as in
plain bf16). Three products ``Xh Wh + Xl Wh + Xh Wl`` (the activations split too, about fp32's
accuracy, 1.5x the work) were the rule before: MobileNetV2's 1x1 expansions 64 -> 384 and 96 -> 576
@14 alone take 0.82x their time with two (one thread, alternated), and the model's error on inputs
0-4 stayed under 8.2e-3 (7.15-8.22e-3 with three products; the activations split and the weights
rounded instead: 9.57e-3; plain bf16: 1.05e-2): docs/notes/measurements.md, "Night of 2026-12-06".

The packing block writes each input pixel ``PARTS`` times side by side (``[Xh | Xh]``, one channel
group a weight part), channels contiguous: computed as one column per part, stored by a layout
transform as one pixel of ``PARTS x C`` channels, which the kernel's tiles read as any NHWC input
(a select per channel lane kept the packing scalar: the 96 -> 576 @14 kernel 3.4x slower). One A
tile against both weight parts' B tiles would read the input once: not built.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import s_tir, te

from explorer.passes.bf16_conv_nhwc import (CONV_NAME, INPUT_NAME, MAX_CHANNEL_PADDING, ROW_STRIDE_ATTR,
                                           pack_nhwc_weights, rounded_bits)
from explorer.passes.bf16_dense import bf16_round
from explorer.schedule.amx_bf16_conv import K_CHANNELS
from explorer.schedule.bf16_dot import BF16_ATTR, PACK_ATTR, PAIR, PANEL, widen

HI, LO = 0, 1  # a weight's parts: rounded to bf16, and what that left (rounded)
WEIGHT_PARTS = (HI, LO)  # the weight part each channel group of the product meets (module docstring)
PARTS = len(WEIGHT_PARTS)  # the input's copies as the kernel reads them, one channel group each
# TVM's operator pattern kOutEWiseFusable (a reduction whose element-wise consumers fuse into it):
# what AnnotateTIROpPattern finds for the plain kernel, but not through the packing block's layout
# transform (it says opaque, and the bias, activation and residual add would run as kernels of
# their own, another pass over the output; in MobileNetV2 the two builds timed level, one thread)
OUT_EWISE_FUSABLE = 4


def split_group(channels: int) -> int | None:
    """The channels of one input part: ``channels`` up to whole tile rows (so that the parts start
    on tile rows), where that pads at most :data:`~explorer.passes.bf16_conv_nhwc.MAX_CHANNEL_PADDING`;
    None: no split product for this many channels."""
    whole = -(-channels // K_CHANNELS) * K_CHANNELS
    return whole if whole <= channels * (1 + MAX_CHANNEL_PADDING) else None


def pack_split_weights(w_oihw: np.ndarray) -> np.ndarray:
    """``[OC, IC, KH, KW]`` fp32 weights as the split product's packed bf16 weights: the input
    channels once per weight part (:data:`WEIGHT_PARTS`: ``Wh``, ``Wl``), each part
    :func:`split_group` channels (:func:`~explorer.passes.bf16_conv_nhwc.pack_nhwc_weights` of those)."""
    oc, ic, kh, kw = w_oihw.shape
    hi = bf16_round(np.asarray(w_oihw, np.float32))
    lo = bf16_round(w_oihw - hi)
    group = split_group(ic)
    parts = np.zeros((oc, PARTS * group, kh, kw), np.float32)
    for k, part in enumerate(WEIGHT_PARTS):
        parts[:, k * group:k * group + ic] = lo if part == LO else hi
    return pack_nhwc_weights(parts, PARTS * group)


def conv2d_nhwc_bf16_split(x: te.Tensor, w: te.Tensor, *, strides=(1, 1), padding=(0, 0),
                           out_hw: tuple[int, int]) -> tuple[te.Tensor, te.Tensor]:
    """The split product of the fp32 NHWC ``x`` by ``w`` (:func:`pack_split_weights`), fp32 sums,
    NHWC output with the output channels padded to 16: ``(packed input, output)``, the packed input
    with each pixel as :data:`PARTS` columns (:func:`split_conv_func` stores them as one pixel)."""
    n = int(x.shape[0])
    panels, kh, kw, pairs = (int(v) for v in w.shape[:4])
    (sh, sw), (pt, pl), (oh, ow) = strides, padding, out_hw
    group = pairs * PAIR // PARTS

    def convert(b, yy, q, ci):  # pixel q // PARTS (each part the same Xh)
        return rounded_bits(x, b, yy - pt, q // PARTS - pl, ci)

    xb = te.compute((n, (oh - 1) * sh + kh, PARTS * ((ow - 1) * sw + kw), group), convert, name=INPUT_NAME,
                    attrs={PACK_ATTR: 1})
    rh, rw = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw")
    rc = te.reduce_axis((0, PARTS * group), "rc")
    y = te.compute(
        (n, oh, ow, panels * PANEL),
        lambda b, yy, xx, o: te.sum(
            widen(xb[b, yy * sh + rh, (xx * sw + rw) * PARTS + rc // group, rc % group])
            * widen(w[o // PANEL, rh, rw, rc // PAIR, o % PANEL, rc % PAIR]), axis=[rh, rw, rc]),
        name=CONV_NAME, attrs={BF16_ATTR: panels, ROW_STRIDE_ATTR: sw})
    return xb, y


def split_conv_func(x_shape, w_shape, *, strides=(1, 1), padding=(0, 0), out_hw: tuple[int, int]) -> tvm.tirx.PrimFunc:
    """The split product as a PrimFunc ``(x, w, y)`` (:func:`conv2d_nhwc_bf16_split`), its packed
    input stored as NHWC pixels of ``PARTS x C`` channels: the layout the direct kernel's tiles read;
    marked as a kernel its element-wise consumers fuse into (:data:`OUT_EWISE_FUSABLE`)."""
    x = te.placeholder([int(d) for d in x_shape], "float32", "x")
    w = te.placeholder([int(d) for d in w_shape], "uint16", "w")
    _, y = conv2d_nhwc_bf16_split(x, w, strides=strides, padding=padding, out_hw=out_hw)
    sch = s_tir.Schedule(te.create_prim_func([x, w, y], "int64"))  # (int64 indices, as BlockBuilder.call_te)
    group = int(w_shape[3]) * PAIR // PARTS
    sch.transform_layout(sch.get_sblock(INPUT_NAME), ("write", 0),
                         lambda b, yy, q, ci: (b, yy, q // PARTS, q % PARTS * group + ci))
    return sch.mod["main"].with_attr("op_pattern", OUT_EWISE_FUSABLE)


__all__ = ["PARTS", "WEIGHT_PARTS", "conv2d_nhwc_bf16_split", "pack_split_weights", "split_conv_func", "split_group"]
