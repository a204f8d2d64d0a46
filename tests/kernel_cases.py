"""Kernels and models written by hand the way schedx's passes and rules write them: a matmul
tensorized with the fp32 micro-kernel, the int8 convolution kernel the QDQ pass writes (with numpy
inputs and its exact reference), a MatMul model whose weight the export packs. Shared by the test
files of each feature and the ISA decision tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tvm import s_tir, te

from explorer.passes.qdq_int8 import conv2d_nhwc_int8
from explorer.schedule import microkernel


def tensorized_matmul(kernel, mk: microkernel.MicroKernel):
    """``kernel`` (a matmul) tiled to the micro-kernel's shape by hand and tensorized."""
    sch = s_tir.Schedule(kernel.func)
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    io, ii = sch.split(i, [None, mk.mr])
    jo, ji = sch.split(j, [None, mk.nr])
    ko, ki = sch.split(k, [None, mk.kr])
    sch.reorder(io, jo, ko, ii, ji, ki)
    sch.parallel(io)
    sch.decompose_reduction(block, ko)
    sch.tensorize(ii, microkernel.register(mk))
    return sch


def int8_conv_kernel(size: int, weight_max: int, stride: int = 1):
    """A conv2d_nhwc_int8 kernel as the pass writes it (3x3, 64 -> 64 channels, a ``size`` x
    ``size`` output), numpy inputs and the exact reference."""
    side = (size - 1) * stride + 3
    x = te.placeholder((1, side, side, 64), "uint8", name="X")
    w = te.placeholder((4, 3, 3, 16, 16, 4), "int8", name="W")
    func = te.create_prim_func([x, w, conv2d_nhwc_int8(x, w, stride, stride, size, size, weight_max)])
    rng = np.random.default_rng(0)
    xs = rng.integers(0, 256, (1, side, side, 64)).astype("uint8")
    ws = rng.integers(-weight_max, weight_max + 1, (4, 3, 3, 16, 16, 4)).astype("int8")
    plain = ws.transpose(0, 4, 1, 2, 3, 5).reshape(64, 3, 3, 64).astype(np.int64)
    end = (size - 1) * stride + 1
    ref = sum(np.einsum("nhwc,oc->nhwo", xs[:, a:a + end:stride, b:b + end:stride].astype(np.int64), plain[:, a, b])
              for a in range(3) for b in range(3))
    return func, [xs, ws, np.zeros((1, size, size, 64), "int32")], ref


def matmul_model(path):
    """One MatMul by a 256x1024 initializer ``W`` (rows 4 KB apart, 1 MB): its kernel packs ``W``."""
    weight = np.random.default_rng(0).standard_normal((256, 1024)).astype("float32")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 1024])],
                              [numpy_helper.from_array(weight, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return model, weight


__all__ = ["int8_conv_kernel", "matmul_model", "tensorized_matmul"]
