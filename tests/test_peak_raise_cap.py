"""A kernel raises a FLOP peak by a quarter at most (issue 51's review): above
:data:`explorer.measure.figure_check.MAX_RAISE` times the peak its calibration measured, its FLOPs or its
time are wrong, not the machine; it raises nothing, its % peak is left blank and a note says why. The cap is
of the figure measured, never of a raise, so raises do not pile up; a profile then checks its next fastest
sure kernel."""

from __future__ import annotations

import importlib

import pytest

from explorer.measure import peak_check
from explorer.measure.families import FamilyPeak
from explorer.target.environment import hardware_fingerprint
from export.profile import TaskCost, checked_rows

cal_mod = importlib.import_module("explorer.measure.calibration")  # the package's `calibration` is the function
BF16 = (FamilyPeak("bf16", 1000.0, "bf16 AVX512-BF16 vdpbf16ps kernel, 16 chains", "bf16 AVX512-BF16", 1000.0),)


@pytest.fixture
def measured(tmp_path, monkeypatch) -> list:
    """A private calibration cache; every calibration measures fp32 400 GFLOPS (FMA kernel 400, numpy
    300) and bf16 1000 (counted per call); no memory of earlier re-checks."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(cal_mod, "_quiet_checked", {})
    monkeypatch.setattr(cal_mod, "_families_tried", set())
    monkeypatch.setattr(peak_check, "_recalibrated", {})
    calls = []
    monkeypatch.setattr(cal_mod, "measure_families", lambda repeats=5: BF16)
    monkeypatch.setattr(cal_mod, "measure_peaks", lambda: calls.append(1) or cal_mod.Calibration(
        hardware_fingerprint(), 400.0, 20.0, "now", cal_mod.CALIBRATION_VERSION, fma_gflops=400.0,
        fma_kernel="FMA kernel", numpy_gflops=300.0, families=BF16))
    return calls


def test_a_kernel_past_a_quarter_above_the_measured_peak_raises_nothing_and_reads_no_percent(measured):
    check = peak_check.within_peak(600.0, "m/miscounted", 400.0)  # 1.5 times: measured again (the same), then
    assert not check.trusted and check.peak_gflops == 400.0 and check.percent(600.0) is None
    assert check.note == ("m/miscounted at 600.0 GFLOPS is above 1.25 times the peak measured (400.0 GFLOPS), so "
                          "its FLOPs or its time are not what the peak counts: the peak stays 400.0 GFLOPS and its "
                          "% peak is left blank")
    stored = cal_mod.calibration()
    assert (stored.peak_gflops, stored.raised_by, len(measured)) == (400.0, "", 2)

    assert peak_check.within_peak(480.0, "m/conv", 400.0).peak_gflops == 480.0  # 1.2 times: raised
    assert cal_mod.calibration().raised_by == "m/conv"
    # 560 is under 1.25 times the raised 480, but above 1.25 times the 400 measured: raises do not pile up
    again = peak_check.within_peak(560.0, "m/dense", 480.0)
    assert not again.trusted and again.peak_gflops == 480.0 and "the peak stays 480.0 GFLOPS" in again.note
    assert (cal_mod.calibration().peak_gflops, cal_mod.calibration().raised_by) == (480.0, "m/conv")


def test_a_familys_cap_is_of_its_own_measured_peak(measured):
    check = peak_check.within_peak(1300.0, "m/conv2d_bf16", family="bf16")
    assert not check.trusted and "above 1.25 times the bf16 peak measured (1000.0 GFLOPS)" in check.note
    assert cal_mod.calibration().peak_for("bf16") == 1000.0
    assert peak_check.within_peak(1250.0, "m/conv2d_bf16", family="bf16").peak_gflops == 1250.0  # the cap itself


def test_a_profile_checks_its_next_sure_kernel_when_the_fastest_is_not_trusted(measured):
    """conv's FLOPs miscounted (600 GFLOPS, 1.5 times the peak): it raises nothing, lifts no roofline, and its %
    peak is blank with a note of its own (it is sure, not short); dense, sure at 450, raises the peak to its figure."""
    tasks = [TaskCost("m/conv", ("conv",), 600_000_000, 4_000_000), TaskCost("m/dense", ("dense",), 225_000_000,
                                                                             4_000_000)]
    calls = {"conv": {"seconds": 1e-3, "calls": 1}, "dense": {"seconds": 0.5e-3, "calls": 1}}
    checked = checked_rows(tasks, calls, 0.0, peak_gflops=400.0, memory=None)
    by = {k.task: k for k in checked.rows.kernels}
    assert checked.peak_gflops == 450.0 and cal_mod.calibration().raised_by == "m/dense"
    assert by["m/conv"].percent_of_peak is None and by["m/dense"].percent_of_peak == pytest.approx(100.0)
    assert checked.unsure == 0 and len(checked.peak_notes) == 2
    assert checked.rows.roofline_peak_gflops == 450.0  # conv's 600 lifts no roofline (it would to 562.5)
    assert "m/conv at 600.0 GFLOPS" in checked.peak_notes[0] and "measured by m/dense" in checked.peak_notes[1]


def test_a_measurement_past_the_cap_reads_no_percent_of_peak():
    """``schedx measure`` and the Schedule page read ``MeasureResult.percent_of_peak``: a figure the check
    did not trust (past the cap) shows none there either, only the note (it read 150% before)."""
    from explorer.measure.result import MeasureResult
    from store.outcome import Outcome

    result = MeasureResult(Outcome.OK, flops=10**9, target="llvm", gflops=600.0)
    assert result.with_peaks(400.0, 20.0, "above", trusted=False).percent_of_peak is None
    assert result.with_peaks(400.0, 20.0, "above", trusted=False).to_dict()["percent_of_peak"] is None
    assert result.with_peaks(400.0, 20.0).percent_of_peak == 150.0
