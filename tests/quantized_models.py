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


__all__ = ["ort_quantize", "small_mlp"]
