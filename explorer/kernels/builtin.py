"""Built-in operator workloads, written with TE and turned into TensorIR PrimFuncs.

Each builder takes named integer parameters (shapes) and a dtype and returns the PrimFunc plus a
numpy reference, so a hand schedule can be verified without trusting TVM. Default shapes are
ResNet and BERT layer shapes; every parameter can be overridden (``matmul:M=1024,N=1024,K=1024``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import te, topi


@dataclass(frozen=True)
class BuiltinKernel:
    """One built-in operator: its defaults, and how to build it and compute it with numpy."""

    name: str
    title: str
    defaults: dict
    dtype: str
    build: Callable[..., list]  # (**params, dtype) -> list of te tensors: inputs then outputs
    reference: Callable[..., list]  # (inputs as numpy arrays, **params) -> outputs
    summary: str = ""


def _matmul(M: int, N: int, K: int, dtype: str):
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


def _batch_matmul(Bt: int, M: int, N: int, K: int, dtype: str):
    A = te.placeholder((Bt, M, K), dtype, name="A")
    B = te.placeholder((Bt, K, N), dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((Bt, M, N), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k), name="C")
    return [A, B, C]


def _dense_bias_relu(M: int, N: int, K: int, dtype: str):
    X = te.placeholder((M, K), dtype, name="X")
    W = te.placeholder((N, K), dtype, name="W")
    bias = te.placeholder((N,), dtype, name="bias")
    k = te.reduce_axis((0, K), name="k")
    D = te.compute((M, N), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), name="dense")
    Y = te.compute((M, N), lambda i, j: te.max(D[i, j] + bias[j], tvm.tirx.const(0, dtype)), name="Y")
    return [X, W, bias, Y]


def _conv2d_nchw(N: int, C: int, H: int, W: int, K: int, R: int, S: int, stride: int, pad: int, dtype: str):
    data = te.placeholder((N, C, H, W), dtype, name="data")
    kernel = te.placeholder((K, C, R, S), dtype, name="kernel")
    out = topi.nn.conv2d_nchw(data, kernel, stride, pad, 1, out_dtype=dtype)
    return [data, kernel, out]


def _conv2d_nhwc(N: int, C: int, H: int, W: int, K: int, R: int, S: int, stride: int, pad: int, dtype: str):
    data = te.placeholder((N, H, W, C), dtype, name="data")
    kernel = te.placeholder((R, S, C, K), dtype, name="kernel")
    out = topi.nn.conv2d_nhwc(data, kernel, stride, pad, 1, out_dtype=dtype)
    return [data, kernel, out]


def _depthwise(N: int, C: int, H: int, W: int, R: int, S: int, stride: int, pad: int, dtype: str):
    data = te.placeholder((N, C, H, W), dtype, name="data")
    kernel = te.placeholder((C, 1, R, S), dtype, name="kernel")
    out = topi.nn.depthwise_conv2d_nchw(data, kernel, stride, pad, 1, out_dtype=dtype)
    return [data, kernel, out]


def _softmax(M: int, N: int, dtype: str):
    x = te.placeholder((M, N), dtype, name="x")
    return [x, topi.nn.softmax(x, axis=-1)]


def _layer_norm(M: int, N: int, dtype: str):
    x = te.placeholder((M, N), dtype, name="x")
    gamma = te.placeholder((N,), dtype, name="gamma")
    beta = te.placeholder((N,), dtype, name="beta")
    return [x, gamma, beta, topi.nn.layer_norm(x, gamma, beta, axis=[1], epsilon=1e-5)]


def _matmul_int8(M: int, N: int, K: int, dtype: str):
    """uint8 x int8 -> int32 with B pre-packed as [N/16, K/4, 16, 4]: the layout of the x86
    VNNI/AVX-512 ``dot_16x4`` intrinsics, so the inner 16x4 block can be tensorized."""
    A = te.placeholder((M, K), "uint8", name="A")
    B = te.placeholder((N // 16, K // 4, 16, 4), "int8", name="B_packed")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute(
        (M, N),
        lambda i, j: te.sum(A[i, k].astype("int32") * B[j // 16, k // 4, j % 16, k % 4].astype("int32"), axis=k),
        name="C")
    return [A, B, C]


# -- numpy references ----------------------------------------------------------------------

def _ref_conv2d_nchw(data, kernel, *, stride: int, pad: int, **_):
    x = np.pad(data, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, w = x.shape
    k, _, r, s = kernel.shape
    oh, ow = (h - r) // stride + 1, (w - s) // stride + 1
    win = np.lib.stride_tricks.sliding_window_view(x, (r, s), axis=(2, 3))[:, :, ::stride, ::stride][:, :, :oh, :ow]
    return np.einsum("nchwrs,kcrs->nkhw", win, kernel, optimize=True).astype(data.dtype)


def _ref_conv2d_nhwc(data, kernel, *, stride: int, pad: int, **_):
    out = _ref_conv2d_nchw(data.transpose(0, 3, 1, 2), kernel.transpose(3, 2, 0, 1), stride=stride, pad=pad)
    return out.transpose(0, 2, 3, 1)


def _ref_depthwise(data, kernel, *, stride: int, pad: int, **_):
    x = np.pad(data, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    r, s = kernel.shape[2:]
    oh, ow = (x.shape[2] - r) // stride + 1, (x.shape[3] - s) // stride + 1
    win = np.lib.stride_tricks.sliding_window_view(x, (r, s), axis=(2, 3))[:, :, ::stride, ::stride][:, :, :oh, :ow]
    return np.einsum("nchwrs,crs->nchw", win, kernel[:, 0], optimize=True).astype(data.dtype)


def _ref_softmax(x, **_):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _ref_layer_norm(x, gamma, beta, **_):
    mu = x.mean(axis=1, keepdims=True)
    var = x.var(axis=1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * gamma + beta


def _ref_int8(a, b_packed, **_):
    n16, k4 = b_packed.shape[:2]
    b = b_packed.transpose(0, 2, 1, 3).reshape(n16 * 16, k4 * 4)  # [N, K]
    return a.astype(np.int32) @ b.astype(np.int32).T


BUILTINS: dict[str, BuiltinKernel] = {k.name: k for k in [
    BuiltinKernel("matmul", "Matmul", {"M": 512, "N": 512, "K": 512}, "float32", _matmul,
                  lambda a, b, **_: [a @ b], "C = A @ B"),
    BuiltinKernel("batch_matmul", "Batch matmul", {"Bt": 12, "M": 128, "N": 128, "K": 64}, "float32",
                  _batch_matmul, lambda a, b, **_: [a @ b], "attention scores: 12 heads x (128x64 @ 64x128)"),
    BuiltinKernel("dense_bias_relu", "Dense + bias + ReLU", {"M": 128, "N": 3072, "K": 768}, "float32",
                  _dense_bias_relu, lambda x, w, b, **_: [np.maximum(x @ w.T + b, 0)], "BERT FFN up-projection"),
    BuiltinKernel("conv2d_nchw", "Conv2d NCHW", {"N": 1, "C": 64, "H": 56, "W": 56, "K": 64, "R": 3, "S": 3,
                                                 "stride": 1, "pad": 1}, "float32", _conv2d_nchw,
                  lambda d, k, **p: [_ref_conv2d_nchw(d, k, **p)], "ResNet-18 layer1 3x3 conv"),
    BuiltinKernel("conv2d_nhwc", "Conv2d NHWC", {"N": 1, "C": 64, "H": 56, "W": 56, "K": 64, "R": 3, "S": 3,
                                                 "stride": 1, "pad": 1}, "float32", _conv2d_nhwc,
                  lambda d, k, **p: [_ref_conv2d_nhwc(d, k, **p)], "ResNet-18 layer1 3x3 conv, channels last"),
    BuiltinKernel("depthwise_conv2d", "Depthwise conv2d", {"N": 1, "C": 144, "H": 56, "W": 56, "R": 3, "S": 3,
                                                           "stride": 1, "pad": 1}, "float32", _depthwise,
                  lambda d, k, **p: [_ref_depthwise(d, k, **p)], "MobileNetV2 block 3x3 depthwise"),
    BuiltinKernel("softmax", "Softmax", {"M": 1536, "N": 128}, "float32", _softmax,
                  lambda x, **_: [_ref_softmax(x)], "attention softmax rows"),
    BuiltinKernel("layer_norm", "Layer norm", {"M": 128, "N": 768}, "float32", _layer_norm,
                  lambda x, g, b, **_: [_ref_layer_norm(x, g, b)], "BERT layer norm"),
    BuiltinKernel("matmul_int8", "Int8 matmul (VNNI layout)", {"M": 128, "N": 128, "K": 128}, "uint8",
                  _matmul_int8, lambda a, b, **_: [_ref_int8(a, b)],
                  "uint8 x int8 -> int32, B packed for the x86 dot_16x4 intrinsics"),
]}
