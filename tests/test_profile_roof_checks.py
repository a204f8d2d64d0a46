"""The profile's side of issue 51 on the Zen 5 bench: no row reads above 100 % of its peak or of its
roofline. A short kernel lifts no roof of another family; a figure above 100 % is left blank where it is
above (the other figure of the kernel stands); a sure kernel bound by its bytes above its roofline has the
memory roof measured again, then a tier raised, or its % roofline blank with a note of its own."""

from __future__ import annotations

import time

import pytest

from explorer.measure import cache_peak as cp
from explorer.measure import roof_check
from explorer.measure.memory_roof import MemoryRoof
from export.profile import KernelTime, Rows, TaskCost, checked_roof, checked_rows, kernel_rows, unsure_above_peak
from export.profile_text import run_notes

KB, MB = 2**10, 2**20
BENCH = MemoryRoof.of(34.7, l2_gbps=405.7, l2_bytes=2 * MB, l3_gbps=228.4, l3_bytes=32 * MB)


def test_bert_bf16s_short_kernels_lift_no_roof_and_read_no_figure_above_100():
    """``bench_models --precision bf16``: fast_softmax (fp32, under 1 % of the time) lifted the fp32 roof to
    617 GFLOPS as the fastest of its family's kernels alone; batch_dense_bf16 and it read above their peaks."""
    tasks = [TaskCost("b/dense_bf16", ("dense",), 453_181_440, 5_111_808, family="bf16"),
             TaskCost("b/batch_dense_bf16", ("bd",), 25_165_824, 1_179_648, family="bf16"),
             TaskCost("b/fast_softmax", ("sm",), 17_499_648, 1_572_864),
             TaskCost("b/layer_norm", ("ln",), 1_081_472, 792_576)]
    calls = {"dense": {"seconds": 0.626e-3, "calls": 1}, "bd": {"seconds": 25_165_824 / 965e9, "calls": 1},
             "sm": {"seconds": 17_499_648 / 913e9, "calls": 1}, "ln": {"seconds": 20e-6, "calls": 2}}
    rows = kernel_rows(tasks, calls, 0.0, peak_gflops=493.8, memory=BENCH, family_peaks={"bf16": 910.0})
    assert rows.roofline_peaks["fp32"] == 493.8  # fast_softmax (under 5 % of all the kernels' time) lifts nothing
    by = {k.task: k for k in rows.kernels}
    assert by["b/batch_dense_bf16"].percent_of_roofline > 100 and by["b/fast_softmax"].percent_of_roofline > 100
    blank, unsure = unsure_above_peak(rows)
    assert unsure == 2 and all((k.percent_of_roofline or 0) <= 100 and (k.percent_of_peak or 0) <= 100
                               for k in blank.kernels)
    assert blank.kernels[0] == rows.kernels[0]  # dense_bf16, under both: as it was
    assert checked_roof(rows.kernels, BENCH) == (BENCH, [], frozenset())  # compute-bound, or short: nothing checked


def _kernel(task, share, gflops, peak_pct, roof_pct):
    return KernelTime(task=task, funcs=(task,), calls=1, seconds=share, share=share, flops=1, gflops=gflops,
                      percent_of_peak=peak_pct, schedule="default", roofline_gflops=100.0 * gflops / roof_pct)


def test_each_figure_above_100_is_left_blank_alone_and_an_untrusted_kernel_is_not_called_short():
    above_peak = _kernel("m/mm", 0.01, 600.0, 120.0, 95.0)  # the roofline lifted past the peak by a sure kernel
    above_roof = _kernel("m/add", 0.02, 50.0, 10.0, 130.0)
    untrusted = _kernel("m/slice", 0.3, 80.0, 16.0, 400.0)  # sure, but a slice counted whole
    under = _kernel("m/conv", 0.67, 400.0, 80.0, 90.0)
    rows, short = unsure_above_peak(Rows((under, above_peak, above_roof, untrusted), 1.0, 0.0, 500.0),
                                    frozenset({"m/slice"}))
    figures = [(k.percent_of_peak, k.percent_of_roofline and round(k.percent_of_roofline)) for k in rows.kernels]
    assert figures == [(80.0, 90), (None, 95), (10.0, None), (16.0, None)] and short == 2
    # only the % is blank: the roofline itself stands (in the JSON too), and the kernel has no headroom
    assert [k.roofline_gflops for k in rows.kernels] == [k.roofline_gflops for k in (under, above_peak, above_roof,
                                                                                      untrusted)]
    assert rows.kernels[2].headroom_s == 0.0 and rows.kernels[2].to_dict()["percent_of_roofline"] is None
    assert rows.kernels[2].to_dict()["roofline_gflops"] == pytest.approx(50.0 / 1.3)
    assert "2 short kernel(s)" in run_notes(instrumented_s=1.0, plain_s=1.0, per_call=0.0, kernels=rows.kernels,
                                            rows_s=1.0, unsure=short)[-1]


