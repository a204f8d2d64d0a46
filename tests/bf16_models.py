"""Small models whose products a bf16 build rewrites: an MLP as ONNX (two weight products; the
``mlp_path`` fixture saves it) and a BERT layer's attention as Relax (three projections and two
products of activations): shared by the bf16 build, variant, search and size-rule tests."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

SEQ, HIDDEN, HEADS = 32, 64, 2
DIM = HIDDEN // HEADS


def attention_relax(scale: float = DIM ** -0.5, seq: int = SEQ, hidden: int = HIDDEN) -> tvm.IRModule:
    """x @ Wq, x @ Wk, x @ Wv (+ biases), heads split, softmax(Q K^T * scale) V: a BERT layer's attention."""
    rng = np.random.default_rng(0)
    const = lambda *shape: relax.const(rng.standard_normal(shape).astype("float32"))  # noqa: E731
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, seq, hidden), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            heads = []
            for perm in ([0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3]):
                y = bb.emit(relax.op.add(relax.op.matmul(x, const(hidden, hidden)), const(hidden)))
                y = bb.emit(relax.op.reshape(y, [1, seq, HEADS, hidden // HEADS]))
                heads.append(bb.emit(relax.op.permute_dims(y, perm)))
            q, k, v = heads
            scores = bb.emit(relax.op.multiply(relax.op.matmul(q, k), relax.const(scale, "float32")))
            probs = bb.emit(relax.op.nn.softmax(scores, axis=-1))
            out = bb.emit_output(relax.op.matmul(probs, v))
        bb.emit_func_output(out)
    return bb.get()


def bf16_mlp(batch: int = 2, seq: int = 16, k: int = 64, hidden: int = 96) -> onnx.ModelProto:
    """x[batch,seq,k] -> MatMul (hidden) -> Add -> Relu -> Reshape -> Gemm(transB, 40 outputs) -> Softmax."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (k, hidden)).astype("float32"), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.1, hidden).astype("float32"), "b1"),
             numpy_helper.from_array(rng.normal(0, 0.3, (40, hidden)).astype("float32"), "w2"),
             numpy_helper.from_array(rng.normal(0, 0.1, 40).astype("float32"), "b2"),
             numpy_helper.from_array(np.array([-1, hidden], np.int64), "shape")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["r2"]),
             helper.make_node("Gemm", ["r2", "w2", "b2"], ["y"], transB=1), helper.make_node("Softmax", ["y"], ["p"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch * seq, 40]),
                               helper.make_tensor_value_info("p", TensorProto.FLOAT, [batch * seq, 40])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture
def mlp_path(tmp_path):
    """:func:`bf16_mlp` saved as an ONNX file: its path."""
    path = tmp_path / "mlp.onnx"
    onnx.save(bf16_mlp(), path)
    return str(path)


__all__ = ["DIM", "HEADS", "HIDDEN", "SEQ", "attention_relax", "bf16_mlp", "mlp_path"]
