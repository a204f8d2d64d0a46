"""What HF optimum's exports and scripted PyTorch need beyond the import: sample token ids inside
the embedding tables (BERT's ``token_type_ids`` index 2 rows: ONNX Runtime refused the reference
run), an attention mask's ``-inf`` agreeing with itself layer by layer (GPT-2 with past key values
was NOT VERIFIED on ``inf - inf``), and a concatenation of 1-D tensors in the task pipeline (a
scripted VAD's index arithmetic failed in ``ConcatAsCopies``)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from explorer.models.index_inputs import index_limits


def _embedding_model() -> onnx.ModelProto:
    words = numpy_helper.from_array(np.random.default_rng(0).standard_normal((50, 4)).astype(np.float32), "words")
    types = numpy_helper.from_array(np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32), "types")
    nodes = [helper.make_node("Gather", ["words", "ids"], ["w"]),
             helper.make_node("Cast", ["type_ids"], ["t64"], to=TensorProto.INT64),
             helper.make_node("Gather", ["types", "t64"], ["t"]),
             helper.make_node("Add", ["w", "t"], ["y"])]
    graph = helper.make_graph(nodes, "emb", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 6]),
                                             helper.make_tensor_value_info("type_ids", TensorProto.INT32, [1, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 4])], [words, types])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_sample_token_ids_stay_inside_their_embedding_tables(tmp_path):
    from explorer.workload import load_workload

    model = _embedding_model()
    assert index_limits(model) == {"ids": 50, "type_ids": 2}
    onnx.save(model, str(tmp_path / "emb.onnx"))
    workload = load_workload(str(tmp_path / "emb.onnx"))
    for seed in range(4):
        feeds = workload.sample_inputs(seed)
        assert feeds["type_ids"].max() < 2 and feeds["ids"].max() < 50
        workload.reference(feeds)  # ONNX Runtime takes them


def test_an_infinite_mask_agrees_with_itself_layer_by_layer():
    from export.layers import compare_layers

    mask = helper.make_node("Constant", [], ["mask"],
                            value=numpy_helper.from_array(np.array([0.0, -np.inf, 0.0], np.float32), "m"))
    graph = helper.make_graph([mask, helper.make_node("Add", ["x", "mask"], ["scores"]),
                               helper.make_node("Softmax", ["scores"], ["y"], axis=-1)], "masked",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    report = compare_layers(model, {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)})
    assert report.ok, report


def test_a_concatenation_of_1d_tensors_builds_as_copies():
    import tvm

    from explorer.passes.concat_copies import concat_by_copies

    func = concat_by_copies([[3], [2]], 0, "float32").with_attr("global_symbol", "main")
    ex = tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target({"kind": "llvm"}))
    out = tvm.runtime.tensor(np.zeros(5, "float32"))
    ex["main"](tvm.runtime.tensor(np.arange(3, dtype="float32")), tvm.runtime.tensor(np.array([7, 8], "float32")), out)
    np.testing.assert_array_equal(out.numpy(), [0, 1, 2, 7, 8])
    two = concat_by_copies([[1, 2], [2, 2]], 0, "float32").with_attr("global_symbol", "main")  # several dims too
    ex = tvm.compile(tvm.IRModule({"main": two}), target=tvm.target.Target({"kind": "llvm"}))
    out = tvm.runtime.tensor(np.zeros((3, 2), "float32"))
    ex["main"](tvm.runtime.tensor(np.ones((1, 2), "float32")), tvm.runtime.tensor(np.zeros((2, 2), "float32")), out)
    np.testing.assert_array_equal(out.numpy(), [[1, 1], [0, 0], [0, 0]])
