"""benchmarks.bench_models as a user runs it: ``--precision bf16`` adds the default build at bf16
beside the fp32 rows (compared with the fp32 default and OpenVINO), and is refused before anything
is built for a target without bf16 instructions."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.cpu_marks import NEEDS_BF16

ROOT = Path(__file__).resolve().parents[1]


def bench_models(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.bench_models", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_bf16_is_refused_on_a_target_without_bf16_instructions_before_anything_is_built():
    run = bench_models("--models", "small_cnn", "--precision", "bf16", "--target", "cpu:x86-64-v3", "--no-matmul",
                       timeout=120)
    assert run.returncode == 2, run.stderr
    assert "--precision bf16 needs a CPU with AVX512-BF16 or AMX-BF16" in run.stderr
    assert "small_cnn:" not in run.stdout  # no model was built or timed


@NEEDS_BF16
def test_the_bf16_row_prints_beside_the_fp32_rows_and_is_compared_with_them(tmp_path):
    report = tmp_path / "bench.json"
    run = bench_models("--models", "small_cnn", "--precision", "bf16", "--rounds", "1", "--runs", "3",
                       "--budget", "1", "--no-matmul", "--json", str(report))
    assert run.returncode == 0, run.stderr[-3000:]
    (model,) = json.loads(report.read_text())["models"]
    assert model["precision"] == "bf16" and model["precision_export_s"] > 0
    assert {"tvm default", "tvm default bf16"} <= set(model["median_ms"])
    assert model["median_ms"]["tvm default bf16"] > 0
    assert "tvm default bf16 / tvm default" in model["ratios"]
    assert any(k.startswith("tvm default bf16 / ort") for k in model["ratios"])
    printed = run.stdout
    assert "  tvm default bf16 " in printed and "tvm default bf16 / tvm default" in printed
    assert any("tvm default bf16" in c["text"] and "tvm default" in c["text"].replace("tvm default bf16", "")
               for c in model["comparisons"])  # decided under the noise against the fp32 default
    # the headroom of the bf16 build reads its bf16 kernels against the bf16 peak, as `schedx profile` does, and
    # names the memory tiers of the rooflines
    headroom = model["headroom"]
    assert "bf16 " in headroom["peaks"] and "fp32 " in headroom["peaks"] and "L2 " in headroom["tiers"]
    assert headroom["text"] in printed and isinstance(model["roof_notes"], list)
    if importlib.util.find_spec("openvino"):  # its rows' outputs against ONNX Runtime fp32 by schedx's rule
        assert len(model["output_error"]) == 2 and "openvino f32" in model["output_error"]
        assert all(f"  {e['text']}" in printed for e in model["output_error"].values())
