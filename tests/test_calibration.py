"""The machine's calibrated peak: the compute-peak kernel built for each ISA (FMAs of the target's
width in a loop that touches no memory), run on this host only; the calibration's provisional
state on a busy machine; and "no kernel above 100 % of the peak" with fake numbers. No test
asserts a speed."""

from __future__ import annotations

import importlib
import json
import re
from dataclasses import replace

import numpy as np
import pytest

from explorer.measure.families import FamilyPeak
from explorer.measure.machine_load import MachineLoad
from explorer.measure import peak_check, peak_kernel
from explorer.schedule.codegen import asm_stats, hot_loop
from explorer.target import host_target, parse_target
from explorer.target.host import host_cpu

cal_mod = importlib.import_module("explorer.measure.calibration")  # the package's `calibration` is the function
FAMILY_PEAKS = (FamilyPeak("bf16", 1000.0, "bf16 AMX tdpbf16ps kernel, 4 tiles", "bf16 AMX", 1000.0),
                FamilyPeak("int8", 2000.0, "int8 AMX tdpbusd kernel, 4 tiles", "int8 AMX", 2000.0))
HOST = host_target()
x86_only = pytest.mark.skipif(HOST.arch != "x86_64", reason="spells x86 CPUs as this machine's (cpu:MCPU)")

# spelling -> (fp32 lanes, vector bits, an FMA on those registers as LLVM writes it)
ISAS = {
    "cpu:skylake-avx512": (16, 512, r"vfmadd\d+ps\s+%zmm\d+, %zmm\d+, %zmm\d+"),
    "cpu:x86-64-v3": (8, 256, r"vfmadd\d+ps\s+%ymm\d+, %ymm\d+, %ymm\d+"),
    "cpu:znver3": (8, 256, r"vfmadd\d+ps\s+%ymm\d+, %ymm\d+, %ymm\d+"),
    "aarch64:cortex-a76": (4, 128, r"fmla\s+v\d+\.4s, v\d+\.4s, v\d+\.(4s|s\[\d\])"),
}


@pytest.mark.parametrize("spec", [pytest.param(s, marks=x86_only) if s.startswith("cpu:") else s for s in ISAS])
def test_the_peak_kernel_builds_to_register_fmas_of_the_targets_width(spec):
    """Built only (nothing runs): every accumulator is an FMA of the target's vector width in the
    hot loop, which reads and writes no memory (the accumulators stay in registers)."""
    lanes, bits, fma = ISAS[spec]
    target = parse_target(spec)
    kernel = peak_kernel.for_target(target)
    assert (kernel.lanes, kernel.fused) == (lanes, True)
    assert 12 <= kernel.chains <= peak_kernel.MAX_CHAINS  # >= 2 FMA units x 4 cycles, in the registers
    asm = peak_kernel.assembly(kernel, target)
    stats = asm_stats(asm, target.asm)
    assert max(stats.vector) == bits, stats.summary()
    loop = hot_loop(asm, target.asm)
    body = asm.splitlines()[loop.first - 1:loop.last]
    fmas = [line for line in body if target.asm.is_fma(line)]
    assert fmas and all(re.search(fma, line) for line in fmas), "\n".join(body)
    assert len(fmas) >= kernel.chains and len(fmas) % kernel.chains == 0, "\n".join(body)
    memory = [line for line in body if re.search(r"\(%|\[(x|sp)", line)]
    assert not memory, "\n".join(memory)


@x86_only
def test_a_target_without_fma_multiplies_and_adds():
    kernel = peak_kernel.for_target(parse_target("cpu:x86-64"))  # SSE2 only
    assert not kernel.fused and kernel.label.startswith("mul+add kernel SSE 4 lanes")
    assert kernel.flops == 2 * 4 * kernel.chains * kernel.iters * kernel.cores


def test_the_peak_kernel_computes_its_accumulators_on_this_host():
    """Run here (whatever ISA this machine has): every accumulator holds y * chain + iters * x * y."""
    if not HOST.runs_here or not HOST.vector_width:
        pytest.skip(f"this machine cannot run its own target ({HOST.why_not_here() or 'no vector width'})")
    import tvm

    kernel = replace(peak_kernel.for_target(HOST), iters=1000)
    out = tvm.runtime.tensor(np.zeros((kernel.cores, kernel.chains, kernel.lanes), "float32"))
    peak_kernel.build(kernel, HOST).jit()["main"](0.5, 0.25, out)
    expected = 0.25 * np.arange(kernel.chains, dtype=np.float32)[None, :, None] + 1000 * 0.125
    np.testing.assert_allclose(out.numpy(), np.broadcast_to(expected, out.shape), rtol=1e-6)
    assert all(g > 0 for g in peak_kernel.time_kernel(kernel, HOST, repeats=2, min_repeat_s=0.001))


def test_the_peak_kernel_is_timed_in_a_child_with_its_label():
    if not HOST.runs_here or not HOST.vector_width:
        pytest.skip(f"this machine cannot run its own target ({HOST.why_not_here() or 'no vector width'})")
    found = peak_kernel.measure_in_child(repeats=2)
    assert "error" not in found, found
    assert found["gflops"] == max(found["runs"]) > 0
    assert found["kernel"]["label"] == peak_kernel.for_target(HOST).label


