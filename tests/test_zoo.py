"""Tests of the built-in model zoo: valid ONNX, sane numerics, determinism, TVM import."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from explorer.errors import ExplorerError
from explorer.models.zoo import (
    DEFAULT_MODEL,
    ZOO,
    ZooModel,
    build_onnx,
    get_zoo_model,
    sample_inputs,
    zoo_names,
)

NAMES = ["small_cnn", "resnet18", "mobilenet_v2", "bert_encoder"]
OUTPUT_SHAPES = {
    "small_cnn": (1, 10),
    "resnet18": (1, 1000),
    "mobilenet_v2": (1, 1000),
    "bert_encoder": (1, 128, 768),
}


@pytest.fixture(scope="module")
def models() -> dict[str, onnx.ModelProto]:
    """Every zoo model built once with the default seed (ResNet-18 alone is 47 MB)."""
    return {name: build_onnx(name) for name in NAMES}


def _run_ort(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """First output of ``model`` on ``inputs`` with ONNX Runtime's CPU provider, one thread."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, inputs)[0]


def _shape_dict(name: str) -> dict[str, list[int]]:
    return {input_name: list(shape) for input_name, shape, _ in get_zoo_model(name).inputs}


def _op_count(model: onnx.ModelProto, op_type: str) -> int:
    return sum(node.op_type == op_type for node in model.graph.node)


def _param_count(model: onnx.ModelProto) -> int:
    return sum(int(np.prod(init.dims)) for init in model.graph.initializer)


# -- registry -------------------------------------------------------------------------------------


def test_registry_order_and_default():
    assert zoo_names() == NAMES
    assert list(ZOO) == NAMES
    assert DEFAULT_MODEL == "resnet18" and DEFAULT_MODEL in ZOO


def test_to_dict_is_json_serialisable():
    for name in NAMES:
        model = get_zoo_model(name)
        summary = json.loads(json.dumps(model.to_dict()))
        assert summary["name"] == name
        assert summary["title"] and summary["description"]
        assert summary["inputs"] == [
            {"name": n, "shape": list(s), "dtype": d} for n, s, d in model.inputs
        ]


def test_zoo_model_is_frozen():
    with pytest.raises(AttributeError):
        get_zoo_model("resnet18").name = "other"  # type: ignore[misc]
    assert isinstance(get_zoo_model("resnet18"), ZooModel)


@pytest.mark.parametrize("call", [get_zoo_model, build_onnx, sample_inputs])
def test_unknown_name_lists_the_choices(call):
    with pytest.raises(ValueError) as info:
        call("vgg16")
    message = str(info.value)
    assert "'vgg16'" in message
    assert all(name in message for name in NAMES)
    assert isinstance(info.value, ExplorerError)


# -- ONNX validity and numerics -------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_passes_full_onnx_check(models, name):
    onnx.checker.check_model(models[name], full_check=True)


@pytest.mark.parametrize("name", NAMES)
def test_graph_metadata(models, name):
    model = models[name]
    graph = model.graph
    assert graph.name == name
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    node_names = [node.name for node in graph.node]
    assert all(node_names) and len(set(node_names)) == len(node_names)
    declared = [(i.name, tuple(d.dim_value for d in i.type.tensor_type.shape.dim))
                for i in graph.input]
    assert declared == [(n, s) for n, s, _ in get_zoo_model(name).inputs]
    float_types = {init.data_type for init in graph.initializer if init.dims}
    assert float_types <= {onnx.TensorProto.FLOAT, onnx.TensorProto.INT64}


@pytest.mark.parametrize("name", NAMES)
def test_runs_in_onnxruntime_with_sane_output(models, name):
    out = _run_ort(models[name], sample_inputs(name))
    assert out.shape == OUTPUT_SHAPES[name]
    assert out.dtype == np.float32
    assert np.isfinite(out).all()
    assert 1e-3 < float(out.std()) < 1e3


def test_small_cnn_is_small(models):
    assert _param_count(models["small_cnn"]) < 100_000


def test_resnet18_topology(models):
    model = models["resnet18"]
    assert _op_count(model, "Conv") == 20  # 1 stem + 16 in blocks + 3 downsample
    assert _op_count(model, "BatchNormalization") == 20
    assert _op_count(model, "Add") == 8
    consumers = {node.input[0]: node.op_type for node in model.graph.node}
    for node in model.graph.node:
        if node.op_type == "Conv":
            assert len(node.input) == 2, f"{node.name} should have no bias"
            assert consumers[node.output[0]] == "BatchNormalization"
    names = {node.name for node in model.graph.node}
    assert {"layer1.0.conv1", "layer2.0.downsample.0", "layer4.1.bn2", "fc"} <= names
    assert 11_600_000 < _param_count(model) < 11_800_000  # torchvision: 11.69 M


