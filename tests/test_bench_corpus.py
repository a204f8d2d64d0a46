"""``benchmarks.bench_corpus --precision``: each model exported and verified at that precision as
`schedx export --precision` does it, its error against the precision's tolerance in its row; a
model the precision refuses says why in its row; bf16 on a CPU without AVX512-BF16 or AMX-BF16 is
refused up front. Run as a user runs it: the module in a subprocess, on a manifest of tiny models."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from benchmarks.bench_corpus import host_refusal


def _save(model: onnx.ModelProto, path) -> None:
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def dense_model() -> onnx.ModelProto:
    """x (4x256) @ w (256x256) + b, ReLU: one product with a constant weight that bf16 converts on AMX and on
    AVX512-BF16 alike (N = 256 and N x K = 65536: :func:`explorer.passes.bf16_dense.why_fp32`'s smallest
    vdpbf16ps product; 256 x 64 stays fp32 there)."""
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, [256, 256], rng.standard_normal((256, 256)).astype("f4").ravel())
    b = helper.make_tensor("b", TensorProto.FLOAT, [256], rng.standard_normal(256).astype("f4"))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 256])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def qdq_model() -> onnx.ModelProto:
    """x quantized to int8 and back, then ReLU: a model that is already quantized."""
    scale = helper.make_tensor("s", TensorProto.FLOAT, [], [0.05])
    zero = helper.make_tensor("z", TensorProto.INT8, [], [0])
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]), helper.make_node("Relu", ["d"], ["y"])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], [scale, zero])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def corpus(tmp_path, models: dict[str, onnx.ModelProto]):
    """A manifest of ``models`` and their files in ``tmp_path``: what ``--manifest`` and ``--dir`` take."""
    entries = []
    for name, model in models.items():
        _save(model, tmp_path / f"{name}.onnx")
        entries.append({"name": name, "family": "test", "source": "test", "file": f"{name}.onnx", "shapes": {}})
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"models": entries}))
    return manifest


def bench(tmp_path, manifest, precision: str, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / f"{precision}.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_corpus", "--manifest", str(manifest), "--dir",
                           str(tmp_path), "--precision", precision, "--rounds", "1", "--runs", "2", "--budget", "0.2",
                           "--json", str(out), *extra], capture_output=True, text=True, timeout=600)
    results = {r["name"]: r for r in json.loads(out.read_text())["results"]} if out.exists() else {}
    return proc, results


def test_int8_says_in_the_row_why_it_refuses_a_model_already_quantized(tmp_path):
    manifest = corpus(tmp_path, {"tiny_qdq": qdq_model()})
    proc, results = bench(tmp_path, manifest, "int8")
    assert proc.returncode == 0, proc.stderr
    row = results["tiny_qdq"]
    assert row["precision"] == "int8" and not row["exported"] and "ms" not in row
    assert "already quantized" in row["refused"]
    assert "refused at int8: tiny_qdq is already quantized" in proc.stdout
    assert "refused 1" in proc.stdout  # the summary counts it apart from the failures


@pytest.mark.slow
def test_bf16_rows_state_the_error_against_the_tolerance_and_the_fp32_build_beside_it(tmp_path):
    manifest = corpus(tmp_path, {"tiny_dense": dense_model()})
    proc, results = bench(tmp_path, manifest, "bf16")
    why = host_refusal("bf16")
    if why:  # a CPU without AVX512-BF16 or AMX-BF16: refused before anything is built
        assert proc.returncode == 2 and f"refused: {why}" in proc.stdout and not results
        assert "AVX512-BF16" in why
        return
    assert proc.returncode == 0, proc.stderr
    row = results["tiny_dense"]
    assert row["verified"] and row["converted"] == 1 and row["tolerance"] == pytest.approx(1e-2)
    assert 0 < row["verify_error"] <= 1e-2  # rounded to bf16: not exact, within the stated bound
    assert {"tvm 2t", "ort 2t", "tvm fp32 2t", "tvm fp32 1t"} <= set(row["ms"])
    assert row["ratio_fp32"] > 0 < row["ratio_fp32_1t"]
    assert row["kernels"] and "profile_error" not in row  # its slowest kernels, profiled as built
    assert f"{row['verify_error']:.1e} <= 1e-02" in proc.stdout
    assert "tvm bf16 / tvm fp32 at 2 threads: median" in proc.stdout
    assert "precision bf16" in proc.stdout.splitlines()[0]
    if importlib.util.find_spec("openvino"):  # OpenVINO's rows: their outputs' error by schedx's rule, under the row
        errors = row["openvino_error"]
        assert errors["openvino f32"]["within"] and errors["openvino f32"]["bound"] == 1e-4
        assert f"    openvino f32 {errors['openvino f32']['text']}; " in proc.stdout
        assert any(line.startswith("openvino f32 against ONNX Runtime: worst error ")
                   for line in proc.stdout.splitlines())
