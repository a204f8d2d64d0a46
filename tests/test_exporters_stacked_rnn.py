"""Stacked recurrent layers of different sizes, as tf2onnx writes a Keras ``LSTM -> LSTM`` (or
``Bidirectional(LSTM)`` twice): each layer becomes its own recurrence kernel, and a second kernel
of another size needs a symbol of its own (before: "IRModule contains duplicate global symbol:
lstm_sequence" from the task pipeline, tf_text_bilstm)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from explorer.models import import_onnx
from explorer.workload.fusion import fused_module
from tests.onnx_cases import ort_run, random_feeds, tvm_run


def _stacked(op: str, sizes: tuple[int, ...], *, seq: int = 4, features: int = 3) -> onnx.ModelProto:
    """``len(sizes)`` layers of ``op`` one after the other, each ``Squeeze``d of its direction axis
    as tf2onnx does, hidden sizes ``sizes``."""
    rng = np.random.default_rng(0)
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    nodes, inits, x, width = [], [numpy_helper.from_array(np.array([1], "int64"), "axis1")], "x", features
    for i, hidden in enumerate(sizes):
        w = numpy_helper.from_array(rng.normal(0, 0.4, (1, gates * hidden, width)).astype("float32"), f"W{i}")
        r = numpy_helper.from_array(rng.normal(0, 0.4, (1, gates * hidden, hidden)).astype("float32"), f"R{i}")
        inits += [w, r]
        nodes += [helper.make_node(op, [x, w.name, r.name], [f"y{i}"], hidden_size=hidden, name=f"{op.lower()}_{i}"),
                  helper.make_node("Squeeze", [f"y{i}", "axis1"], [f"s{i}"], name=f"squeeze_{i}")]
        x, width = f"s{i}", hidden
    graph = helper.make_graph(nodes, "stacked",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, 1, features])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [seq, 1, sizes[-1]])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="tf2onnx")


def test_stacked_layers_of_different_sizes_build_and_match_onnx_runtime():
    model = _stacked("LSTM", (5, 6, 5))  # GRU and RNN layers take the same path (custom_ops)
    loaded = import_onnx(model)
    symbols = [str(f.attrs["global_symbol"]) for f in loaded.mod.functions.values() if "global_symbol" in f.attrs]
    assert len(symbols) == len(set(symbols)) == 3  # two kernels (5 and 6 wide, the 5 shared) and main
    fused_module(loaded.mod, "stacked")  # the task pipeline took it
    feeds = random_feeds(model)
    np.testing.assert_allclose(tvm_run(loaded, feeds)[0], ort_run(model, feeds)[0], rtol=1e-5, atol=1e-5)