# -- the calibration: provisional on a busy machine, measured again when quiet ---------------------

def _load(monkeypatch, other_cores: float) -> None:
    import explorer.measure.machine_load as ml

    monkeypatch.setattr(ml, "machine_load", lambda sample_s=0.3: MachineLoad(other_cores, 2))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private calibration cache, a fast calibration (numpy 128^3, an 8 MB copy, no FMA child, the
    families' figures given)
    counted per call, and no memory of earlier re-checks."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(cal_mod, "_quiet_checked", {})
    monkeypatch.setattr(cal_mod, "_families_tried", set())
    monkeypatch.setattr(peak_check, "_recalibrated", {})
    calls = []
    real = cal_mod.measure_peaks

    def fast():
        calls.append(1)
        return replace(real(128, 8, repeats=1, fma=False, dots=False), families=FAMILY_PEAKS)

    monkeypatch.setattr(cal_mod, "measure_peaks", fast)
    monkeypatch.setattr(cal_mod, "measure_families", lambda repeats=5: FAMILY_PEAKS)
    return calls


def test_a_calibration_on_a_busy_machine_is_provisional_and_measured_again_when_quiet(cache, monkeypatch):
    _load(monkeypatch, 1.6)
    first = cal_mod.calibration()
    assert first.provisional and first.other_cores == 1.6 and first.load_avg is not None and len(cache) == 1
    assert "provisional" in first.summary()
    stored = json.loads(next((cal_mod.cache_dir()).glob("*.json")).read_text())
    assert stored["provisional"] and stored["version"] == cal_mod.CALIBRATION_VERSION == 5
    monkeypatch.setattr(cal_mod, "_quiet_checked", {})
    assert cal_mod.calibration() == first and len(cache) == 1  # still busy: kept
    _load(monkeypatch, 0.0)
    assert cal_mod.calibration() == first and len(cache) == 1  # looked at the load a moment ago: kept
    monkeypatch.setattr(cal_mod, "_quiet_checked", {})
    again = cal_mod.calibration()
    assert not again.provisional and len(cache) == 2
    assert cal_mod.calibration() == again and len(cache) == 2  # final: never measured again


def test_an_older_calibration_version_is_measured_again(cache, monkeypatch):
    _load(monkeypatch, 0.0)
    old = replace(cal_mod.calibration(), version=2)
    cal_mod.save(old)
    assert cal_mod.calibration().version == cal_mod.CALIBRATION_VERSION and len(cache) == 2


def test_another_cpus_calibration_under_the_same_fingerprint_is_measured_again_keeping_none_of_it(cache,
                                                                                                  monkeypatch):
    """Zen 4 and Zen 5 guests both read "AMD EPYC", avx512, 2 cores: a calibration cached by one (a raised
    peak with it) was the other's until LLVM's name of the CPU joined the key."""
    _load(monkeypatch, 0.0)
    mine = cal_mod.calibration()
    assert mine.cpu == host_cpu().llvm_cpu and len(cache) == 1
    other = replace(mine, cpu="znver4" if mine.cpu != "znver4" else "znver5", peak_gflops=9999.0, raised_by="k")
    cal_mod.save(other)
    again = cal_mod.calibration()
    assert len(cache) == 2 and again.cpu == mine.cpu and again.peak_gflops != 9999.0 and again.raised_by == ""
    assert cal_mod.raise_peak(other, 12345.0, "k2").peak_gflops == 12345.0  # in the answer only: not stored
    assert cal_mod.calibration() == again and len(cache) == 2
    if mine.cpu:  # (a CPU LLVM cannot name is "" both ways)
        cal_mod.save(replace(again, cpu=""))  # cached before the CPU's name was kept: measured again once
        assert cal_mod.calibration().cpu == mine.cpu and len(cache) == 3


def test_the_summary_names_the_fma_kernel_numpy_and_the_copy():
    cal = cal_mod.Calibration("hw", 362.1, 20.5, "now", 3, fma_gflops=362.1, fma_kernel="FMA kernel AVX512 16 lanes",
                              numpy_gflops=341.0, load_avg=0.1)
    assert cal.summary() == ("peak: 362.1 GFLOPS (FMA kernel AVX512 16 lanes 362.1 / numpy sgemm 341.0), "
                             "copy 20.5 GB/s, load 0.10")
    assert cal.source == "FMA kernel AVX512 16 lanes"
    assert replace(cal, fma_gflops=None, fma_kernel="no LLVM").source == "numpy sgemm 2048"


# -- no kernel above 100 % -------------------------------------------------------------------------

def _fixed_peaks(monkeypatch, *figures: float) -> list:
    """Calibrations measure ``figures`` in turn (this machine's fingerprint, quiet)."""
    from explorer.target.environment import hardware_fingerprint

    calls = []

    def fake():
        calls.append(1)
        return cal_mod.Calibration(hardware_fingerprint(), figures[len(calls) - 1], 20.0, "now",
                                   cal_mod.CALIBRATION_VERSION, numpy_gflops=figures[len(calls) - 1],
                                   cpu=host_cpu().llvm_cpu)

    monkeypatch.setattr(cal_mod, "measure_peaks", fake)
    return calls


def test_a_figure_under_the_peak_changes_nothing(cache, monkeypatch):
    calls = _fixed_peaks(monkeypatch, 104.0)
    check = peak_check.within_peak(90.0, "matmul 1024")
    assert (check.peak_gflops, check.note, len(calls)) == (104.0, "", 1)
    assert check.percent(90.0) == pytest.approx(100 * 90 / 104)


def test_a_figure_above_the_peak_recalibrates_and_is_under_the_new_one(cache, monkeypatch):
    calls = _fixed_peaks(monkeypatch, 104.0, 362.0)
    check = peak_check.within_peak(322.0, "matmul 1024")
    assert check.peak_gflops == 362.0 and len(calls) == 2
    assert "above the calibrated peak of 104.0 GFLOPS: measured again, the peak is now 362.0" in check.note
    assert check.percent(322.0) <= 100


def test_a_figure_still_above_after_recalibrating_raises_the_stored_peak_and_says_so(cache, monkeypatch):
    calls = _fixed_peaks(monkeypatch, 104.0, 110.0, 100.0)
    check = peak_check.within_peak(130.04, "matmul:M=1024,N=1024,K=1024")  # within 1.25 times the 110 measured
    assert check.note == ("above the calibrated peak: peak raised to 130.1 GFLOPS measured by "
                          "matmul:M=1024,N=1024,K=1024")
    assert check.percent(130.04) <= 100.0 and len(calls) == 2
    stored = cal_mod.calibration()
    assert stored.peak_gflops == 130.1 and stored.raised_by == "matmul:M=1024,N=1024,K=1024"
    assert "measured by matmul" in stored.summary()
    # a second kernel above it in the same process: raised at once, not measured again
    assert peak_check.within_peak(135.0, "conv").peak_gflops == 135.0 and len(calls) == 2
    # a later measurement that comes out lower keeps the figure a kernel reached
    again = cal_mod.calibration(refresh=True)
    assert (again.peak_gflops, again.raised_by, len(calls)) == (135.0, "conv", 3)


def test_another_machines_calibration_is_raised_in_the_answer_only(cache, monkeypatch):
    calls = _fixed_peaks(monkeypatch, 500.0)
    other = cal_mod.Calibration("elsewhere", 100.0, 10.0, "then", cal_mod.CALIBRATION_VERSION)
    check = peak_check.within_peak(150.0, "k", peaks=other)
    assert check.peak_gflops == 150.0 and check.calibration.raised_by == "k" and not calls
    assert not list(cal_mod.cache_dir().glob("*.json"))


def test_a_measurement_faster_than_its_peak_reads_at_most_100_percent():
    from explorer.kernels import builtin_kernel
    from explorer.measure import measure

    tiny = cal_mod.Calibration("test", 0.001, 1.0, "now", cal_mod.CALIBRATION_VERSION)
    r = measure(builtin_kernel("matmul", M=32, N=32, K=32), repeat=2, min_repeat_s=0.001, isolate=False, peaks=tiny)
    assert r.ok and r.percent_of_peak <= 100.0 and r.peak_gflops >= r.gflops
    assert r.peak_note.startswith("above the calibrated peak: peak raised to") and "matmul" in r.peak_note
    assert r.environment["peak_gflops"] == r.peak_gflops


def test_a_profiles_sure_kernels_raise_the_peak_and_short_ones_above_it_are_left_blank(monkeypatch):
    from export.profile import KernelTime, Rows, checked_peak, unsure_above_peak

    def k(task, share, gflops, pct=None):
        return KernelTime(task=task, funcs=(task,), calls=1, seconds=share, share=share, flops=1, gflops=gflops,
                          percent_of_peak=pct, schedule="default")

    seen = []
    monkeypatch.setattr(peak_check, "within_peak", lambda g, kernel, peak, family="fp32": seen.append((g, kernel, peak)) or
                        peak_check.PeakCheck(g, f"raised by {kernel}"))
    sure, short = k("m/conv", 0.6, 150.0), k("m/pool", 0.01, 900.0)
    assert checked_peak((sure, short, k("m/mm", 0.39, 90.0)), 104.0) == (150.0, "raised by m/conv")
    assert seen == [(150.0, "m/conv", 104.0)]  # the short kernel's figure is not trusted to raise it
    assert checked_peak((k("m/mm", 0.9, 90.0), short), 104.0) == (104.0, "")
    rows, blanked = unsure_above_peak(Rows((k("m/conv", 0.6, 150.0, 100.0), k("m/pool", 0.01, 900.0, 600.0)),
                                            1.0, 0.0, 150.0))
    assert blanked == 1 and [r.percent_of_peak for r in rows.kernels] == [100.0, None]
