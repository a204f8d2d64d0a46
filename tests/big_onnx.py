"""Large ONNX models made in code, with a name on every node, for graph views and benchmarks.

``residual_chain(blocks)`` is ``blocks`` residual blocks on a 1x8x8x8 tensor: Conv
(``block{i}.conv``), Relu (``block{i}.relu``), Mul by a constant (``block{i}.scale``), Add of the
block's input (``block{i}.add``): four Relax nodes per block, so 250 blocks make a graph of 1000
operators plus input and output, and tiny shapes keep every pass quick.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def residual_chain(blocks: int, channels: int = 8, size: int = 8, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    x = "input"
    for i in range(blocks):
        w, s = f"block{i}.conv.weight", f"block{i}.scale.value"
        inits.append(numpy_helper.from_array(rng.normal(0, 0.1, (channels, channels, 3, 3)).astype("float32"), w))
        inits.append(numpy_helper.from_array(np.full((1, channels, 1, 1), 0.5, "float32"), s))
        nodes += [
            helper.make_node("Conv", [x, w], [f"b{i}_c"], pads=[1, 1, 1, 1], name=f"block{i}.conv"),
            helper.make_node("Relu", [f"b{i}_c"], [f"b{i}_r"], name=f"block{i}.relu"),
            helper.make_node("Mul", [f"b{i}_r", s], [f"b{i}_m"], name=f"block{i}.scale"),
            helper.make_node("Add", [f"b{i}_m", x], [f"b{i}_out"], name=f"block{i}.add"),
        ]
        x = f"b{i}_out"
    nodes.append(helper.make_node("Identity", [x], ["output"], name="final"))
    shape = [1, channels, size, size]
    graph = helper.make_graph(nodes, f"residual_chain_{blocks}",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def save_residual_chain(path, blocks: int) -> str:
    onnx.save(residual_chain(blocks), str(path))
    return str(path)
