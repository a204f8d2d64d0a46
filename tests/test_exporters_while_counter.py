"""tf2onnx's ``tf.while_loop``: a ``Loop`` with no trip count whose condition each turn is a counter
against a bound (a constant, or the time length read with ``Shape`` from a loop-carried input).
Its trip count is found by running the condition (:mod:`explorer.models.while_count`), then it is
unrolled like a counted loop and matches ONNX Runtime; a loop whose condition reads the data stays
refused, naming the node, the exporter and what to do (the tf_while_rnn files of the exporter set)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from explorer.models import import_onnx
from explorer.models.while_count import count_while_loops
from tests.onnx_cases import ort_run, tvm_run

STEPS, FEATURES, HIDDEN = 6, 3, 4


def _while_rnn(*, early_exit: bool = False, steps: int | str = STEPS) -> onnx.ModelProto:
    """``h = tanh(x[:, t] W + h U)`` for ``t`` while ``t < x.shape[1]`` (``early_exit``: also while
    ``sum(h) < 0.5``, a condition on the data), as tf2onnx writes it: no trip count, the counter and
    the input carried through the loop, the bound read with Shape inside the body."""
    rng = np.random.default_rng(0)
    f32 = TensorProto.FLOAT
    consts = [numpy_helper.from_array(rng.normal(0, 0.5, (FEATURES, HIDDEN)).astype("float32"), "W"),
              numpy_helper.from_array(rng.normal(0, 0.5, (HIDDEN, HIDDEN)).astype("float32"), "U"),
              numpy_helper.from_array(np.array(1, np.int64), "one"),
              numpy_helper.from_array(np.array(1, np.int64), "time_axis"),
              numpy_helper.from_array(np.array(0.5, np.float32), "limit")]
    body_nodes = [
        helper.make_node("Add", ["t", "one"], ["t_next"]),
        helper.make_node("Gather", ["x_in", "t"], ["x_t"], axis=1),
        helper.make_node("MatMul", ["x_t", "W"], ["xw"]),
        helper.make_node("MatMul", ["h", "U"], ["hu"]),
        helper.make_node("Add", ["xw", "hu"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["h_next"]),
        helper.make_node("Shape", ["x_in"], ["x_shape"]),
        helper.make_node("Gather", ["x_shape", "time_axis"], ["bound"]),
        helper.make_node("Less", ["t_next", "bound"], ["more" if early_exit else "go_on"]),
        helper.make_node("Identity", ["x_in"], ["x_out"]),
    ]
    if early_exit:
        body_nodes += [helper.make_node("ReduceSum", ["h_next"], ["total"], keepdims=0),
                       helper.make_node("Less", ["total", "limit"], ["small"]),
                       helper.make_node("And", ["more", "small"], ["go_on"])]
    body = helper.make_graph(
        body_nodes, "while_body",
        [helper.make_tensor_value_info("iter", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("t", TensorProto.INT64, []),
         helper.make_tensor_value_info("h", f32, [1, HIDDEN]),
         helper.make_tensor_value_info("x_in", f32, [1, steps, FEATURES])],
        [helper.make_tensor_value_info("go_on", TensorProto.BOOL, []),
         helper.make_tensor_value_info("t_next", TensorProto.INT64, []),
         helper.make_tensor_value_info("h_next", f32, [1, HIDDEN]),
         helper.make_tensor_value_info("x_out", f32, [1, steps, FEATURES])])
    main = [helper.make_node("Shape", ["input"], ["in_shape"]),
            helper.make_node("Gather", ["in_shape", "time_axis"], ["steps"]),
            helper.make_node("Less", ["zero", "steps"], ["first"]),
            helper.make_node("Loop", ["", "first", "zero", "h0", "input"], ["t_end", "h_end", "x_end"],
                             body=body, name="while_loop"),
            helper.make_node("Relu", ["h_end"], ["out"])]
    graph = helper.make_graph(main, "while_rnn", [helper.make_tensor_value_info("input", f32, [1, steps, FEATURES])],
                              [helper.make_tensor_value_info("out", f32, [1, HIDDEN])],
                              consts + [numpy_helper.from_array(np.array(0, np.int64), "zero"),
                                        numpy_helper.from_array(np.zeros((1, HIDDEN), np.float32), "h0")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="tf2onnx",
                             producer_version="1.17.0")


def _feeds() -> dict[str, np.ndarray]:
    return {"input": np.random.default_rng(1).standard_normal((1, STEPS, FEATURES)).astype("float32")}


def test_the_trip_count_is_found_and_the_loop_means_the_same():
    model = _while_rnn()
    counted, notes = count_while_loops(model)
    assert notes == [f"Loop 'while_loop': a while loop whose condition is a counter; it runs {STEPS} turns, "
                     "now its trip count"]
    np.testing.assert_array_equal(ort_run(counted, _feeds())[0], ort_run(model, _feeds())[0])


@pytest.mark.parametrize("steps", [STEPS, "time"])  # a fixed length, and one --shapes fixes
def test_a_counted_while_loop_imports_and_matches_onnx_runtime(steps):
    model = _while_rnn(steps=steps)
    loaded = import_onnx(model, None if steps == STEPS else f"input:1x{STEPS}x{FEATURES}")
    assert any("a while loop whose condition is a counter" in n for n in loaded.info.notes)
    np.testing.assert_allclose(tvm_run(loaded, _feeds())[0], ort_run(_while_rnn(), _feeds())[0], rtol=1e-5,
                               atol=1e-6)


def test_a_while_loop_on_the_data_is_kept_as_a_loop_and_matches_onnx_runtime():
    model = _while_rnn(early_exit=True)
    assert count_while_loops(model) == (model, [])
    loaded = import_onnx(model)
    assert any("Loop 'while_loop' kept as a loop" in n for n in loaded.info.notes)
    np.testing.assert_allclose(tvm_run(loaded, _feeds())[0], ort_run(model, _feeds())[0], rtol=1e-5, atol=1e-6)
