"""LSTMs inside ``If`` branches, as scripted PyTorch writes them (silero-vad's class): a 0-d input
that chooses the branch is pinned with ``--shapes sr=16000`` (the taken branch spliced in, the
reference too) or kept as control flow (both branches' LSTMs rewritten in their branch); pads
computed with ConstantOfShape fold, so the LSTM's input shape is static. Each is checked against
ONNX Runtime, float32 and float16. Before: "the shape of its input ... is not static" with the
shapes given, and "'LSTM' ... TVM's importer does not support" in a branch."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from explorer.errors import ShapeSpecError
from explorer.models import import_onnx
from explorer.models.control_flow import count_ifs, fold_constants, pin_scalar_inputs
from explorer.models.onnx_import import fix_input_shapes
from explorer.models.recurrent import RecurrentLayerError
from explorer.models.shapes import parse_shape_spec
from tests.exporter_models import scripted_two_rate, to_float16, two_rate_feeds
from tests.onnx_cases import ort_run, tvm_run

pytest.importorskip("torch")
SHAPES = "audio:1x40,state:2x1x16"


@pytest.fixture(scope="module")
def two_rate() -> onnx.ModelProto:
    return scripted_two_rate()


@pytest.fixture(scope="module")
def two_rate_fp16(two_rate) -> onnx.ModelProto:
    return to_float16(two_rate)


def _relax_if(loaded) -> bool:
    return " if " in loaded.mod.script()


def _close(got, want, *, atol):
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=atol)


@pytest.mark.parametrize("sr", [16000, 8000])
def test_a_pinned_scalar_input_splices_the_branch_it_takes(two_rate, sr):
    loaded = import_onnx(two_rate, f"{SHAPES},sr={sr}")
    assert [name for name, _, _ in loaded.info.inputs] == ["audio", "state"]  # sr is a constant now
    assert not _relax_if(loaded)
    assert any(f"input 'sr' fixed to {sr}" in n for n in loaded.info.notes)
    assert count_ifs(loaded.onnx_model) < count_ifs(two_rate)  # the reference has the branch spliced too
    feeds = two_rate_feeds(None)
    _close(tvm_run(loaded, feeds), ort_run(two_rate, {**feeds, "sr": np.array(sr, "int64")}), atol=1e-5)
    _close(ort_run(loaded.onnx_model, feeds), ort_run(two_rate, {**feeds, "sr": np.array(sr, "int64")}), atol=0)


def test_an_unpinned_branch_stays_control_flow_with_both_lstms_rewritten(two_rate):
    loaded = import_onnx(two_rate, SHAPES)
    assert [name for name, _, _ in loaded.info.inputs] == ["audio", "state", "sr"]
    assert _relax_if(loaded)
    assert any("2 recurrent layer(s) rewritten" in n and "then_branch" in n and "else_branch" in n
               for n in loaded.info.notes), loaded.info.notes
    assert any("--shapes sr=VALUE" in n for n in loaded.info.notes)  # how to fold it, said
    for sr in (16000, 8000, 0):
        feeds = two_rate_feeds(sr)
        _close(tvm_run(loaded, feeds), ort_run(two_rate, feeds), atol=1e-5)


@pytest.mark.parametrize("shapes", [f"{SHAPES},sr=16000", SHAPES])
def test_float16_models_compute_in_float16_as_onnx_runtime_does(two_rate_fp16, shapes):
    """Converted to float16 (inputs and outputs float32, the LSTMs float32 between casts, which is
    what ONNX Runtime's CPU kernels run): TVM computes the float16 operators in float16."""
    loaded = import_onnx(two_rate_fp16, shapes)
    assert "float16" in loaded.mod.script()
    inputs = [name for name, _, _ in loaded.info.inputs]
    for sr in ((16000,) if "sr=" in shapes else (16000, 8000)):
        feeds = two_rate_feeds(sr)
        got = tvm_run(loaded, {k: v for k, v in feeds.items() if k in inputs})
        _close(got, ort_run(two_rate_fp16, feeds), atol=1e-3)  # a float16 step of the outputs at most


def test_pads_made_with_constant_of_shape_fold_so_the_lstm_input_is_static(two_rate):
    """Scripted ``F.pad`` computes its pads with ConstantOfShape, which onnxscript's folding keeps:
    the pads, and every shape after them, stayed unknown ("the shape of its input ... is not
    static" with the shapes given)."""
    static, _ = fix_input_shapes(two_rate, parse_shape_spec(f"{SHAPES},sr=16000"))
    assert "ConstantOfShape" in {n.op_type for n in static.graph.node}
    assert "ConstantOfShape" not in {n.op_type for n in fold_constants(static).graph.node}


def _branch_of_rank_4() -> onnx.ModelProto:
    """``If mode == 1``: an LSTM over x [4, 1, 3], else the same LSTM over Unsqueeze(x) (rank 4,
    a branch that cannot run at these shapes; ONNX Runtime fails there too)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, 0.5, (1, 8, 3)).astype("float32"), "W")
    r = numpy_helper.from_array(rng.normal(0, 0.5, (1, 8, 2)).astype("float32"), "R")
    axes = numpy_helper.from_array(np.array([0], "int64"), "axes")

    def branch(name, src):
        nodes = [helper.make_node("LSTM", [src, "W", "R"], [f"{name}_y"], hidden_size=2, name=f"{name}_lstm")]
        if src != "x":
            nodes.insert(0, helper.make_node("Unsqueeze", ["x", "axes"], [src], name=f"{name}_unsqueeze"))
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)])

    nodes = [helper.make_node("Equal", ["mode", "one"], ["c"], name="is_one"),
             helper.make_node("If", ["c"], ["y"], name="If_mode", then_branch=branch("then", "x"),
                              else_branch=branch("else", "x4"))]
    graph = helper.make_graph(nodes, "ranked", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 1, 3]),
                                                helper.make_tensor_value_info("mode", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [w, r, axes, numpy_helper.from_array(np.array(1, "int64"), "one")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_branch_that_cannot_run_at_these_shapes_names_the_input_to_pin():
    model = _branch_of_rank_4()
    with pytest.raises(RecurrentLayerError) as info:
        import_onnx(model)
    text = str(info.value)
    assert "If_mode/else_branch/else_lstm" in text and "rank 4" in text
    assert "'mode'" in text and "--shapes mode=VALUE" in text
    loaded = import_onnx(model, "mode=1")  # pinned: the branch that cannot run is gone
    assert count_ifs(loaded.onnx_model) == 0  # (ONNX Runtime refuses the model as it was, at any mode)
    feeds = {"x": np.random.default_rng(2).standard_normal((4, 1, 3)).astype("float32")}
    _close(tvm_run(loaded, feeds), ort_run(loaded.onnx_model, feeds), atol=1e-5)


def test_only_scalar_inputs_are_pinned():
    model = _branch_of_rank_4()
    with pytest.raises(ShapeSpecError, match="no input dimension is named 'x'"):
        import_onnx(model, "x=3")  # x is no scalar: a value for it means nothing
    assert pin_scalar_inputs(model, {"nothing": 1}) == (model, {})


@pytest.mark.heavy
@pytest.mark.parametrize("precision, shapes", [("fp32", f"{SHAPES},sr=16000"), ("fp32", SHAPES),
                                               ("fp16", f"{SHAPES},sr=16000")])
def test_the_bundles_verify(two_rate, two_rate_fp16, tmp_path, precision, shapes):
    from export import export_workload
    from explorer.workload import load_workload

    path = tmp_path / "two_rate.onnx"
    onnx.save(two_rate if precision == "fp32" else two_rate_fp16, str(path))
    report = export_workload(load_workload(str(path), shapes), "cpu", tmp_path / "b")
    assert report.ok and report.verified, report.verdict
    # the manifest (and `schedx export`'s report) says what the bundle computes in
    assert report.manifest.get("computed_in") == ("float16" if precision == "fp16" else None)
