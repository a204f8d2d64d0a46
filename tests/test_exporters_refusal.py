"""An operator no rewrite covers is refused naming its nodes, the exporter that wrote the file
(its producer_name) and what to do, whichever exporter wrote it."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from explorer.errors import UnsupportedOperatorError
from explorer.models import import_onnx


def _with(op: str, domain: str = "", producer: str = "paddle2onnx", version: str = "2.1.0"):
    node = helper.make_node(op, ["x"], ["y"], name="odd_node", domain=domain)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    opsets = [helper.make_opsetid("", 13)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=opsets, producer_name=producer, producer_version=version)


@pytest.mark.parametrize("op, domain", [("NoSuchOp", ""), ("Imputer", "ai.onnx.ml"), ("FusedThing", "com.microsoft")])
def test_the_refusal_names_the_node_the_exporter_and_a_way_out(op, domain):
    with pytest.raises(UnsupportedOperatorError) as err:
        import_onnx(_with(op, domain))
    text = str(err.value)
    assert "'odd_node'" in text and "written by paddle2onnx 2.1.0" in text
    assert "export the model again" in text  # what to do


def test_a_file_without_a_producer_says_so():
    with pytest.raises(UnsupportedOperatorError, match="names no exporter"):
        import_onnx(_with("NoSuchOp", "ai.onnx.ml", producer="", version=""))
