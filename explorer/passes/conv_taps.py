"""``DropDeadConvTaps``: kernel taps of a convolution that only ever read padding are removed.

A dilated convolution on a small feature map reads mostly padding: DeepLabV3's ASPP (3x3,
dilation 12/24/36) on a 16x16 map of a 256-pixel input touches only its centre tap, the eight
others land in the zero padding for every output pixel, so 8/9 of its multiply-adds are by zero
(three such convolutions were 3.4 of the model's 4.5 GFLOP). When the taps that can reach the
input form a smaller window for every output position, the convolution is rewritten with that
window of its weights (a constant) and its padding shifted to match; a window of one tap becomes
a 1x1 convolution. The output is the same, exactly (only terms that are always 0 are dropped).

Where every tap reads the input for some output but most read padding for most outputs (a 3x3
convolution with dilation 12 on a 16x16 map: the outer taps reach the input only from the four
outputs nearest each border), the output is cut into the bands of rows and of columns that read
through the same taps (:func:`tap_bands`), and each region is a convolution of its own over the
slice of the input it reads, with only those taps and no padding; the regions are concatenated
back. Done where it saves at least half of the multiply-adds, in at most 3x3 regions: DeepLabV3's
ASPP convolution keeps a quarter of them.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from explorer.passes.call_rewrite import rewrite_calls, static_ints

_CONV2D = tvm.ir.Op.get("relax.nn.conv2d")


def live_taps(size: int, kernel: int, stride: int, dilation: int, pad_before: int, pad_after: int
              ) -> tuple[int, int] | None:
    """The first and last kernel tap (along one axis) that reads the input for some output
    position, or None when every tap does (nothing to drop) or none does."""
    out = (size + pad_before + pad_after - dilation * (kernel - 1) - 1) // stride + 1
    live = [k for k in range(kernel)
            if any(0 <= o * stride + k * dilation - pad_before < size for o in range(out))]
    if not live or (live[0] == 0 and live[-1] == kernel - 1):
        return None
    return live[0], live[-1]


def tap_bands(size: int, kernel: int, stride: int, dilation: int, pad_before: int, pad_after: int
              ) -> list[tuple[int, int, int, int]] | None:
    """Runs of output positions (along one axis) that read the input through the same taps:
    ``(first output, end, first tap, last tap)``; None where an output reads only padding."""
    out = (size + pad_before + pad_after - dilation * (kernel - 1) - 1) // stride + 1
    bands: list[tuple[int, int, int, int]] = []
    for o in range(out):
        live = [k for k in range(kernel) if 0 <= o * stride + k * dilation - pad_before < size]
        if not live:
            return None
        if bands and bands[-1][2:] == (live[0], live[-1]):
            bands[-1] = (bands[-1][0], o + 1, live[0], live[-1])
        else:
            bands.append((o, o + 1, live[0], live[-1]))
    return bands


def _kept_fraction(bands: list[tuple[int, int, int, int]], kernel: int) -> float:
    out = bands[-1][1]
    return sum((end - start) * (hi - lo + 1) for start, end, lo, hi in bands) / (out * kernel)


def _axis(size, kernel, stride, dilation, before, after):
    """(first tap, taps kept, new pad before, new pad after) along one axis."""
    out = (size + before + after - dilation * (kernel - 1) - 1) // stride + 1
    taps = live_taps(size, kernel, stride, dilation, before, after)
    if taps is None:
        return 0, kernel, before, after
    lo, hi = taps
    kept = hi - lo + 1
    new_before = before - lo * dilation
    new_after = (out - 1) * stride + dilation * (kept - 1) + 1 - size - new_before
    if new_before < 0 or new_after < 0:
        return 0, kernel, before, after
    return lo, kept, new_before, new_after


def _drop_taps(call: relax.Call, builder):
    if not call.op.same_as(_CONV2D):
        return None
    data, weight = call.args
    a = call.attrs
    if (not isinstance(weight, tvm.ir.Constant) or a.data_layout != "NCHW" or a.kernel_layout != "OIHW"
            or getattr(data, "ty", None) is None):
        return None
    shape = static_ints(getattr(data.ty, "shape", None) or [])
    if shape is None or len(shape) != 4:
        return None
    w = weight.value.numpy()
    top, left, bottom, right = (int(p) for p in a.padding)
    (sh, sw), (dh, dw) = (int(s) for s in a.strides), (int(d) for d in a.dilation)
    lh, kh, top2, bottom2 = _axis(shape[2], w.shape[2], sh, dh, top, bottom)
    lw, kw, left2, right2 = _axis(shape[3], w.shape[3], sw, dw, left, right)
    if (kh, kw) == tuple(w.shape[2:]):
        return _by_regions(data, w, a, shape, call)
    kept = np.ascontiguousarray(w[:, :, lh:lh + kh, lw:lw + kw])
    return relax.op.nn.conv2d(data, relax.const(kept, str(w.dtype)), strides=(sh, sw),
                              padding=(top2, left2, bottom2, right2),
                              dilation=(dh if kh > 1 else 1, dw if kw > 1 else 1), groups=int(a.groups),
                              data_layout="NCHW", kernel_layout="OIHW", out_layout=a.out_layout,
                              out_dtype=str(call.ty.dtype))


def _by_regions(data, w: np.ndarray, a, shape: list[int], call: relax.Call):
    """The convolution as one convolution per region of outputs that read the same taps (see
    the module docstring), or None where that would not save half of the multiply-adds."""
    top, left, bottom, right = (int(p) for p in a.padding)
    (sh, sw), (dh, dw) = (int(s) for s in a.strides), (int(d) for d in a.dilation)
    rows = tap_bands(shape[2], w.shape[2], sh, dh, top, bottom)
    cols = tap_bands(shape[3], w.shape[3], sw, dw, left, right)
    if rows is None or cols is None or len(rows) > 3 or len(cols) > 3 or len(rows) * len(cols) < 2:
        return None
    if _kept_fraction(rows, w.shape[2]) * _kept_fraction(cols, w.shape[3]) > 0.5:
        return None
    bands = []
    for r0, r1, rlo, rhi in rows:
        parts = []
        for c0, c1, clo, chi in cols:
            begin = [r0 * sh + rlo * dh - top, c0 * sw + clo * dw - left]
            end = [(r1 - 1) * sh + rhi * dh - top + 1, (c1 - 1) * sw + chi * dw - left + 1]
            piece = relax.op.strided_slice(data, axes=[2, 3], begin=begin, end=end)
            taps = np.ascontiguousarray(w[:, :, rlo:rhi + 1, clo:chi + 1])
            parts.append(relax.op.nn.conv2d(
                piece, relax.const(taps, str(w.dtype)), strides=(sh, sw), padding=(0, 0, 0, 0),
                dilation=(dh if rhi > rlo else 1, dw if chi > clo else 1), groups=int(a.groups),
                data_layout="NCHW", kernel_layout="OIHW", out_layout=a.out_layout, out_dtype=str(call.ty.dtype)))
        bands.append(parts[0] if len(parts) == 1 else relax.op.concat(parts, axis=3))
    return bands[0] if len(bands) == 1 else relax.op.concat(bands, axis=2)


@tvm.transform.module_pass(opt_level=0, name="DropDeadConvTaps")
def DropDeadConvTaps(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """Drop the convolution taps that only read padding (see the module docstring)."""
    return rewrite_calls(mod, _drop_taps)


__all__ = ["DropDeadConvTaps", "live_taps", "tap_bands"]
