"""Shape arithmetic folded before import (:mod:`explorer.models.shape_fold`): a detector exported
with dynamic batch, height and width imports with static shapes once ``--shapes`` fixes them,
builds, and agrees with ONNX Runtime; the folding itself keeps every model's outputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from explorer.models import import_onnx
from explorer.models.onnx_import import fix_input_shapes
from explorer.models.shape_fold import MAX_ELEMENTS, fold_shape_arithmetic
from explorer.models.shapes import parse_shape_spec
from tests.detector_heads import OPSETS, SIDE, export_detector
from tests.onnx_cases import ort_run, random_feeds, tvm_run

SHAPES = f"x:1x3x{SIDE}x{SIDE}"
# (opset, dynamo, crop_and_split): the TorchScript exporter at three opsets, its dynamo exporter,
# and the head with sizes TVM's importer refuses outright
CASES = [pytest.param(o, False, False, id=f"opset{o}") for o in OPSETS] + [
    pytest.param(18, True, False, id="dynamo"),
    pytest.param(17, False, True, id="crop-and-split"),
]


@pytest.fixture(scope="module")
def detectors(tmp_path_factory):
    pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("detectors")
    made: dict[tuple, onnx.ModelProto] = {}

    def get(opset: int, dynamo: bool, crop_and_split: bool) -> onnx.ModelProto:
        key = (opset, dynamo, crop_and_split)
        if key not in made:
            path = folder / f"det_{opset}_{int(dynamo)}_{int(crop_and_split)}.onnx"
            made[key] = onnx.load(export_detector(path, opset=opset, dynamo=dynamo, crop_and_split=crop_and_split))
        return made[key]

    return get


def _fixed(model: onnx.ModelProto, shapes: str) -> onnx.ModelProto:
    return fix_input_shapes(model, parse_shape_spec(shapes))[0]


def _ops(model: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in model.graph.node}


@pytest.mark.parametrize("opset, dynamo, crop_and_split", CASES)
def test_a_detector_head_folds_to_constants_and_keeps_its_outputs(detectors, opset, dynamo, crop_and_split):
    model = detectors(opset, dynamo, crop_and_split)
    assert any(d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim)  # exported dynamic
    fixed = _fixed(model, SHAPES)
    folded, notes = fold_shape_arithmetic(fixed)
    assert notes and "shape computation node(s) folded" in notes[0]
    assert not _ops(folded) & {"Shape", "Range", "Gather", "ConstantOfShape"}
    onnx.checker.check_model(folded)
    feeds = random_feeds(fixed)
    for got, want in zip(ort_run(folded, feeds), ort_run(fixed, feeds)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("opset, dynamo, crop_and_split", CASES)
def test_a_detector_with_dynamic_dims_imports_static_and_matches_onnx_runtime(detectors, opset, dynamo,
                                                                               crop_and_split):
    model = detectors(opset, dynamo, crop_and_split)
    loaded = import_onnx(model, SHAPES)
    assert any("shape computation node(s) folded" in n for n in loaded.info.notes)
    assert "tensor_to_shape" not in loaded.mod.script()  # every size is static for the build
    assert loaded.info.outputs[0][1] == (1, 5, (SIDE // 4) ** 2 + (SIDE // 8) ** 2)
    feeds = random_feeds(model, x=[1, 3, SIDE, SIDE])
    np.testing.assert_allclose(tvm_run(loaded, feeds)[0], ort_run(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_other_input_sizes_fold_to_their_own_constants(detectors):
    model = detectors(17, False, False)
    loaded = import_onnx(model, "batch=2,height=96,width=128")
    assert loaded.info.outputs[0][1] == (2, 5, 24 * 32 + 12 * 16)
    feeds = random_feeds(model, x=[2, 3, 96, 128])
    np.testing.assert_allclose(tvm_run(loaded, feeds)[0], ort_run(model, feeds)[0], rtol=1e-4, atol=1e-4)


# whole exports: opset 17 in `make test`, the other exporters' variants in `make test-slow` (~18 s each)
EXPORT_CASES = [c if c.id == "opset17" else pytest.param(*c.values, id=c.id, marks=pytest.mark.slow) for c in CASES]


@pytest.mark.heavy
@pytest.mark.parametrize("opset, dynamo, crop_and_split", EXPORT_CASES)
def test_a_detector_with_dynamic_dims_exports_and_verifies(detectors, tmp_path, opset, dynamo, crop_and_split):
    from export import export_workload

    path = tmp_path / "detector.onnx"
    onnx.save(detectors(opset, dynamo, crop_and_split), path)
    report = export_workload(str(path), "cpu", tmp_path / "bundle", shapes=SHAPES)
    assert report.verified and report.ok, report.verdict


# hand-built graphs: what is folded and what is left alone


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _int64(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, "int64"), name)


def _x(shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)


def _y(shape=None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)


def test_shape_start_end_and_size_fold_where_the_shape_is_static():
    nodes = [helper.make_node("Shape", ["x"], ["hw"], start=2, name="hw"),  # [h, w]
             helper.make_node("Size", ["x"], ["n"], name="size"),
             helper.make_node("Unsqueeze", ["n", "zero"], ["n1"], name="n1"),
             helper.make_node("ReduceProd", ["hw"], ["hw_prod"], keepdims=1, name="prod"),
             helper.make_node("Div", ["n1", "hw_prod"], ["c1"], name="per_pixel"),  # n / (h*w) = b*c
             helper.make_node("Concat", ["c1", "hw"], ["shape"], axis=0, name="cat"),
             helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")]
    model = _model(nodes, [_x(["b", 3, "h", "w"])], [_y()], [_int64("zero", [0])], opset=18)
    folded, notes = fold_shape_arithmetic(_fixed(model, "x:2x3x4x5"))
    assert _ops(folded) == {"Reshape"}
    shape = {i.name: numpy_helper.to_array(i) for i in folded.graph.initializer}["shape"]
    assert shape.tolist() == [6, 4, 5]
    assert "Shape x1" in notes[0] and "Size x1" in notes[0]
    assert {i.name for i in folded.graph.initializer} == {"shape"}  # what fed only folded nodes is gone


def test_a_dimension_left_symbolic_is_not_folded():
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")]
    model = _model(nodes, [_x(["b", 3])], [_y()])
    assert fold_shape_arithmetic(model) == (model, [])


def test_stale_value_info_from_another_size_is_not_trusted():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Shape", ["r"], ["s"], name="shape"),
             helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")]
    model = _model(nodes, [_x(["b", 3])], [_y()])
    model.graph.value_info.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [640, 3]))
    folded, _ = fold_shape_arithmetic(_fixed(model, "b=2"))
    assert numpy_helper.to_array(folded.graph.initializer[0]).tolist() == [2, 3]


def test_weights_and_runtime_values_stay_and_big_values_stay_nodes():
    big = MAX_ELEMENTS + 1
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], name="weight_t"),  # weight arithmetic: not ours
             helper.make_node("MatMul", ["x", "wt"], ["m"], name="mm"),
             helper.make_node("Shape", ["m"], ["s"], name="shape"),
             helper.make_node("Mul", ["s", "big"], ["s_big"], name="times"),
             helper.make_node("ConstantOfShape", ["s_big"], ["zeros"], name="zeros"),
             helper.make_node("ReduceSum", ["zeros"], ["z"], keepdims=0, name="sum"),
             helper.make_node("Add", ["m", "z"], ["y"], name="add")]
    inits = [numpy_helper.from_array(np.ones((2, 3), "float32"), "w"), _int64("big", [big // 2 + 1, 1])]
    model = _model(nodes, [_x([2, 3])], [_y([2, 2])], inits)
    folded, notes = fold_shape_arithmetic(model)
    assert [n.name for n in folded.graph.node] == ["weight_t", "mm", "zeros", "sum", "add"]
    assert "Shape x1" in notes[0] and "Mul x1" in notes[0]


def test_a_folded_value_read_inside_a_branch_or_as_an_output_stays_defined():
    then = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["t"], name="t")], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="e")], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0, name="total"),
             helper.make_node("Greater", ["total", "zero"], ["c"], name="positive"),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="if"),
             helper.make_node("Shape", ["y"], ["s_out"], name="shape_out")]
    model = _model(nodes, [_x([2, 3])], [_y([2, 3]), helper.make_tensor_value_info("s_out", TensorProto.INT64, [2])],
                   [numpy_helper.from_array(np.array(0, "float32"), "zero")])
    folded, _ = fold_shape_arithmetic(model)
    assert "s" in {i.name for i in folded.graph.initializer} and "shape" not in {n.name for n in folded.graph.node}
    assert "shape_out" in {n.name for n in folded.graph.node}  # a graph output keeps its node
    onnx.checker.check_model(folded, full_check=True)
    for sign in (1, -1):
        feeds = {"x": sign * np.abs(random_feeds(model)["x"])}
        for got, want in zip(ort_run(folded, feeds), ort_run(model, feeds)):
            np.testing.assert_array_equal(got, want)


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.parametrize("yaml, simplify", [("yolov8n.yaml", False), ("yolov8n.yaml", True), ("yolo11n.yaml", False),
                                            ("yolov8n-seg.yaml", False), ("yolov8n-pose.yaml", False)])
def test_ultralytics_models_exported_with_dynamic_shapes_export_and_verify(tmp_path, monkeypatch, yaml, simplify):
    monkeypatch.setenv("YOLO_OFFLINE", "1")
    monkeypatch.setenv("YOLO_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    pytest.importorskip("ultralytics")
    from export import export_workload
    from tests.detector_heads import export_ultralytics

    path = export_ultralytics(yaml, tmp_path / "model.onnx", simplify=simplify)
    assert [d.dim_param for d in onnx.load(path).graph.input[0].type.tensor_type.shape.dim] == \
        ["batch", "", "height", "width"]
    report = export_workload(str(path), "cpu", tmp_path / "bundle", shapes=f"images:1x3x{SIDE}x{SIDE}")
    assert report.verified and report.ok, report.verdict
