"""On a machine with an NVIDIA GPU: the CUDA bundle runs there and matches the reference saved at
export (ONNX Runtime on the CPU). Skipped where TVM sees no CUDA device (the usual case here)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

tvm = pytest.importorskip("tvm")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not tvm.cuda(0).exist, reason="no CUDA device visible to TVM")]


@pytest.mark.parametrize("spec", ["small_cnn", "matmul:M=256,N=256,K=256"])
def test_cuda_bundle_runs_on_the_gpu(tmp_path, spec):
    from export import export_workload

    arch = "sm_" + tvm.cuda(0).compute_version.replace(".", "")
    report = export_workload(spec, f"cuda:{arch}", tmp_path / "b", layers=False)
    assert report.cuda.unbound == ()
    assert report.verification is not None and report.verification.ok, report.verification.summary()
    out = tmp_path / "gpu.json"
    proc = subprocess.run([sys.executable, "-m", "export.gpu_check", str(report.folder), "--runs", "20",
                           "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert data["check"]["verified"] and data["median_s"] > 0
