"""Models as users bring them, through the whole CLI: import, passes, tune, export, verify.

A sequence model (an If on a constant input in front of an LSTM), an int8 QDQ CNN made with
`schedx quantize`, and a float CNN swept over batch sizes (tests/test_sweep.py) go through every
command a user would run on them."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from app.cli import cli
from tests.conftest import tiny_cnn

pytestmark = pytest.mark.heavy  # real builds or searches: left out of make test-fast


def _sequence_model() -> onnx.ModelProto:
    """x[T=4, B=1, 3] -> If(flag: constant) picks Relu or Tanh -> LSTM(hidden 5) -> Y_h."""
    rng = np.random.default_rng(0)
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t_y"])], "then", [],
                             [helper.make_tensor_value_info("t_y", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Tanh", ["x"], ["e_y"])], "else", [],
                              [helper.make_tensor_value_info("e_y", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("If", ["flag"], ["xin"], name="If_flag", then_branch=then, else_branch=other),
             helper.make_node("LSTM", ["xin", "W", "R", "B"], ["Y", "Y_h", "Y_c"], name="lstm0", hidden_size=5)]
    inits = [numpy_helper.from_array(np.array(False), "flag"),
             numpy_helper.from_array(rng.normal(0, 0.4, (1, 20, 3)).astype("float32"), "W"),
             numpy_helper.from_array(rng.normal(0, 0.4, (1, 20, 5)).astype("float32"), "R"),
             numpy_helper.from_array(rng.normal(0, 0.4, (1, 40)).astype("float32"), "B")]
    graph = helper.make_graph(nodes, "seq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 1, 3])],
                              [helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [1, 1, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, (args, result.output)
    return result.output


def _json(output: str):
    return json.loads(output[output.index("{"):])


@pytest.mark.slow  # 60-120 s: the If/LSTM bundles verify in test_if_recurrent; the whole journey in make test-slow
@pytest.mark.parametrize("make", [_sequence_model], ids=["if_then_lstm"])
def test_a_sequence_model_goes_through_passes_tune_export_and_verify(tmp_path, make):
    path = tmp_path / "seq.onnx"
    onnx.save(make(), path)
    db = str(tmp_path / "s.db")
    passes = _json(_run("passes", str(path), "--json"))
    assert passes["model"]["inputs"][0]["shape"] == [4, 1, 3] and passes["snapshots"]
    tuned = _json(_run("tune", str(path), "--trials", "8", "--per-batch", "8", "--db", db, "--json"))
    assert tuned["measured"] > 0 and not tuned["problem"]
    report = _json(_run("export", str(path), "--db", db, "-o", str(tmp_path / "bundle"), "--json"))
    assert report["ok"] and report["verification"]["fresh_process"]["ok"]
    assert report["verification"]["fresh_process"]["reference"] == "ONNX Runtime"


def test_an_int8_cnn_made_by_schedx_quantize_exports_and_verifies(tmp_path):
    src, dst = tmp_path / "cnn.onnx", tmp_path / "cnn-int8.onnx"
    onnx.save(tiny_cnn(), src)
    q = _json(_run("quantize", str(src), "--calibrate", "4", "--eval", "2", "-o", str(dst), "--json"))
    assert q["quantized_nodes"] > 0 and dst.is_file()  # (a tiny net: its QDQ overhead outweighs the weights)
    report = _json(_run("export", str(dst), "--no-db", "-o", str(tmp_path / "int8-bundle"), "--json"))
    assert report["ok"], report["verification"]
    fresh = report["verification"]["fresh_process"]
    assert fresh["ok"] and fresh["reference"] == "ONNX Runtime"
    manifest = json.loads((tmp_path / "int8-bundle" / "manifest.json").read_text())
    # int8 outputs are judged within a few quantization steps (None: a float output after the last DQ)
    assert len(manifest["output_atol"]) == 1 and "layer-by-layer comparison skipped" in " ".join(manifest["warnings"])
    run = _run("run", str(tmp_path / "int8-bundle"), "--runs", "3", "--no-baselines")
    assert "match" in run