def test_mobilenet_v2_topology(models):
    model = models["mobilenet_v2"]
    assert _op_count(model, "Conv") == 52
    assert _op_count(model, "Clip") == 35
    assert _op_count(model, "Add") == 10
    depthwise = [n for n in model.graph.node
                 if n.op_type == "Conv" and onnx.helper.get_node_attr_value(n, "group") > 1]
    assert len(depthwise) == 17
    clip_inputs = {tuple(n.input[1:]) for n in model.graph.node if n.op_type == "Clip"}
    bounds = {init.name: onnx.numpy_helper.to_array(init) for init in model.graph.initializer}
    (low, high), = clip_inputs
    assert float(bounds[low]) == 0.0 and float(bounds[high]) == 6.0
    assert 3_450_000 < _param_count(model) < 3_600_000  # torchvision: 3.50 M


def test_bert_encoder_topology(models):
    model = models["bert_encoder"]
    assert _op_count(model, "LayerNormalization") == 2
    assert _op_count(model, "Softmax") == 1
    assert _op_count(model, "Erf") == 1
    assert _op_count(model, "MatMul") == 8  # q, k, v, scores, context, out, ffn in, ffn out
    initializers = {init.name: init for init in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Reshape":
            target = initializers[node.input[1]]
            assert target.data_type == onnx.TensorProto.INT64


# -- determinism ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["small_cnn", "bert_encoder"])
def test_build_is_byte_deterministic(name):
    assert build_onnx(name).SerializeToString() == build_onnx(name).SerializeToString()
    again = build_onnx(name, seed=3).SerializeToString()
    assert build_onnx(name, seed=3).SerializeToString() == again


def test_default_seed_build_is_deterministic_for_big_models(models):
    for name in ("resnet18", "mobilenet_v2"):
        assert build_onnx(name).SerializeToString() == models[name].SerializeToString()


def test_other_seed_changes_weights_not_structure(models):
    base, other = models["small_cnn"], build_onnx("small_cnn", seed=1)
    assert base.graph.node == other.graph.node
    weights = [onnx.numpy_helper.to_array(i) for i in base.graph.initializer]
    other_weights = [onnx.numpy_helper.to_array(i) for i in other.graph.initializer]
    assert not np.array_equal(weights[0], other_weights[0])


@pytest.mark.parametrize("name", NAMES)
def test_sample_inputs_match_specs_and_are_deterministic(name):
    inputs = sample_inputs(name)
    assert list(inputs) == [n for n, _, _ in get_zoo_model(name).inputs]
    for input_name, shape, dtype in get_zoo_model(name).inputs:
        assert inputs[input_name].shape == shape
        assert inputs[input_name].dtype == np.dtype(dtype)
        np.testing.assert_array_equal(inputs[input_name], sample_inputs(name)[input_name])
        assert not np.array_equal(inputs[input_name], sample_inputs(name, seed=1)[input_name])


# -- TVM ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_tvm_imports_model(models, name):
    from tvm.relax.frontend.onnx import from_onnx

    mod = from_onnx(models[name], shape_dict=_shape_dict(name))
    assert any(gv.name_hint == "main" for gv in mod.get_global_vars())
    params = [p.name for p in mod["main"].params]
    assert params == list(_shape_dict(name))  # weights are embedded as constants


def test_small_cnn_tvm_build_matches_onnxruntime(models):
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    model = models["small_cnn"]
    x = sample_inputs("small_cnn")["input"]
    mod = from_onnx(model, shape_dict=_shape_dict("small_cnn"))
    executable = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
    vm = relax.VirtualMachine(executable, tvm.cpu())
    result = vm["main"](tvm.runtime.tensor(x))
    if not hasattr(result, "numpy"):  # a single-output model may come back as a 1-tuple
        result = result[0]
    np.testing.assert_allclose(result.numpy(), _run_ort(model, {"input": x}), rtol=0, atol=1e-4)


# -- int8 -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_mobilenet_v2_int8_is_about_four_times_smaller_and_tvm_matches(models):
    """The classic int8 story on the zoo's MobileNetV2 (about 40 s: quantize, then a TVM build)."""
    from explorer.models import import_onnx
    from explorer.models.qdq import int8_tolerance
    from explorer.models.quantize import quantize_model
    from tests.onnx_cases import tvm_run

    qmodel, report = quantize_model(models["mobilenet_v2"], calibrate=8, eval_samples=4, runs=5, budget_s=2.0)
    assert 3.4 < report.size_ratio < 4.2 and report.quantized_nodes >= 52
    assert report.max_rel_error < 0.25
    [limit] = int8_tolerance(qmodel).values()
    x = sample_inputs("mobilenet_v2", seed=3)
    got, want = tvm_run(import_onnx(qmodel), x)[0], _run_ort(qmodel, x)
    assert np.abs(got - want).max() <= limit
