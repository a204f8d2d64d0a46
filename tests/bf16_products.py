"""The bf16 weight products as :mod:`explorer.passes.bf16_dense` and :mod:`explorer.passes.bf16_conv`
write them (a dense kernel, an implicit-GEMM NCHW convolution), run on random inputs, and checked
against float64 numpy: shared by the bf16 kernel tests."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import te

from explorer.passes.bf16_conv import conv2d_bf16, pack_conv_weights
from explorer.passes.bf16_dense import bf16_round, dense_bf16, pack_weights
from explorer.precision import BF16_TOLERANCE
from tests.direct_bf16_conv import conv_out_size

# n, c, h, w, oc, kernel, stride, pad: rows of pixels in whole panels (28, 14 wide), across rows
# (10, 5 wide), odd input channels, output channels not a multiple of 16, a batch of 2
CONV_SHAPES = [(1, 8, 28, 28, 32, 3, 1, 1), (1, 3, 20, 20, 32, 7, 2, 3), (2, 6, 14, 14, 24, 1, 1, 0),
               (1, 16, 10, 10, 16, 3, 2, 1)]


def dense_bf16_func(m: int, n: int, k: int) -> tvm.tirx.PrimFunc:
    """The dense_bf16 kernel of an m x k by k x n product, its weights packed in panels of 16."""
    x = te.placeholder((m, k), "float32", "x")
    w = te.placeholder((-(-n // 16), k // 2, 16, 2), "uint16", "w")
    return te.create_prim_func([x, w, dense_bf16(x, w)])


def run_dense_bf16(lib, m: int, n: int, k: int, seed: int = 0):
    """The built kernel run on random inputs and weights: its output, the input and the weights."""
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal((m, k)).astype("float32"), rng.standard_normal((k, n)).astype("float32")
    out = tvm.runtime.tensor(np.zeros((m, -(-n // 16) * 16), "float32"))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(pack_weights(w)), out)
    return out.numpy()[:, :n], x, w


def check_dense_bf16(got, x, w):
    """``got`` is the bf16 product of ``x`` and ``w`` summed in fp32, and within the bf16 tolerance of fp32."""
    exact = bf16_round(x).astype(np.float64) @ bf16_round(w).astype(np.float64)
    assert np.abs(got - exact).max() <= 1e-5 * np.abs(exact).max()  # bf16 products, fp32 sums
    ref = x @ w
    assert np.abs(got - ref).max() <= 1e-2 * np.abs(ref).max()  # the bf16 tolerance against fp32


def conv_bf16_func(n, c, h, w, oc, k, s, p) -> tvm.tirx.PrimFunc:
    """The implicit-GEMM bf16 kernel the pass writes for this NCHW convolution."""
    x = te.placeholder((n, c, h, w), "float32", "x")
    wb = te.placeholder(pack_conv_weights(np.zeros((oc, c, k, k), np.float32)).shape, "uint16", "w")
    y = conv2d_bf16(x, wb, kernel=(k, k), out_shape=(n, oc, conv_out_size(h, k, s, p), conv_out_size(w, k, s, p)),
                    strides=(s, s), padding=(p, p))
    return te.create_prim_func([x, wb, y])


def run_conv_bf16(lib, shape, seed: int = 0):
    """The built kernel run on random inputs and weights: its output, the input and the weights."""
    n, c, h, w, oc, k, s, p = shape
    rng = np.random.default_rng(seed)
    x, wt = rng.standard_normal((n, c, h, w)).astype("float32"), rng.standard_normal((oc, c, k, k)).astype("float32")
    out = tvm.runtime.tensor(np.zeros((n, oc, conv_out_size(h, k, s, p), conv_out_size(w, k, s, p)), "float32"))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(pack_conv_weights(wt)), out)
    return out.numpy(), x, wt


def reference_conv_nchw(x, w, s, p):
    """NCHW x OIHW in float64 (numpy: the reference)."""
    k = w.shape[2]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)))
    oh, ow = conv_out_size(x.shape[2], k, s, p), conv_out_size(x.shape[3], k, s, p)
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(k):
        for j in range(k):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + s * oh:s, j:j + s * ow:s], w[:, :, i, j])
    return out


def check_conv_bf16(got, x, w, shape):
    """``got`` is the bf16 product of ``x`` and ``w`` summed in fp32, and within the bf16 tolerance of fp32."""
    s, p = shape[6], shape[7]
    exact = reference_conv_nchw(bf16_round(x), bf16_round(w), s, p)
    assert np.abs(got - exact).max() <= 1e-5 * np.abs(exact).max()  # bf16 products, fp32 sums
    ref = reference_conv_nchw(x, w, s, p)
    assert np.abs(got - ref).max() <= BF16_TOLERANCE * np.abs(ref).max()  # the bf16 tolerance against fp32


__all__ = ["CONV_SHAPES", "check_conv_bf16", "check_dense_bf16", "conv_bf16_func", "dense_bf16_func",
           "reference_conv_nchw", "run_conv_bf16", "run_dense_bf16"]