@pytest.fixture
def stored(tmp_path, monkeypatch) -> cp.CachePeak:
    """This machine's cache figures (the Zen 5 guest's), measured again as the same."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("SCHEDX_LOCK_DIR", str(tmp_path / "lock"))  # this test's own measuring lock
    monkeypatch.setattr(roof_check, "_rechecked", {})
    peak = cp.save(cp.CachePeak(cp.hardware_fingerprint(), 500.0, 2 * MB, l3_gbps=226.0, l3_bytes=32 * MB,
                                l1_gbps=1352.6, l1_bytes=96 * KB, memory_gbps=34.7, sizes=cp.cache_sizes()))
    monkeypatch.setattr(cp, "measure_cache_peak", lambda: peak)
    return peak


def _model(add_gbps: float, conv_s: float = 20e-6):
    tasks = [TaskCost("m/conv", ("conv",), 3_000_000, 4 * MB), TaskCost("m/add", ("add",), 262_144, MB)]
    return tasks, {"conv": {"seconds": conv_s, "calls": 1}, "add": {"seconds": MB / add_gbps / 1e9, "calls": 1}}


def test_a_profiles_sure_kernel_bound_by_its_bytes_above_its_roof_raises_its_tier(stored):
    memory = stored.memory_roof(34.7)
    rate = 1.1 * memory.gbps_for(MB)
    tasks, calls = _model(rate, conv_s=1e-3)  # the add under 5 % of the time: short, nothing checked
    checked = checked_rows(tasks, calls, 0.0, peak_gflops=493.8, memory=memory)
    assert (checked.memory, checked.roof_notes, checked.unsure) == (memory, (), 1)
    assert cp.cache_peak() == stored

    tasks, calls = _model(rate)  # the add now a tenth of the time: sure
    checked = checked_rows(tasks, calls, 0.0, peak_gflops=493.8, memory=memory)
    raised = checked.memory.figure("L2")
    assert 500.0 < raised <= 1.25 * 500.0 and checked.memory.gbps_for(MB) == pytest.approx(rate, rel=1e-3)
    assert len(checked.roof_notes) == 1 and f"L2 bandwidth raised to {raised:.0f} GB/s" in checked.roof_notes[0]
    add = next(k for k in checked.rows.kernels if k.task == "m/add")
    assert add.share >= 0.05 and 99.0 < add.percent_of_roofline <= 100.0 and checked.unsure == 0
    assert cp.cache_peak().raised == (("L2", "m/add", 500.0),) and not checked.peak_notes


def test_a_profile_read_against_another_machines_roof_raises_it_in_the_answer_alone(stored):
    memory = stored.memory_roof(34.7)
    tasks, calls = _model(1.1 * memory.gbps_for(MB))  # the add a tenth of the time: sure, above its roof
    checked = checked_rows(tasks, calls, 0.0, peak_gflops=493.8, memory=memory, hardware="another machine")
    assert 500.0 < checked.memory.figure("L2") <= 1.25 * 500.0 and "L2 bandwidth raised" in checked.roof_notes[0]
    assert cp.cache_peak() == stored  # not this machine's figures: neither measured again nor stored


def test_a_profiles_sure_kernel_far_above_its_roof_has_its_roofline_blank_and_a_note_of_its_own(stored):
    memory = stored.memory_roof(34.7)
    tasks, calls = _model(2.0 * memory.gbps_for(MB), conv_s=10e-6)  # the add a tenth of the time: sure
    roof_check._rechecked[cp.hardware_fingerprint()] = time.monotonic()  # measured just now
    checked = checked_rows(tasks, calls, 0.0, peak_gflops=493.8, memory=memory)
    add = next(k for k in checked.rows.kernels if k.task == "m/add")
    assert add.percent_of_roofline is None and add.percent_of_peak is not None and checked.unsure == 0
    assert checked.memory == memory and "m/add moved its 1.0 MB" in checked.roof_notes[0]
    assert "its % roofline is left blank" in checked.roof_notes[0] and cp.cache_peak() == stored
