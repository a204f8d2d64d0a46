"""ResNet-18 for CPU: export and verify within the issue's 60 s, and for sm_90 with the CUDA checks (slow)."""

from __future__ import annotations

import shutil
import time

import pytest

from export import export_workload

pytestmark = pytest.mark.slow


def test_resnet18_cpu_export_and_verify_within_60_s(tmp_path):
    start = time.perf_counter()
    report = export_workload("resnet18", "cpu", tmp_path / "r18")
    seconds = time.perf_counter() - start
    assert report.ok and report.verification.ok and report.verification.reference == "ONNX Runtime"
    assert report.layers.ok and len(report.layers.layers) > 60
    assert seconds < 60, report.seconds


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_resnet18_for_sm_90(tmp_path):
    report = export_workload("resnet18", "cuda:sm_90", tmp_path / "r18-sm90", layers=False)
    assert report.cuda.ok, report.cuda.summary()
    assert report.cuda.unbound == () and report.cuda.prim_funcs == len(report.manifest["tasks"])
