"""``PadConvOutputChannels``: a channels-last convolution whose output channels are not a multiple
of 8 (or, where it costs little, of 16) computes whole vectors of them, and drops the extra ones after.

A CPU default schedule vectorizes a channels-last convolution over its output channels, in tiles
that are a multiple of the vector lanes. Detection heads end in counts no vector divides (YOLO's
``3 x (5 + classes)`` = 75 or 255, SSD's ``anchors x classes`` = 546): their convolutions got
a scalar tile, 5 GFLOPS where their neighbours ran at 120 (a YOLO's three heads, 30% of its
time). Here their constant weights gain zero columns up to a multiple of 16 (8 where 16 would
add more than an eighth), the convolution computes those zeros too, and a ``strided_slice`` keeps
the real channels; the epilogue that follows (bias, activation) reads only those. The output is
the same, exactly. Convolutions with fewer than 8 outputs, groups, or weights computed at run
time are left alone, as are integer ones (their own kernels: explorer.passes.qdq_int8) and NCHW
ones (vectorized over pixels, not channels).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from explorer.passes.call_rewrite import rewrite_calls

_CONVS = {tvm.ir.Op.get("relax.nn.conv2d"): relax.op.nn.conv2d, tvm.ir.Op.get("relax.nn.conv1d"): relax.op.nn.conv1d}
MIN_CHANNELS = 8


def padded_channels(channels: int) -> int:
    """The output channels a convolution computes for ``channels`` wanted: ``channels`` itself when
    16 divides it or it is smaller than 8; else the next multiple of 16, or of 8 where 16 would add
    more than an eighth of the work. A multiple of 8 is padded to 16 only where that adds at most
    1/32 of the work: AVX2's 8 lanes divide it already, AVX-512's 16 do not (its tiles would run
    8 lanes wide, half the vector)."""
    if channels < MIN_CHANNELS or channels % 16 == 0:
        return channels
    by16 = -(-channels // 16) * 16
    if channels % 8 == 0:
        return by16 if (by16 - channels) * 32 <= channels else channels
    return by16 if (by16 - channels) * 8 <= channels else -(-channels // 8) * 8


def _pad_outputs(call: relax.Call, builder):
    make = next((f for op, f in _CONVS.items() if call.op.same_as(op)), None)
    if make is None:
        return None
    data, weight = call.args
    a = call.attrs
    out_layout = str(a.out_layout or a.data_layout)
    if (not isinstance(weight, tvm.ir.Constant) or "float" not in str(weight.value.dtype) or int(a.groups) != 1
            or not str(a.kernel_layout).endswith("O") or not str(a.data_layout).endswith("C") or not out_layout.endswith("C")):
        return None
    w = weight.value.numpy()
    channels = int(w.shape[-1])
    wanted = padded_channels(channels)
    if wanted == channels:
        return None
    padded = np.zeros(w.shape[:-1] + (wanted,), dtype=w.dtype)
    padded[..., :channels] = w
    y = make(data, relax.const(padded, str(w.dtype)), strides=a.strides, padding=a.padding, dilation=a.dilation,
             groups=1, data_layout=a.data_layout, kernel_layout=a.kernel_layout, out_layout=a.out_layout,
             out_dtype=str(call.ty.dtype))
    rank = len(out_layout)
    return relax.op.strided_slice(y, axes=[rank - 1], begin=[0], end=[channels])


@tvm.transform.module_pass(opt_level=0, name="PadConvOutputChannels")
def PadConvOutputChannels(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """Pad channels-last convolutions' output channels to whole vectors (see the module docstring)."""
    return rewrite_calls(mod, _pad_outputs)


__all__ = ["PadConvOutputChannels", "padded_channels"]
