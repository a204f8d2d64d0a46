"""``If`` nodes: the pre-check asks TVM, fixed conditions fold away, run-time ones become a
Relax If, and what cannot import is explained. Each model is verified against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from explorer.errors import UnsupportedOperatorError
from explorer.models import import_onnx
from explorer.models.control_flow import count_ifs, runtime_ifs
from explorer.models.onnx_ops import (
    check_operators,
    directly_handled_ops,
    importable_ops,
)
from tests.onnx_cases import (
    if_on_constant,
    if_on_shape,
    if_on_values,
    ort_run,
    random_feeds,
    tvm_run,
)


def _relax_has_if(mod) -> bool:
    return " if " in mod.script() or "\n        if " in mod.script()


def test_the_precheck_asks_the_importer_what_it_handles_itself():
    from tvm.relax.frontend.onnx import onnx_frontend

    assert "If" in directly_handled_ops()
    assert "If" not in onnx_frontend._get_convert_map()
    assert importable_ops() >= set(onnx_frontend._get_convert_map()) | {"If"}
    assert "Loop" not in importable_ops() and "LSTM" not in importable_ops()
    check_operators(if_on_values())  # an If is no reason to refuse a model


@pytest.mark.parametrize("batch, branch", [(2, "Relu"), (1, "Sigmoid")])
def test_if_on_a_shape_folds_to_the_branch_the_shapes_choose(batch, branch):
    model = if_on_shape()
    loaded = import_onnx(model, f"batch={batch}")
    assert any("1 of 1 If node(s) folded" in n for n in loaded.info.notes)
    assert not _relax_has_if(loaded.mod)
    assert ("sigmoid" in loaded.mod.script()) == (branch == "Sigmoid")
    assert count_ifs(loaded.onnx_model) == 1  # the reference is the user's model, shapes fixed
    feeds = random_feeds(model, x=[batch, 6])
    np.testing.assert_allclose(tvm_run(loaded, feeds)[0], ort_run(model, feeds)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("flag", [False, True])
def test_if_on_a_constant_input_folds(flag):
    model = if_on_constant(flag)
    loaded = import_onnx(model)
    assert any("folded" in n for n in loaded.info.notes)
    assert not _relax_has_if(loaded.mod)
    assert [name for name, _, _ in loaded.info.inputs] == ["x"]  # the constant is not an input
    feeds = random_feeds(model)
    np.testing.assert_allclose(tvm_run(loaded, feeds)[0], ort_run(model, feeds)[0], rtol=1e-5, atol=1e-6)


def test_if_on_values_imports_as_a_relax_if_and_takes_both_branches():
    model = if_on_values()
    loaded = import_onnx(model)
    assert _relax_has_if(loaded.mod)
    assert any("If node 'If_values' branches at run time on 'c'" in n and "Greater node 'positive'" in n
               for n in loaded.info.notes)
    for sign in (1.0, -1.0):
        feeds = {"x": (sign * np.abs(random_feeds(model)["x"])).astype("float32")}
        np.testing.assert_allclose(tvm_run(loaded, feeds)[0], ort_run(model, feeds)[0], rtol=1e-5, atol=1e-6)


def test_a_branch_tvm_cannot_convert_is_named_with_its_path():
    model = if_on_values(else_op="Celu")  # an operator TVM 0.27 lacks, in the branch
    with pytest.raises(UnsupportedOperatorError) as info:
        import_onnx(model)
    assert info.value.op_type == "Celu"
    assert info.value.node_name == "If_values/else_branch/else_celu"


def test_a_folded_branch_may_hold_what_tvm_lacks():
    model = if_on_constant(flag=False)  # takes the Relu branch
    [else_branch] = [a.g for a in model.graph.node[1].attribute if a.name == "else_branch"]
    else_branch.node[0].op_type = "Celu"  # never taken
    loaded = import_onnx(model)
    assert "relu" in loaded.mod.script()


def test_loops_are_refused_with_a_reason():
    model = if_on_values()
    model.graph.node[0].op_type = "Loop"
    with pytest.raises(UnsupportedOperatorError, match="Loop.*'total'.*trip count"):
        check_operators(model)


def test_runtime_ifs_describe_where_the_condition_comes_from():
    [point] = runtime_ifs(if_on_values())
    assert point.node == "If_values" and point.condition == "c" and "Greater node 'positive'" in point.producer


def test_custom_domain_operators_are_explained():
    model = if_on_values()
    model.graph.node[0].domain = "com.microsoft"
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(UnsupportedOperatorError, match="custom domain 'com.microsoft'"):
        import_onnx(model)


def test_a_model_without_if_is_left_alone():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "plain", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    loaded = import_onnx(model)
    assert loaded.info.notes == () and isinstance(loaded.onnx_model, onnx.ModelProto)
