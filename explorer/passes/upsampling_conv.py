"""``TransposedConvAsPixelShuffle``: a transposed convolution as an ordinary stride-1 convolution
with ``stride**2`` times the output channels, followed by a pixel shuffle and a crop.

Upsampling layers (U-Nets, GAN generators, segmentation and text-detection decoders, vocoders) use
``ConvTranspose``. TOPI computes it as a convolution over the input with ``stride - 1`` zeros
inserted between its pixels, so 3/4 of its multiply-adds are by zero at stride 2, and it stays in
NCHW (TVM's layout conversion leaves it unlowered): a DBNet head's last one ran at 2% of the peak,
36% of the model; a 4x4 stride-2 one (DCGAN, U-Net) 4.9x ONNX Runtime's time.

The sub-pixel decomposition (Shi et al. 2016; cuDNN and oneDNN compute the backward-data pass of a
strided convolution this way): along an axis of stride ``s`` and kernel ``k``, the output at
``u = q * s + r`` (``u`` counted before the padding is cropped) only ever meets taps ``r, r + s,
r + 2s, ...``, i.e. ``y[q*s + r] = sum_m x[q - m] * w[r + s*m]``. For each phase ``r`` that is a
correlation of the input with ``M = ceil(k / s)`` taps, so all ``s`` phases (``s * s`` in 2-D) are
one convolution with ``Cout * s * s`` output channels and an ``M x M`` kernel (taps past ``k`` are
zero), then the channels become the ``s x s`` blocks of the output (reshape, transpose) and the
padding is cropped off. Each output is the same sum of the same products, only reordered. All of it
is written channels last (NHWC data, HWIO weights, a phase's output channels one vector), between
two layout transposes that cancel against the ones around the model's other convolutions; the
convolution gets the default tiles (and Winograd's where it pays).

Rewritten: 1-D, 2-D and 3-D (volumetric U-Nets), constant weights, any stride, kernel, padding, output padding and groups;
dilated ones are left to TOPI.
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax

from explorer.passes.call_rewrite import rewrite_calls, static_ints

# transposed op -> (spatial dims, its data / kernel layouts, the stride-1 conv and its channels-last layouts)
_CONV_T = {
    "relax.nn.conv1d_transpose": (1, "NCW", "IOW", relax.op.nn.conv1d, "NWC", "WIO"),
    "relax.nn.conv2d_transpose": (2, "NCHW", "IOHW", relax.op.nn.conv2d, "NHWC", "HWIO"),
    "relax.nn.conv3d_transpose": (3, "NCDHW", "IODHW", relax.op.nn.conv3d, "NDHWC", "DHWIO"),
}


def _phase_weights(w: np.ndarray, strides: list[int], groups: int) -> np.ndarray:
    """Transposed-convolution weights ``[Cin, Cout/g, *k]`` as the channels-last stride-1
    convolution's ``[*taps, Cin/g, (g, *phases, Cout/g)]`` (HWIO / WIO) that computes every phase at
    once: its output channels are the phases, each a whole vector of output channels."""
    cin, cout_g = w.shape[:2]
    kernel = w.shape[2:]
    dims = len(kernel)
    taps = [math.ceil(k / s) for k, s in zip(kernel, strides)]
    # padded so that every phase has ``taps`` taps: W[..., r + s*m] for m < taps, zero past k
    padded = np.zeros((cin, cout_g) + tuple(t * s for t, s in zip(taps, strides)), w.dtype)
    padded[(slice(None), slice(None)) + tuple(slice(0, k) for k in kernel)] = w
    # split each spatial axis into (m, r): index r + s*m -> [.., m, r]
    split = padded.reshape((cin, cout_g) + tuple(x for t, s in zip(taps, strides) for x in (t, s)))
    m_axes = [2 + 2 * d for d in range(dims)]
    r_axes = [3 + 2 * d for d in range(dims)]
    # -> [Cin, Cout/g, *r, *m], the taps flipped (the correlation reads x[q - m] as tap M-1-m)
    phased = np.flip(split.transpose([0, 1] + r_axes + m_axes), axis=tuple(range(2 + dims, 2 + 2 * dims)))
    cin_g = cin // groups
    # -> [g, Cin/g, Cout/g, *r, *m] -> [*m, Cin/g, g, *r, Cout/g]
    grouped = phased.reshape((groups, cin_g, cout_g) + phased.shape[2:])
    order = [3 + dims + d for d in range(dims)] + [1, 0] + [3 + d for d in range(dims)] + [2]
    out = grouped.transpose(order)
    return np.ascontiguousarray(out.reshape(tuple(taps) + (cin_g, groups * math.prod(strides) * cout_g)))


def _as_pixel_shuffle(call: relax.Call, builder):
    spec = _CONV_T.get(getattr(call.op, "name", ""))
    if spec is None:
        return None
    dims, data_layout, kernel_layout, conv, conv_data_layout, conv_kernel_layout = spec
    data, weight = call.args
    a = call.attrs
    if (not isinstance(weight, tvm.ir.Constant) or a.data_layout != data_layout
            or a.kernel_layout != kernel_layout or a.out_layout not in ("", data_layout)):
        return None
    shape = static_ints(getattr(getattr(data, "ty", None), "shape", None) or [])
    out_shape = static_ints(getattr(call.ty, "shape", None) or [])
    w = weight.value.numpy()
    strides, padding = static_ints(a.strides), static_ints(a.padding)
    dilation, groups = static_ints(a.dilation), int(a.groups)
    if (shape is None or out_shape is None or len(shape) != dims + 2 or w.ndim != dims + 2
            or strides is None or padding is None or dilation != [1] * dims or len(padding) != 2 * dims
            or w.shape[0] % groups):
        return None
    n, _, *size = shape
    out_size = out_shape[2:]
    cout_g = w.shape[1]
    phase_weights = _phase_weights(w, strides, groups)
    taps = list(phase_weights.shape[:dims])  # ceil(k / s) per axis
    kernel = relax.const(phase_weights, str(w.dtype))
    # the stride-1 convolution's output length per axis: enough phases to cover the cropped output
    needed = [math.ceil((padding[d] + out_size[d]) / strides[d]) for d in range(dims)]
    right = [max(0, needed[d] - size[d]) for d in range(dims)]
    length = [size[d] + right[d] for d in range(dims)]
    # channels last from the start: the shuffle then moves whole vectors of output channels (a
    # shuffle in NCHW sat between two layout transposes, 16% of a vocoder's time)
    spatial = list(range(2, 2 + dims))
    x = relax.op.permute_dims(data, [0] + spatial + [1])
    y = conv(x, kernel, padding=[t - 1 for t in taps] + right, groups=groups, data_layout=conv_data_layout,
             kernel_layout=conv_kernel_layout, out_dtype=str(call.ty.dtype))
    # [n, *q, (g, *r, co)] -> [n, q0, r0, (q1, r1), (g), co]
    g = [groups] if groups > 1 else []
    y = relax.op.reshape(y, [n] + length + g + strides + [cout_g])
    order = [0] + [i for d in range(dims) for i in (1 + d, 1 + dims + len(g) + d)] + \
        ([1 + dims] if g else []) + [1 + 2 * dims + len(g)]
    if order != sorted(order):
        y = relax.op.permute_dims(y, order)
    full = [q * s for q, s in zip(length, strides)]
    y = relax.op.reshape(y, [n] + full + [cout_g * groups])
    if padding[:dims] != [0] * dims or full != out_size:
        y = relax.op.strided_slice(y, list(range(1, 1 + dims)), padding[:dims],
                                   [p + o for p, o in zip(padding[:dims], out_size)])
    return relax.op.permute_dims(y, [0, 1 + dims] + list(range(1, 1 + dims)))


@tvm.transform.module_pass(opt_level=0, name="TransposedConvAsPixelShuffle")
def TransposedConvAsPixelShuffle(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """Transposed convolutions as stride-1 convolutions over all phases, a pixel shuffle and a crop."""
    return rewrite_calls(mod, _as_pixel_shuffle)


__all__ = ["TransposedConvAsPixelShuffle"]
