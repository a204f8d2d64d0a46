"""Keras's ``ZeroPadding2D`` before a strided convolution, as tf2onnx writes it (a ``Pad`` feeding the
``Conv``, or a ``Transpose`` of it feeding one): folded into the convolution's pads, the same outputs
as ONNX Runtime gives for the model as written, and no padding kernel of its own in TVM's graph."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from explorer.models import import_onnx
from explorer.models.pad_conv import fold_pads_into_convs
from tests.onnx_cases import ort_run, tvm_run

CHANNELS = 8


def _subgraph_reader(op_type: str) -> onnx.NodeProto:
    """An ``If`` whose branches, or a ``Loop`` whose body, read the padded tensor from the main graph
    (nothing in the main graph names it as an input): ``z``."""
    def body(inputs, nodes, outputs):
        return helper.make_graph(nodes, f"{op_type.lower()}_body", inputs,
                                 [helper.make_tensor_value_info(o, t, None) for o, t in outputs])

    float_out = [("copy", TensorProto.FLOAT)]
    if op_type == "If":
        branch = body([], [helper.make_node("Identity", ["padded"], ["copy"])], float_out)
        return helper.make_node("If", ["yes"], ["z"], then_branch=branch, else_branch=branch)
    loop = body([helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("go", TensorProto.BOOL, [])],
                [helper.make_node("Identity", ["go"], ["go_on"]), helper.make_node("Identity", ["padded"], ["copy"])],
                [("go_on", TensorProto.BOOL)] + float_out)
    return helper.make_node("Loop", ["once", "yes"], ["z"], body=loop)


def _model(pads, *, nhwc: bool = False, value: float | None = None, mode: str | None = None,
           extra_reader: str | None = None, opset: int = 13, conv_pads=None, computed: bool = False,
           subgraph_reader: str | None = None) -> onnx.ModelProto:
    """x -> Pad(pads) [-> Transpose to NCHW] -> depthwise 3x3 stride-2 Conv -> y (and, with
    ``extra_reader``, that op of the padded tensor as a second output; with ``subgraph_reader``,
    an If or Loop reading it inside its branches or body as ``z``). ``computed``: the amounts are
    a Concat of two Constant nodes, not an initializer."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (CHANNELS, 1, 3, 3)).astype("float32"), "w")]
    pad_inputs = ["x"]
    pad_attrs = {} if mode is None else {"mode": mode}
    nodes = []
    if computed:
        half = len(pads) // 2
        nodes += [helper.make_node("Constant", [], ["begins"], value=numpy_helper.from_array(np.array(pads[:half], np.int64))),
                  helper.make_node("Constant", [], ["ends"], value=numpy_helper.from_array(np.array(pads[half:], np.int64))),
                  helper.make_node("Concat", ["begins", "ends"], ["pads"], axis=0)]
        pad_inputs.append("pads")
    elif opset >= 11:
        inits.append(numpy_helper.from_array(np.array(pads, np.int64), "pads"))
        pad_inputs.append("pads")
        if value is not None:
            inits.append(numpy_helper.from_array(np.array(value, np.float32), "value"))
            pad_inputs.append("value")
    else:
        pad_attrs["pads"] = list(pads)
        if value is not None:
            pad_attrs["value"] = value
    nodes.append(helper.make_node("Pad", pad_inputs, ["padded"], name="pad", **pad_attrs))
    data = "padded"
    if nhwc:
        nodes.append(helper.make_node("Transpose", ["padded"], ["nchw"], perm=[0, 3, 1, 2]))
        data = "nchw"
    conv_attrs = {"strides": [2, 2], "group": CHANNELS, "kernel_shape": [3, 3]}
    if conv_pads is not None:
        conv_attrs["pads"] = conv_pads
    nodes.append(helper.make_node("Conv", [data, "w"], ["y"], **conv_attrs))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra_reader:
        nodes.append(helper.make_node(extra_reader, ["padded", "padded"], ["z"]))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    if subgraph_reader:
        inits += [numpy_helper.from_array(np.array(True), "yes"), numpy_helper.from_array(np.array(1, np.int64), "once")]
        nodes.append(_subgraph_reader(subgraph_reader))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    shape = [1, 14, 14, CHANNELS] if nhwc else [1, CHANNELS, 14, 14]
    graph = helper.make_graph(nodes, "padded_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="")


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return {"x": np.random.default_rng(1).standard_normal(shape).astype("float32")}


@pytest.mark.parametrize("pads, nhwc, opset, conv_pads, computed", [
    ([0, 0, 0, 0, 0, 0, 1, 1], False, 13, None, False),            # one row and column after (EfficientNet, MobileNetV2)
    ([0, 0, 1, 1, 0, 0, 2, 2], False, 17, [1, 0, 0, 1], False),    # one before, two after, onto pads of its own
    ([0, 0, 1, 1, 0, 0, 2, 2], False, 10, None, False),            # pads as an attribute (before opset 11)
    ([0, 1, 1, 0, 0, 2, 2, 0], True, 13, None, False),             # NHWC, then a transpose (MobileNetV3)
    ([0, 0, 0, 0, 0, 0, 1, 1], False, 13, None, True),             # amounts computed from constants
])
def test_a_zero_pad_joins_the_convolution_and_the_outputs_stay_the_same(pads, nhwc, opset, conv_pads, computed):
    model = _model(pads, nhwc=nhwc, opset=opset, conv_pads=conv_pads, computed=computed)
    folded, notes = fold_pads_into_convs(model)
    assert notes == ["1 zero Pad nodes folded into the convolutions that read them"]
    # the amounts went with the Pad (an initializer, or the nodes that computed them)
    assert [n.op_type for n in folded.graph.node] == (["Transpose", "Conv"] if nhwc else ["Conv"])
    assert {i.name for i in folded.graph.initializer} == {"w"}
    feeds = _feeds(model)
    expected = ort_run(model, feeds)[0]
    np.testing.assert_array_equal(ort_run(folded, feeds)[0], expected)
    loaded = import_onnx(model)  # the importer's preparation folds it too: no padding kernel left
    assert any("zero Pad nodes folded" in n for n in loaded.info.notes)
    assert "pad" not in [gv.name_hint for gv in loaded.mod.get_global_vars()]
    np.testing.assert_allclose(tvm_run(loaded, feeds)[0], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kwargs", [
    {"value": 1.0},                                          # pads with ones: not what the conv pads with
    {"mode": "edge"},                                        # repeats the border
    {"pads": [0, 1, 0, 0, 0, 0, 0, 0]},                      # pads the channels
    {"extra_reader": "Add"},                                 # the padded tensor is read by something else too
], ids=["value", "edge", "channels", "other-reader"])
def test_a_pad_the_convolution_cannot_take_stays(kwargs):
    pads = kwargs.pop("pads", [0, 0, 0, 0, 0, 0, 1, 1])
    model = _model(pads, **kwargs)
    assert fold_pads_into_convs(model) == (model, [])


@pytest.mark.parametrize("op_type", ["If", "Loop"])
def test_a_pad_an_if_branch_or_a_loop_body_reads_stays(op_type):
    model = _model([0, 0, 0, 0, 0, 0, 1, 1], subgraph_reader=op_type)
    feeds = _feeds(model)
    padded = ort_run(model, feeds)[1]  # the subgraph sees the padded tensor: 15x15
    assert padded.shape[-2:] == (15, 15)
    assert fold_pads_into_convs(model) == (model, [])
