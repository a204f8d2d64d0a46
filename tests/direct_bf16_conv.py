"""The direct bf16 NHWC convolution (:mod:`explorer.passes.bf16_conv_nhwc`) as the pass writes it,
built with its default schedule for a target, run on random inputs, and the float64 numpy
reference it is checked against: shared by the AMX convolution tests."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import te

from explorer.passes.bf16_conv_nhwc import (conv2d_nhwc_bf16, conv2d_nhwc_bf16_flat, flat_rows, nhwc_channels,
                                            pack_nhwc_weights)
from explorer.schedule.defaults import default_schedule
from explorer.target import parse_target


def conv_out_size(size: int, k: int, s: int, p: int) -> int:
    """Output size of a ``k``-wide window at stride ``s`` over ``size`` padded by ``p`` each side."""
    return (size + 2 * p - k) // s + 1


def pair(v) -> tuple[int, int]:
    """A kernel size or padding given as one int (square) or as ``(rows, columns)``."""
    return (v, v) if isinstance(v, int) else tuple(v)


def direct_conv_func(n, c, h, w, oc, k, s, p) -> tvm.tirx.PrimFunc:
    """The kernel the pass writes for this convolution (tiled across rows where :func:`flat_rows` says);
    ``k`` and ``p`` an int or ``(rows, columns)`` (a 1x7 kernel padded ``(0, 3)``)."""
    (kh, kw), (ph, pw) = pair(k), pair(p)
    x = te.placeholder((n, h, w, c), "float32", "x")
    wb = te.placeholder(pack_nhwc_weights(np.zeros((oc, c, kh, kw), np.float32), nhwc_channels(c, kw)).shape,
                        "uint16", "w")
    out_hw = (conv_out_size(h, kh, s, ph), conv_out_size(w, kw, s, pw))
    if flat_rows((kh, kw), (s, s), out_hw[1], nhwc_channels(c, kw)):
        y = conv2d_nhwc_bf16_flat(x, wb, padding=(ph, pw), out_hw=out_hw)
    else:
        y = conv2d_nhwc_bf16(x, wb, strides=(s, s), padding=(ph, pw), out_hw=out_hw)
    return te.create_prim_func([x, wb, y])


def built_direct_conv(spec: str, shape):
    """The kernel of ``shape`` (n, c, h, w, oc, kernel, stride, pad) under its default schedule for
    the target ``spec``, compiled; and the schedule's choice."""
    target = parse_target(spec)
    func, choice = default_schedule(direct_conv_func(*shape), target.cpu_spec())
    return tvm.compile(tvm.IRModule({"main": func}), target=target.tvm()), choice


def run_direct_conv(lib, shape, seed: int = 0):
    """The built kernel run on random NHWC inputs and OIHW weights: its output (padding channels cut
    off), the input and the weights."""
    n, c, h, w, oc, k, s, p = shape
    (kh, kw), (ph, pw) = pair(k), pair(p)
    rng = np.random.default_rng(seed)
    x, wt = rng.standard_normal((n, h, w, c)).astype("float32"), rng.standard_normal((oc, c, kh, kw)).astype("float32")
    out_shape = (n, conv_out_size(h, kh, s, ph), conv_out_size(w, kw, s, pw), -(-oc // 16) * 16)
    out = tvm.runtime.tensor(np.zeros(out_shape, "float32"))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(pack_nhwc_weights(wt, nhwc_channels(c, kw))), out)
    return out.numpy()[..., :oc], x, wt


def reference_conv_nhwc(x, w, s, p):
    """NHWC x OIHW in float64 (numpy: the reference), NHWC out; ``p`` an int or ``(rows, columns)``."""
    (kh, kw), (ph, pw) = w.shape[2:], pair(p)
    xp = np.pad(x.astype(np.float64), ((0, 0), (ph, ph), (pw, pw), (0, 0)))
    oh, ow = conv_out_size(x.shape[1], kh, s, ph), conv_out_size(x.shape[2], kw, s, pw)
    return sum(np.einsum("nhwc,oc->nhwo", xp[:, i:i + s * oh:s, j:j + s * ow:s], w[:, :, i, j])
               for i in range(kh) for j in range(kw))
