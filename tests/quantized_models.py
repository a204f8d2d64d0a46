"""Small models quantized the way users' int8 files are made (ONNX Runtime's ``quantize_static``),
shared by the int8 tests (random inputs: ``tests.onnx_cases.random_feeds``)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from explorer.models.quantize import needs_reduced_range


def small_mlp() -> onnx.ModelProto:
    """x[2,16] -> MatMul -> Add -> Relu -> MatMul: the MatMul side of the quantizer."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (16, 32)).astype("float32"), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.1, 32).astype("float32"), "b1"),
             numpy_helper.from_array(rng.normal(0, 0.3, (32, 8)).astype("float32"), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def amx_int8_cnn(stem: int = 3, stride: int = 1, side: int = 16) -> onnx.ModelProto:
    """A ``stem x stem`` stem 3 -> 64 on a ``side x side`` image (3x3: vpdpbusd, 27 products a sum;
    7x7 stride 2: AMX tiles, a kernel row a tdpbusd), then 3x3 64 -> 64 and a strided 3x3 64 -> 64
    (AMX tiles: 16 and 8 rows), each with ReLU."""
    rng = np.random.default_rng(0)

    def weight(name, o, i, k):
        return numpy_helper.from_array(rng.normal(0, (2 / (i * k * k)) ** 0.5, (o, i, k, k)).astype("float32"), name)

    inits = [weight("w1", 64, 3, stem), weight("w2", 64, 64, 3), weight("w3", 64, 64, 3)]
    inits += [numpy_helper.from_array(rng.normal(0, 0.1, 64).astype("float32"), f"b{k}") for k in (1, 2, 3)]
    half = stem // 2
    nodes = [helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], pads=[half] * 4, strides=[stride] * 2),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c3"], ["out"])]
    graph = helper.make_graph(nodes, "amx_int8_cnn",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, side, side])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 64, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def ort_quantize(model: onnx.ModelProto, tmp_path, *, fmt: str = "QDQ", per_channel: bool = True) -> onnx.ModelProto:
    """``model`` quantized by ONNX Runtime's own quantize_static on 8 random inputs."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        quantize_static,
    )

    name = model.graph.input[0].name
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(0)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.samples = iter([{name: rng.standard_normal(shape).astype("float32")} for _ in range(8)])

        def get_next(self):
            return next(self.samples, None)

    src, dst = tmp_path / "float.onnx", tmp_path / f"{fmt}.onnx"
    onnx.save(model, src)
    # 7-bit weights where int8 kernels that add products in pairs saturate (x86 without AVX-512 VNNI), as
    # schedx quantize does: the reference must be exact for a one-step tolerance to mean anything
    quantize_static(str(src), str(dst), Reader(), quant_format=getattr(QuantFormat, fmt), per_channel=per_channel,
                    reduce_range=needs_reduced_range("uint8"))
    return onnx.load(dst)


__all__ = ["amx_int8_cnn", "ort_quantize", "small_mlp"]
