"""Build, verify and measure: results as data, failures as data, isolation in a child process."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import tvm
from tvm.script import tirx as T

from explorer.kernels import builtin_kernel, make_kernel
from explorer.measure import MeasureResult, calibration, check, measure
from explorer.measure.calibration import Calibration, measure_peaks
from explorer.schedule.session import ScheduleSession
from explorer.schedule.steps import Step

PEAKS = Calibration("test", 200.0, 40.0, "now")


def test_naive_matmul_is_measured_verified_and_ranked_against_the_peak():
    k = builtin_kernel("matmul", M=64, N=64, K=64)
    r = measure(k, repeat=3, min_repeat_s=0.01, peaks=PEAKS)
    assert r.status == "ok" and r.verified and r.max_rel_error < 1e-5
    assert len(r.latencies) == 3 and r.number >= 1 and r.median_s > 0
    assert r.gflops == pytest.approx(k.info.flops / r.median_s / 1e9)
    assert r.percent_of_peak == pytest.approx(100 * r.gflops / 200.0)
    assert r.roofline_gflops == pytest.approx(min(200.0, r.arithmetic_intensity * 40.0))
    assert r.environment["hardware"] and r.environment["tvm_version"].startswith("0.27")
    assert MeasureResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r


def _wrong_matmul():
    @T.prim_func(s_tir=True)
    def wrong(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
        for i, j, k in T.grid(16, 16, 16):
            with T.sblock("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vj, vk]  # B transposed: the wrong product
    return wrong


def test_verification_catches_a_wrong_kernel():
    k = builtin_kernel("matmul", M=16, N=16, K=16)
    r = measure(k, tvm.IRModule({"main": _wrong_matmul()}), isolate=False, peaks=PEAKS)
    assert r.status == "verify_failed" and r.verified is False and r.gflops is None
    assert "differs from the reference" in r.error
    ok, why = check(k, tvm.IRModule({"main": _wrong_matmul()}))
    assert not ok and why


def test_a_kernel_that_crashes_its_process_becomes_a_failed_result():
    @T.prim_func(s_tir=True)
    def crash(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
        for i in range(16):
            with T.sblock("B"):
                vi = T.axis.remap("S", [i])
                B[vi * 100000000] = A[vi]  # far out of bounds: SIGSEGV

    k = make_kernel(crash, name="crash", title="crash", source="test", spec="crash", params={})
    r = measure(k, repeat=1, peaks=PEAKS, timeout=120)
    assert r.status in ("run_error", "build_error") and r.gflops is None
    if r.status == "run_error":
        assert "crashed" in r.error or "SIG" in r.error or r.error


def test_a_hanging_kernel_times_out():
    k = builtin_kernel("matmul", M=512, N=512, K=512)
    r = measure(k, repeat=50, min_repeat_s=1.0, peaks=PEAKS, timeout=3)
    assert r.status == "timeout" and "3 s" in r.error


def test_a_schedule_that_changes_the_interface_is_refused_with_advice():
    k = builtin_kernel("matmul", M=32, N=32, K=32)
    s = ScheduleSession(k.func)
    s.apply(Step("transform_layout", {"block": "C", "buffer": "read:1", "index_map": "lambda k, j: (j // 16, k, j % 16)"}))
    r = measure(k, s.mod, peaks=PEAKS)
    assert r.status == "build_error" and "cache_read" in r.error


def test_the_hand_schedule_file_beats_naive_by_far():
    from explorer.schedule.steps import load_steps

    k = builtin_kernel("matmul", M=128, N=128, K=128)
    s = ScheduleSession(k.func)
    s.apply_all(load_steps("assets/steps/matmul_512.json"))
    ok, why = check(k, s.mod)
    assert ok, why


def test_calibration_is_measured_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    small = replace(measure_peaks(matmul_n=256, copy_mb=8, fma=False), provisional=False)  # final, even if busy
    assert small.peak_gflops > 0 and small.peak_gbps > 0
    import importlib

    cal_mod = importlib.import_module("explorer.measure.calibration")

    monkeypatch.setattr(cal_mod, "measure_peaks", lambda: small)
    first = calibration()
    monkeypatch.setattr(cal_mod, "measure_peaks", lambda: pytest.fail("measured twice"))
    assert calibration() == first
    assert list((tmp_path / "schedx" / "calibration").glob("*.json"))


def test_compare_accepts_an_outputs_quantization_steps_and_the_float_rule_elsewhere():
    """One comparison for schedx and the bundle's run.py: an int8 output one step off passes within
    its steps; an output without a step keeps the float rule."""
    import numpy as np

    from explorer.measure.verify import compare

    ref = [np.array([0.2627451, 1.0], "float32"), np.array([1.0, 2.0], "float32")]
    out = [np.array([0.26666668, 1.0], "float32"), np.array([1.0, 2.0 + 1e-5], "float32")]
    assert not compare(out, ref)[0]
    assert compare(out, ref, [8 / 255, None])[0]
    assert not compare([out[0], np.array([1.0, 2.1], "float32")], ref, [8 / 255, None])[0]


def test_the_schedule_pages_roofline_labels_each_decade_once_and_keeps_its_points_inside():
    """Its log axes repeated 2 and 5 between the decades, and a point's label near the right edge
    was clipped."""
    from types import SimpleNamespace

    from app.components import roofline_figure

    r = SimpleNamespace(peak_gflops=184.0, peak_gbps=20.0, arithmetic_intensity=5.0, gflops=40.0, ok=True)
    fig = roofline_figure(r, SimpleNamespace(ok=True, gflops=2.0))
    assert fig.layout.xaxis.dtick == 1 and fig.layout.yaxis.dtick == 1
    roof = fig.data[0]
    assert roof.x[0] < 5.0 < roof.x[-1] and roof.x[0] < 184 / 20 < roof.x[-1]  # the point and the ridge inside
    assert all(t.textposition == "top center" and t.cliponaxis is False for t in fig.data[1:])
