"""paddle2onnx's graphs: every weight and shape vector a ``Constant`` behind an ``Identity``, and a
``Resize`` given empty ``roi``/``scales`` beside its ``sizes`` (a PaddleOCR DB detector's FPN
up-sampling, exported with dynamic batch, height and width). With ``--shapes`` they import, their
shape arithmetic folds and the result matches ONNX Runtime; before, "Node Identity.10 cannot handle
ShapeExpr inputs" and "Only one of scales and sizes can be provided in Resize"."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from explorer.models import import_onnx
from explorer.models.identity_bypass import bypass_identities
from explorer.models.resize_inputs import drop_empty_resize_inputs
from tests.onnx_cases import ort_run, tvm_run


def _const(name: str, value: np.ndarray) -> list[onnx.NodeProto]:
    """paddle2onnx's way: ``Constant`` then ``Identity``; the value is read as ``name``."""
    return [helper.make_node("Constant", [], [f"{name}_c"], value=numpy_helper.from_array(value, f"{name}_c")),
            helper.make_node("Identity", [f"{name}_c"], [name], name=f"Identity_{name}")]


def _fpn_like(opset: int = 11) -> onnx.ModelProto:
    """conv -> 2x nearest up-sampling to sizes computed from the shape -> add -> reshape -> flatten."""
    rng = np.random.default_rng(0)
    nodes = (_const("w", rng.normal(0, 0.3, (4, 3, 3, 3)).astype("float32"))
             + _const("two", np.array([2, 2], np.int64)) + _const("starts", np.array([2], np.int64))
             + _const("ends", np.array([4], np.int64)) + _const("nc", np.array([1, 4], np.int64))
             + _const("flat", np.array([1, 4, -1], np.int64)))
    nodes += [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2], name="conv"),
        helper.make_node("Shape", ["c"], ["c_shape"]),
        helper.make_node("Slice", ["c_shape", "starts", "ends"], ["hw"]),
        helper.make_node("Mul", ["hw", "two"], ["hw2"]),
        helper.make_node("Concat", ["nc", "hw2"], ["sizes"], axis=0),
        helper.make_node("Resize", ["c", "roi", "scales", "sizes"], ["up"], mode="nearest", name="Resize.0"),
        helper.make_node("Conv", ["x", "w"], ["same"], pads=[1, 1, 1, 1], name="conv_full"),
        helper.make_node("Add", ["up", "same"], ["sum"]),
        helper.make_node("Reshape", ["sum", "flat"], ["y"]),
    ]
    empty = [numpy_helper.from_array(np.zeros(0, np.float32), name) for name in ("roi", "scales")]  # as written
    graph = helper.make_graph(nodes, "fpn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], empty)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="")


def test_a_paddle2onnx_style_graph_imports_with_fixed_shapes_and_matches_onnx_runtime():
    model = _fpn_like()
    loaded = import_onnx(model, "x:1x3x16x16")
    assert any("Identity nodes bypassed" in n for n in loaded.info.notes)
    assert any("Resize nodes" in n for n in loaded.info.notes)
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype("float32")}
    np.testing.assert_allclose(tvm_run(loaded, feeds)[0], ort_run(model, feeds)[0], rtol=1e-5, atol=1e-5)


def test_the_rewrites_keep_the_meaning_and_what_they_must_keep():
    model = _fpn_like(opset=13)  # before 13 ONNX Runtime wants the empty scales written (TVM does not)
    out, notes = bypass_identities(model)
    assert notes == ["6 Identity nodes bypassed (their readers read their inputs)"]
    out, notes = drop_empty_resize_inputs(out)
    (resize,) = [n for n in out.graph.node if n.op_type == "Resize"]
    assert list(resize.input) == ["c", "", "", "sizes"] and notes
    feeds = {"x": np.random.default_rng(2).standard_normal((1, 3, 8, 12)).astype("float32")}
    np.testing.assert_array_equal(ort_run(out, feeds)[0], ort_run(model, feeds)[0])
    # an Identity that is a graph output, or that an If branch reads, stays
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    kept = helper.make_model(graph)
    assert bypass_identities(kept) == (kept, [])
