"""The direct bf16 convolution for CPUs with AMX-BF16 tiles, or with a ``vdpbf16ps`` that pays (AVX512-BF16
alone: :func:`vector_direct_fits`, :mod:`explorer.schedule.defaults.bf16_vector_conv`): NHWC, no im2col (the
int8 AMX kernel's design, :mod:`explorer.passes.qdq_int8`, in bf16).

    y[n, h, w, o] = sum f32(Xb[n, h*sh + kh, w*sw + kw, c]) * f32(Wb[o // 16, kh, kw, c // 2, o % 16, c % 2])

- ``Xb``: the fp32 NHWC input rounded to bf16 (nearest even) and padded **once per layer**, by the
  kernel's own packing block (``bf16_nhwc_input``), the channels padded with zeros to what the
  tiles read (:func:`nhwc_channels`); where the producer rounded it already
  (:mod:`explorer.passes.bf16_conv_bits`) only padded, or read as it is;
- ``Wb``: the weights rounded to bf16 **once, at build time**, packed in panels of 16 output
  channels x channel pairs (``[O/16, KH, KW, C/2, 16, 2]``: 16 pairs of a panel are one B tile);
- fp32 sums in tile registers over every tap and channel
  (:mod:`explorer.schedule.amx_bf16_conv`), the output NHWC fp32 with the output channels padded
  to 16 (sliced off after it). Tiles run along output rows of 7-16 pixels; at stride 1 with
  short rows (7x7 and 14x14 maps), across them (:func:`conv2d_nhwc_bf16_flat`). On vectors the
  input channels are padded to pairs only, the sums are zmm registers (2-16 pixels of a row by
  panels of 16 channels), and rows are never walked across.

The graph reads ``permute_dims(x, NHWC)`` and returns ``permute_dims(y, NCHW)``: between two such
convolutions ``SinkTransposes`` cancels the pair through the bias adds, activations, residual adds
and pools, so the activations stay NHWC fp32 from one convolution to the next.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import te

from explorer.passes.bf16_dense import bf16_bits
from explorer.schedule.amx_bf16_conv import K_CHANNELS, row_taps_fit
from explorer.schedule.amx_int8 import GRIDS
from explorer.schedule.bf16_dot import BF16_ATTR, PACK_ATTR, PAIR, PANEL, VECTOR_CONV_ROWS, to_bits, widen

ROW_STRIDE_ATTR = "schedx.bf16_row_stride"  # how far apart the input pixels of consecutive output pixels are
FLAT_ATTR = "schedx.bf16_flat_width"  # a kernel tiled across rows: the padded input's width
# the packing block's box of padded rows and columns that hold the input: [top, height, left, width]
# (the rest is zero padding; the schedule packs the box branch-free, :mod:`..defaults.bf16_amx_conv`)
INSIDE_ATTR = "schedx.bf16_pack_inside"
CONV_NAME, INPUT_NAME, ROWS_NAME = "conv2d_nhwc_bf16", "bf16_nhwc_input", "conv2d_nhwc_bf16_rows"
# stride-1 convolutions whose row tiling takes fewer pixels a call are tiled across rows: 7- and
# 14-pixel rows (3x3 256 @14 with a residual add, one thread: 0.181 -> 0.152 ms; 28-pixel rows, two
# tiles of 14 a call, level; 56 slower across rows: docs/notes/measurements.md)
FLAT_BELOW = 16
FLAT_TILE = 32  # the pixels a flat kernel's sums are padded to (two tiles of 16 rows)
# Input channels padded up to a multiple of 32 where that adds at most this share of the product
# (24 -> 32 channels: a third more products, still far fewer than an im2col copy costs)
MAX_CHANNEL_PADDING = 1 / 3


def _ceil(v: int, m: int) -> int:
    return -(-v // m) * m


def nhwc_channels(channels: int, kw: int) -> int | None:
    """The channels the padded NHWC input holds for the AMX kernel: ``channels`` up to a multiple of
    32 (a whole tile row a tap) where that pads at most :data:`MAX_CHANNEL_PADDING`, else up to
    a pair where a kernel row of ``kw`` taps then fits one tile row (the stem's 7 x 3 -> 7 x 4:
    28 values); None: no AMX kernel (the im2col path takes it)."""
    whole = _ceil(channels, K_CHANNELS)
    if whole <= channels * (1 + MAX_CHANNEL_PADDING):
        return whole
    pairs = _ceil(channels, PAIR)
    if row_taps_fit(pairs, kw):
        return pairs
    pairs = _ceil(channels, 2 * PAIR)  # a pair of pairs: odd kernel rows still end on a 4-byte boundary
    return pairs if row_taps_fit(pairs, kw) else None


def flat_rows(kernel: tuple[int, int], strides, out_width: int, channels: int) -> bool:
    """Whether a convolution's output pixels are tiled across its rows (:func:`conv2d_nhwc_bf16_flat`)
    rather than row by row: stride 1, not 1x1, ``channels`` (padded) whole tile rows, and output
    rows whose tiling takes fewer than :data:`FLAT_BELOW` pixels a call (a 7x7 map's 7-pixel rows
    fill 7 of a tile's 16 rows; 14-pixel rows one tile a call)."""
    best = max((m * mt for m, mt in GRIDS if out_width % (m * mt) == 0), default=0)
    return (tuple(int(v) for v in strides) == (1, 1) and tuple(kernel) != (1, 1) and channels % K_CHANNELS == 0
            and best < FLAT_BELOW)


def row_tiled(out_width: int) -> bool:
    """Whether output rows of ``out_width`` pixels split into whole tiles of 7-16 pixels (the row
    tiling of the direct kernel and of its split product)."""
    return any(out_width % (m * mt) == 0 for m, mt in GRIDS)


def amx_direct_fits(weight_shape, out_width: int, dilation, strides) -> bool:
    """Whether the direct AMX kernel takes a convolution: undilated, its channels padded as
    :func:`nhwc_channels` says, and its output rows split into tiles of 7-16 pixels, or tiled
    across rows (:func:`flat_rows`)."""
    _, ic, kh, kw = (int(v) for v in weight_shape)
    channels = nhwc_channels(ic, kw)
    return (all(int(d) == 1 for d in dilation) and channels is not None
            and (row_tiled(out_width) or flat_rows((kh, kw), strides, out_width, channels)))


def vector_direct_fits(out_width: int, dilation) -> bool:
    """Whether the direct kernel on ``vdpbf16ps`` alone takes a convolution (input channels padded to
    pairs, any count): undilated, output rows of ``out_width`` pixels that a tile of
    :data:`~explorer.schedule.bf16_dot.VECTOR_CONV_ROWS` pixels divides."""
    return all(int(d) == 1 for d in dilation) and any(out_width % r == 0 for r in VECTOR_CONV_ROWS if r <= out_width)


def pack_nhwc_weights(w_oihw: np.ndarray, channels: int) -> np.ndarray:
    """``[OC, IC, KH, KW]`` fp32 weights as bf16 bits ``[OC/16, KH, KW, channels/2, 16, 2]`` (output
    channels padded to 16, input channels to ``channels``, with zero weights)."""
    oc, ic, kh, kw = w_oihw.shape
    ocp = _ceil(oc, PANEL)
    wp = np.zeros((ocp, channels, kh, kw), np.float32)
    wp[:oc, :ic] = w_oihw
    packed = wp.transpose(0, 2, 3, 1).reshape(ocp // PANEL, PANEL, kh, kw, channels // PAIR, PAIR)
    return np.ascontiguousarray(bf16_bits(packed.transpose(0, 2, 3, 4, 1, 5)))


def rounded_bits(x: te.Tensor, b, iy, ix, ci):
    """``x[b, iy, ix, ci]`` rounded to bf16 bits (``x`` fp32; a uint16 ``x`` is bf16 bits already,
    rounded by its producer: :mod:`explorer.passes.bf16_conv_bits`), 0 outside ``x`` (the padding,
    the padded channels); the read itself clamped inside, so that a vectorized select of both
    branches reads no byte outside the buffer."""
    _, h, wd, c = (int(v) for v in x.shape)
    inside = tvm.tirx.all(ci < c, iy >= 0, iy < h, ix >= 0, ix < wd)
    clamp = lambda v, n: tvm.te.max(tvm.te.min(v, n - 1), 0)  # noqa: E731
    value = x[b, clamp(iy, h), clamp(ix, wd), clamp(ci, c)]
    return tvm.tirx.if_then_else(inside, value if x.dtype == "uint16" else to_bits(value), tvm.tirx.const(0, "uint16"))


def conv2d_nhwc_bf16(x: te.Tensor, w: te.Tensor, *, strides=(1, 1), padding=(0, 0),
                     out_hw: tuple[int, int]) -> te.Tensor:
    """The convolution of the fp32 NHWC ``x`` by the packed bf16 weights ``w``
    (:func:`pack_nhwc_weights`), fp32 sums, NHWC output (module docstring); ``padding``: the top
    and left padding (the bottom and right are implied by ``out_hw``). A uint16 ``x`` is bf16 bits
    already (:mod:`explorer.passes.bf16_conv_bits`): packed without rounding, or not packed at all
    where nothing is padded (a 1x1 convolution whose channels fill whole tile rows)."""
    n = int(x.shape[0])
    panels, kh, kw, pairs = (int(v) for v in w.shape[:4])
    (sh, sw), (pt, pl), (oh, ow) = strides, padding, out_hw
    channels = pairs * PAIR

    def convert(b, yy, xx, ci):  # the input rounded once: padded, channels padded with zeros
        return rounded_bits(x, b, yy - pt, xx - pl, ci)

    packed = (n, (oh - 1) * sh + kh, (ow - 1) * sw + kw, channels)
    if x.dtype == "uint16" and tuple(int(v) for v in x.shape) == packed and (pt, pl) == (0, 0):
        xb = x  # bf16 bits already, nothing to pad: the tiles read the input itself
    else:
        attrs = {PACK_ATTR: 1}
        if channels % PANEL:  # channels no vector fills (a stem's 3 + 1): where the box is packed apart
            attrs[INSIDE_ATTR] = [pt, int(x.shape[1]), pl, int(x.shape[2])]
        xb = te.compute(packed, convert, name=INPUT_NAME, attrs=attrs)
    rh, rw, rc = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw"), te.reduce_axis((0, channels), "rc")
    return te.compute(
        (n, oh, ow, panels * PANEL),
        lambda b, yy, xx, o: te.sum(
            widen(xb[b, yy * sh + rh, xx * sw + rw, rc]) * widen(w[o // PANEL, rh, rw, rc // PAIR, o % PANEL, rc % PAIR]),
            axis=[rh, rw, rc]),
        name=CONV_NAME, attrs={BF16_ATTR: panels, ROW_STRIDE_ATTR: sw})


def conv2d_nhwc_bf16_flat(x: te.Tensor, w: te.Tensor, *, padding=(0, 0), out_hw: tuple[int, int]) -> te.Tensor:
    """:func:`conv2d_nhwc_bf16` at stride 1 with the output pixels tiled across rows: the sums are
    computed for every pixel ``p = y * W' + x`` of the padded input's width ``W'`` (the ``kw - 1``
    columns past each output row are computed and dropped), so that tap ``(rh, rw)`` of pixel
    ``p`` is input pixel ``p + rh * W' + rw`` of the flattened padded input: tiles of 16 pixels
    at any output width (a 7x7 map: 63 pixels in two calls of 32, not seven of 7). A copy block
    (``conv2d_nhwc_bf16_rows``) picks the output rows out."""
    n = int(x.shape[0])
    panels, kh, kw, pairs = (int(v) for v in w.shape[:4])
    (pt, pl), (oh, ow) = padding, out_hw
    channels, width = pairs * PAIR, ow + kw - 1
    pixels = _ceil(oh * width, FLAT_TILE)

    def convert(b, q, ci):  # the flattened padded input, rounded once (zeros past its last row)
        return rounded_bits(x, b, q // width - pt, q % width - pl, ci)

    xb = te.compute((n, pixels + (kh - 1) * width + kw - 1, channels), convert, name=INPUT_NAME,
                    attrs={PACK_ATTR: 1})
    rh, rw, rc = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw"), te.reduce_axis((0, channels), "rc")
    y = te.compute(
        (n, pixels, panels * PANEL),
        lambda b, p, o: te.sum(
            widen(xb[b, p + rh * width + rw, rc]) * widen(w[o // PANEL, rh, rw, rc // PAIR, o % PANEL, rc % PAIR]),
            axis=[rh, rw, rc]),
        name=CONV_NAME, attrs={BF16_ATTR: panels, ROW_STRIDE_ATTR: 1, FLAT_ATTR: width})
    return te.compute((n, oh, ow, panels * PANEL), lambda b, yy, xx, o: y[b, yy * width + xx, o], name=ROWS_NAME)


__all__ = ["CONV_NAME", "FLAT_ATTR", "INPUT_NAME", "INSIDE_ATTR", "MAX_CHANNEL_PADDING", "ROWS_NAME",
           "ROW_STRIDE_ATTR", "amx_direct_fits", "conv2d_nhwc_bf16", "conv2d_nhwc_bf16_flat", "flat_rows",
           "nhwc_channels", "pack_nhwc_weights", "rounded_bits", "row_tiled", "vector_direct_fits"]
