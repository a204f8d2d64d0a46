"""``TransposedConvAsPixelShuffle``: a transposed convolution whose kernel equals its stride is a
1x1 convolution followed by a pixel shuffle.

Upsampling heads (text detectors, segmentation decoders, U-Nets) use ``ConvTranspose`` with kernel
2 and stride 2: every output pixel receives exactly one input pixel times one kernel tap. TOPI
computes a transposed convolution as a convolution over the input with zeros inserted between its
pixels, so 3/4 of its multiply-adds are by zero, and it stays in NCHW (TVM's layout conversion
leaves it unlowered): a DBNet head's last one ran at 2% of the peak, 36% of the model. Written as
``conv2d(x, W', 1x1)`` with ``Cout * k * k`` output channels, then reshape/transpose into the
``k x k`` blocks, it computes the same numbers (each output is the same single product sum), the
convolution converts to NHWC and gets the default tiles. Only ``groups == 1``, no padding, no
output padding and no dilation are rewritten.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from explorer.passes.call_rewrite import rewrite_calls, static_ints

_CONV2D_T = tvm.ir.Op.get("relax.nn.conv2d_transpose")


def _as_pixel_shuffle(call: relax.Call, builder):
    if not call.op.same_as(_CONV2D_T):
        return None
    data, weight = call.args
    a = call.attrs
    if (not isinstance(weight, tvm.ir.Constant) or a.data_layout != "NCHW" or a.kernel_layout != "IOHW"
            or int(a.groups) != 1):
        return None
    shape = static_ints(getattr(getattr(data, "ty", None), "shape", None) or [])
    w = weight.value.numpy()  # [Cin, Cout, kh, kw]
    strides, padding = static_ints(a.strides), static_ints(a.padding)
    output_padding, dilation = static_ints(a.output_padding), static_ints(a.dilation)
    if (shape is None or len(shape) != 4 or w.ndim != 4 or strides != [w.shape[2], w.shape[3]]
            or any(padding) or any(output_padding) or dilation != [1, 1]):
        return None
    cin, cout, kh, kw = w.shape
    n, _, h, wd = shape
    # W'[(co, i, j), ci, 0, 0] = W[ci, co, i, j]
    w1 = np.ascontiguousarray(w.transpose(1, 2, 3, 0).reshape(cout * kh * kw, cin, 1, 1))
    dtype = str(call.ty.dtype)
    y = relax.op.nn.conv2d(data, relax.const(w1, str(w.dtype)), data_layout="NCHW", kernel_layout="OIHW",
                           out_dtype=dtype)
    y = relax.op.reshape(y, (n, cout, kh, kw, h, wd))
    y = relax.op.permute_dims(y, [0, 1, 4, 2, 5, 3])  # n, co, h, i, w, j
    return relax.op.reshape(y, (n, cout, h * kh, wd * kw))


@tvm.transform.module_pass(opt_level=0, name="TransposedConvAsPixelShuffle")
def TransposedConvAsPixelShuffle(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """Transposed convolutions with kernel == stride as 1x1 convolutions and a pixel shuffle."""
    return rewrite_calls(mod, _as_pixel_shuffle)


__all__ = ["TransposedConvAsPixelShuffle"]
