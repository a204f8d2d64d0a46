"""``PadConvOutputChannels``: a channels-last convolution whose output channels no vector of the
target divides computes whole vectors of them, and drops the extra ones after.

A CPU default schedule vectorizes a channels-last convolution over its output channels, in tiles
that are a multiple of the vector lanes. Detection heads end in counts no vector divides (YOLO's
``3 x (5 + classes)`` = 75 or 255, SSD's ``anchors x classes`` = 546): their convolutions got
a scalar tile, 5 GFLOPS where their neighbours ran at 120 (a YOLO's three heads, 30% of its
time). On AVX-512 a count that 8 divides and 16 does not (MobileNetV2's and EfficientNet's 24- and
40-channel 1x1 projections, SqueezeNet's 1000 classes) got tiles 8 lanes wide, half the vector.
Here their constant weights gain zero columns up to whole vectors (:func:`padded_channels`, from
the lanes of the CPU the pipeline compiles for: :func:`explorer.passes.pass_target.pass_cpu_target`),
the convolution computes those zeros too, and a ``strided_slice`` keeps the real channels; the
epilogue that follows (bias, activation) reads only those. The output is the same, exactly.
Convolutions with fewer than 8 outputs, groups, or weights computed at run time are left alone, as
are integer ones (their own kernels: explorer.passes.qdq_int8) and NCHW ones (vectorized over
pixels, not channels).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tvm
from tvm import relax

from explorer.passes.call_rewrite import rewrite_calls
from explorer.passes.pass_target import cpu_rewrite

_CONVS = {tvm.ir.Op.get("relax.nn.conv2d"): relax.op.nn.conv2d, tvm.ir.Op.get("relax.nn.conv1d"): relax.op.nn.conv1d}
MIN_CHANNELS = 8


def padded_channels(channels: int, lanes: int) -> int:
    """The output channels a convolution computes for ``channels`` wanted, on a CPU with ``lanes``
    vector lanes of its type: ``channels`` itself when the lanes divide it or it is smaller than 8;
    else the next multiple of the lanes where that adds at most a third of the work, or of 8 (half
    an AVX-512 vector, no longer scalar) where it would add more.

    The third is measured on AVX-512, 1 thread: MobileNetV2's and EfficientNet-B0's 1x1 projections
    (with their bias and residual adds) to 24 channels padded to 32 (a third more work) ran
    1.1-1.4x faster, 40 -> 48 1.2x, SqueezeNet 1.1 (1000 -> 1008 classes) 1.2x faster whole; 8 -> 16
    would double the work. On AVX2 (8 lanes) those
    counts are whole vectors already and stay as they are (16 would be 33% more work for nothing)."""
    if channels < MIN_CHANNELS or channels % lanes == 0:
        return channels
    whole = -(-channels // lanes) * lanes
    if (whole - channels) * 3 <= channels:
        return whole
    return -(-channels // 8) * 8


def _pad_outputs(call: relax.Call, builder, lanes: Callable[[str], int]):
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
    wanted = padded_channels(channels, lanes(str(w.dtype)))
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
@cpu_rewrite
def PadConvOutputChannels(mod: tvm.IRModule, target) -> tvm.IRModule:
    """Pad channels-last convolutions' output channels to whole vectors of the CPU the pipeline compiles
    for (see the module docstring)."""
    spec = target.cpu_spec()
    return rewrite_calls(mod, lambda call, builder: _pad_outputs(call, builder, spec.lanes))


__all__ = ["PadConvOutputChannels", "padded_channels"]
