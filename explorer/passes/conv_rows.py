"""Convolutions on rows the AMX kernel tiles: for a bf16 build on a CPU with AMX-BF16 tiles, a
convolution whose output rows the direct AMX kernel cannot tile computed over rows it can.

The direct kernel (:mod:`explorer.passes.bf16_conv_nhwc`) tiles output rows of a width that one of
:data:`explorer.schedule.amx_int8.GRIDS` divides (multiples of 7, 8, 14, 16 pixels), and stride-1
convolutions larger than 1x1 across rows. A map of another width takes the im2col kernel instead,
and a short reduction there stays fp32 (:func:`explorer.passes.bf16_conv.why_fp32`): TensorFlow's
ResNet50V2 at 160 x 160 has its last three stages on 20-, 10- and 5-pixel maps, where every 1x1
and every strided convolution fell off the direct kernel (fp32 ones at 270 GFLOPS, im2col ones at
100-700, and transposes between the layouts they left).

- **A 1x1 stride-1 convolution** is the same product for every pixel, so its ``H x W`` pixels
  can take any shape: here one row of ``H * W`` pixels, padded on the right with zero columns to
  a width ``P`` the kernel tiles (:func:`padded_width`: 100 -> 112, 25 -> 28, 400 stays), the
  ``P - H*W`` extra outputs (zero inputs; the bias and activation that
  :mod:`explorer.passes.row_epilogue` moves onto the row are computed on them too) sliced off after.
- **A strided convolution** gets more zero padding on the right, so that its output rows are
  ``P`` wide (20 -> 28, 10 -> 14, 5 -> 7: at most :data:`MAX_STRIDED_PADDING` more products),
  the extra columns sliced off after.

The reshapes and the slice are written on the NHWC value, between transposes that
``SinkTransposes`` cancels against those the direct kernel puts around itself, so the activations
stay NHWC from one convolution to the next. The bias, activation, batch norm and residual add after such a
convolution are computed on its rows, before the slice and the reshape, so that they join its kernel
(:mod:`explorer.passes.row_epilogue`). Only for AMX CPUs
(:func:`explorer.precision.bf16_module` calls it), only where the direct kernel then takes the
convolution in bf16 (``why_fp32``), and after batch-norm is folded
(:func:`explorer.passes.bf16_conv.fold_batch_norms`: a batch-norm after the slice would no longer
fold into the convolution).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from explorer.ir.relax_walk import tensor_info
from explorer.passes.bf16_conv import fold_batch_norms, has_convs, split_fits, why_fp32
from explorer.passes.bf16_conv_nhwc import amx_direct_fits
from explorer.passes.bf16_dense import constant_value
from explorer.passes.call_rewrite import rewrite_calls, static_ints
from explorer.passes.row_epilogue import epilogues_on_rows
from explorer.schedule.amx_int8 import GRIDS

_CONV2D = tvm.ir.Op.get("relax.nn.conv2d")
_FLOAT_OUT = ("", "None", "void", "float32")
TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]
# the most padding a 1x1 convolution's row may take, as a share of its pixels
MAX_PADDING = 1 / 7
# a strided convolution's output rows are padded up to this share (its extra outputs cost their
# products: 20 -> 28, 10 -> 14, 5 -> 7 pixels; the im2col kernel they leave ran at 100-220 GFLOPS,
# one thread, against the direct kernel's 600-1400)
MAX_STRIDED_PADDING = 2 / 5
# tiles of fewer pixels a call than this are worth some padding to avoid (7- and 8-pixel tiles use
# half of each tile's 16 rows)
GOOD_TILE = 14


def _tile(width: int) -> int:
    """The most pixels a call of the direct kernel takes along a row of ``width`` (0: none fits)."""
    return max((m * mt for m, mt in GRIDS if width % (m * mt) == 0), default=0)


def padded_width(pixels: int, most: float = MAX_PADDING) -> int | None:
    """The width a row of ``pixels`` pixels is padded to: the narrowest within ``most`` more whose
    tiles take at least :data:`GOOD_TILE` pixels a call, else the narrowest any tile fits; None
    where none fits."""
    widths = range(pixels, pixels + int(pixels * most) + 1)
    good = [w for w in widths if _tile(w) >= GOOD_TILE]
    fits = good or [w for w in widths if _tile(w)]
    return fits[0] if fits else None


def conv_weights(call: relax.Call, groups: range = range(1, 2)) -> np.ndarray | None:
    """The constant OIHW fp32 weights of an NCHW convolution with static shapes whose groups are in
    ``groups`` (ungrouped: 1), else None."""
    if not call.op.same_as(_CONV2D):
        return None
    a = call.attrs
    if (int(a.groups) not in groups or str(a.data_layout) != "NCHW" or str(a.kernel_layout) != "OIHW"
            or str(a.out_layout) != "NCHW" or str(a.out_dtype) not in _FLOAT_OUT):
        return None
    shape, dtype = tensor_info(call.args[0].ty)
    out_shape, _ = tensor_info(call.ty)
    w = constant_value(call.args[1])
    if (w is None or w.dtype != np.float32 or w.ndim != 4 or dtype != "float32" or shape is None or out_shape is None
            or len(shape) != 4 or static_ints([*shape, *out_shape]) is None or w.shape[0] % int(a.groups)):
        return None
    return w


def rewrite_folded(mod: tvm.IRModule, rewrite, folded: tvm.IRModule | None) -> tuple[tvm.IRModule, int]:
    """``(rewritten, count)``: ``mod`` with batch-norm folded (``folded``, where the caller has it;
    None: folded here) and every call ``rewrite`` answers replaced, and how many it answered;
    ``(mod, 0)`` where it answered none."""
    if not has_convs(mod):
        return mod, 0
    count = []

    def counted(call, builder):
        new = rewrite(call, builder)
        count.extend([call] if new is not None else [])
        return new

    rewritten = rewrite_calls(fold_batch_norms(mod) if folded is None else folded, counted)
    return (rewritten, len(count)) if count else (mod, 0)


def _converted(w: np.ndarray, width: int | None, attrs) -> bool:
    """Whether the direct kernel takes the convolution in bf16 on rows ``width`` wide."""
    return (width is not None and amx_direct_fits(w.shape, width, attrs.dilation, attrs.strides)
            and why_fp32(w.shape, direct=True, splittable=split_fits(w.shape, width)) is None)


def _one_row(call: relax.Call, w: np.ndarray, builder: relax.BlockBuilder):
    """A 1x1 stride-1 convolution over its map as one padded row (module docstring)."""
    n, c, h, wd = (int(v) for v in tensor_info(call.args[0].ty)[0])
    width = padded_width(h * wd)
    if not _converted(w, width, call.attrs):
        return None
    row = builder.emit(relax.op.reshape(builder.emit(relax.op.permute_dims(call.args[0], TO_NHWC)), (n, 1, h * wd, c)))
    conv = builder.emit(relax.op.nn.conv2d(builder.emit(relax.op.permute_dims(row, TO_NCHW)), call.args[1],
                                           padding=[0, 0, 0, width - h * wd]))
    y = builder.emit(relax.op.permute_dims(conv, TO_NHWC))
    if width > h * wd:
        y = builder.emit(relax.op.strided_slice(y, axes=[2], begin=[0], end=[h * wd]))
    return relax.op.permute_dims(builder.emit(relax.op.reshape(y, (n, h, wd, int(w.shape[0])))), TO_NCHW)


def _wider_rows(call: relax.Call, w: np.ndarray, builder: relax.BlockBuilder):
    """A strided convolution with its output rows padded to a width the kernel tiles (module docstring)."""
    a = call.attrs
    ow = int(tensor_info(call.ty)[0][3])
    width = padded_width(ow, MAX_STRIDED_PADDING)
    if not _converted(w, width, a):
        return None
    pt, pl, pb, pr = (int(v) for v in a.padding)
    conv = builder.emit(relax.op.nn.conv2d(call.args[0], call.args[1], strides=list(a.strides),
                                           padding=[pt, pl, pb, pr + (width - ow) * int(a.strides[1])],
                                           dilation=list(a.dilation)))
    y = builder.emit(relax.op.permute_dims(conv, TO_NHWC))
    return relax.op.permute_dims(builder.emit(relax.op.strided_slice(y, axes=[2], begin=[0], end=[ow])), TO_NCHW)


def _on_tiled_rows(call: relax.Call, builder: relax.BlockBuilder):
    w = conv_weights(call)
    if w is None:
        return None
    a = call.attrs
    if amx_direct_fits(w.shape, int(tensor_info(call.ty)[0][3]), a.dilation, a.strides):
        return None  # the direct kernel takes it as it is
    unit = all(int(v) == 1 for v in (*a.strides, *a.dilation))
    if unit and w.shape[2:] == (1, 1) and not any(int(v) for v in a.padding):
        return _one_row(call, w, builder)
    return None if unit else _wider_rows(call, w, builder)


def convs_on_tiled_rows(mod: tvm.IRModule, *, folded: tvm.IRModule | None = None) -> tuple[tvm.IRModule, int]:
    """``mod`` (batch-norm folded first) with its convolutions whose rows the direct AMX kernel
    cannot tile computed over rows it can (module docstring), and how many were; ``mod`` itself
    where none was. ``folded``: ``mod`` with its batch norms folded already, where the caller has it
    (:func:`explorer.precision.bf16_module` folds once for this and the bf16 rewrite); None: folded here."""
    rewritten, count = rewrite_folded(mod, _on_tiled_rows, folded)
    # the bias, activation and residual add after each, on its rows: in its kernel (explorer.passes.row_epilogue)
    return (epilogues_on_rows(rewritten)[0], count) if count else (mod, 0)


__all__ = ["GOOD_TILE", "MAX_PADDING", "MAX_STRIDED_PADDING", "conv_weights", "convs_on_tiled_rows", "padded_width",
           "rewrite_folded"]
