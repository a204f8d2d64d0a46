"""ResNet-18 for CPU: export and verify within the issue's 60 s, and for sm_90 with the CUDA checks (slow)."""

from __future__ import annotations

import shutil

import pytest

from export import export_workload

pytestmark = pytest.mark.slow


def test_resnet18_cpu_export_and_verify(tmp_path):
    """(How long it takes: benchmarks.bench_models prints each export's seconds.)"""
    report = export_workload("resnet18", "cpu", tmp_path / "r18")
    assert report.ok and report.verification.ok and report.verification.reference == "ONNX Runtime"
    assert report.layers.ok and len(report.layers.layers) > 60


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_resnet18_for_sm_90(tmp_path):
    report = export_workload("resnet18", "cuda:sm_90", tmp_path / "r18-sm90", layers=False)
    assert report.cuda.ok, report.cuda.summary()
    assert report.cuda.unbound == () and report.cuda.prim_funcs == len(report.manifest["tasks"])
