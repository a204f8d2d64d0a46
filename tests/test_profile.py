"""Profile: time per fused kernel of a built model (in a fresh process), that adds up to the
model's time, with where each schedule came from, beside ONNX Runtime's per-node profile."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from app.cli import cli
from explorer.measure.memory_roof import MemoryRoof
from export.profile import PEAK_SHARE, profile_workload

pytestmark = pytest.mark.heavy  # real builds or searches: left out of make test-fast


@pytest.fixture(scope="module")
def small_cnn_profile():
    return profile_workload("small_cnn", runs=5)


def test_rows_add_up_to_the_models_time(small_cnn_profile):
    p = small_cnn_profile
    assert p.kernels and all(k.seconds >= 0 for k in p.kernels)
    assert [k.seconds for k in p.kernels] == sorted((k.seconds for k in p.kernels), reverse=True)
    assert sum(k.share for k in p.kernels) == pytest.approx(1.0)
    # the instrument's own cost per timed call is taken out: the rows are the plain run's time
    # (within 25%), unless other work on the machine inflated the parallel kernels (then it says so)
    assert p.instrument_s >= 0 and "taken out of every row" in p.notes[0]
    assert p.busy or 0.75 * p.end_to_end_s <= p.kernels_s + p.other_s <= 1.25 * p.end_to_end_s, p.notes
    conv = [k for k in p.kernels if "conv2d" in k.task]
    assert conv and conv[0].gflops and conv[0].calls == 1 and conv[0].schedule == "default"
    # issue 51: a kernel whose time is sure never reads above its roofline (the bandwidth of where its bytes fit)
    assert all((k.percent_of_roofline or 0.0) <= 100.0 for k in p.kernels if k.share >= PEAK_SHARE), p.kernels
    assert p.ort and p.ort_s and {n.op_type for n in p.ort} & {"Conv"}


def test_records_are_named_in_the_profile(tmp_path):
    from export.schedules import TaskSchedule

    steps = ({"primitive": "parallel", "args": {"loop": "conv2d_nhwc/yy"}},)
    task = "small_cnn/fused_transpose_conv2d_add_relu"  # conv + folded batch-norm + relu
    p = profile_workload("small_cnn", runs=2, ort=False,
                         schedules={task: TaskSchedule(steps=steps, record_id=41, source="manual")})
    row = next(k for k in p.kernels if k.task == task)
    assert row.schedule == "record" and row.record_id == 41


def test_cli_profile_json_and_table(tmp_path):
    result = CliRunner().invoke(cli, ["profile", "small_cnn", "--no-db", "--runs", "2", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{"):])
    assert data["kernels"] and data["end_to_end_s"] > 0
    assert data["headroom_s"] is not None and 0 <= data["headroom_s"] <= data["kernels_s"]
    assert all(k["roofline_gflops"] for k in data["kernels"] if k["flops"])
    table = CliRunner().invoke(cli, ["profile", "small_cnn", "--no-db", "--runs", "2", "--top", "3"])
    assert table.exit_code == 0 and "schedx tune small_cnn/" in table.output and "--minutes" in table.output
    assert "headroom: " in table.output and "%roof" in table.output


def test_the_tune_commands_a_profile_suggests_name_a_model_file_by_its_path(tmp_path):
    """Copied as printed, the suggested command must find the kernel: ``net/fused_...`` means nothing
    outside the folder of ``net.onnx``; the path the user gave does."""
    import shlex

    import onnx

    from explorer.models.zoo import build_onnx
    from explorer.workload import load_kernel

    path = tmp_path / "my net.onnx"
    onnx.save(build_onnx("small_cnn"), path)
    table = CliRunner().invoke(cli, ["profile", str(path), "--no-db", "--runs", "2", "--top", "3"])
    assert table.exit_code == 0, table.output
    lines = [line.strip() for line in table.output.splitlines() if line.strip().startswith("schedx tune ")]
    assert lines, table.output
    spec = shlex.split(lines[0])[2]
    assert spec.startswith(f"{path}/") and "--minutes" in lines[0]
    assert load_kernel(spec).info.flops > 0
    bad = CliRunner().invoke(cli, ["profile", "small_cnn", "--target", "cpu:nosuchcpu"])
    assert bad.exit_code == 1 and "LLVM does not know" in bad.output


def test_the_instruments_cost_is_shared_out_by_call():
    from export.profile import instrument_cost

    calls = {"conv": {"seconds": 3e-5, "calls": 1}, "relu": {"seconds": 2e-5, "calls": 2},
             "vm.alloc": {"seconds": 1e-5, "calls": 3}}
    # 6e-5 timed, 3e-5 plain: past 3.3e-6 per call the allocations' row is at zero, so the conv's
    # and relus' rows give the rest: 5e-5 - 3c = 3e-5
    assert instrument_cost(calls, 3e-5) == pytest.approx(2e-5 / 3)
    # a row cannot go below zero: the cost is the one that still brings the rest to the plain run
    cost = instrument_cost(calls, 1.5e-5)  # at 1e-5 per call: conv 2e-5, relu 0, alloc 0 (clamped)
    assert cost == pytest.approx(1.5e-5, rel=1e-6)  # conv 3e-5 - 1.5e-5 = 1.5e-5, the rest at zero
    assert instrument_cost(calls, 1e-3) == 0.0  # rows under the plain run: nothing to take out
    assert instrument_cost({}, 1e-3) == 0.0


def test_a_profile_on_a_busy_machine_says_so():
    """Two busy processes beside the profile (as a user's build or browser would be): the
    profile says the machine was busy and how, instead of rows that silently disagree."""
    import subprocess
    import sys

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        p = profile_workload("small_cnn", runs=3, ort=False)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert p.busy and any("the machine was busy" in n and "cores busy" in n for n in p.notes), p.notes


@pytest.mark.slow  # two busy processes slow every timing (112 s on a loaded 2-core machine); the profile test beside it checks the same note
def test_a_bench_on_a_busy_machine_says_so():
    import subprocess
    import sys

    from export.bench import bench_workload

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        report = bench_workload("matmul:M=64,N=64,K=64", runs=5, budget_s=2.0)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert any("the machine was busy" in n for n in report.notes), report.notes
    assert "the machine was busy" in report.table()


def test_onnx_runtimes_end_to_end_time_comes_from_a_session_that_does_not_profile(monkeypatch):
    """ONNX Runtime's profiler costs time per node (it doubled a 0.32-ms LSTM tagger): its nodes give
    the per-node table, a plain session the end-to-end time that the profile's ratio uses."""
    import explorer.models.ort_run as ort_run
    from explorer.models.zoo import build_onnx
    from explorer.workload import load_workload
    from export.profile import ort_profile

    timed = []

    def plain_latency(session, inputs, **kw):
        timed.append(session.get_session_options().enable_profiling)
        return 0.123

    monkeypatch.setattr(ort_run, "ort_latency", plain_latency)
    workload = load_workload("small_cnn")
    nodes, seconds = ort_profile(build_onnx("small_cnn"), workload.sample_inputs(), runs=2)
    assert seconds == 0.123 and timed == [False]
    assert nodes and {n.op_type for n in nodes} & {"Conv"}


def _kernel_time(task: str, seconds: float, gflops: float | None, roofline: float | None):
    from export.profile import KernelTime

    return KernelTime(task=task, funcs=(task,), calls=1, seconds=seconds, share=0.5, flops=1, gflops=gflops,
                      percent_of_peak=None, schedule="default", roofline_gflops=roofline)


def test_headroom_is_what_each_kernel_would_save_at_its_roofline():
    from export.profile import Profile

    slow = _kernel_time("m/slow", 0.004, gflops=50.0, roofline=200.0)  # at a quarter of it: 3 ms to gain
    fast = _kernel_time("m/fast", 0.002, gflops=210.0, roofline=200.0)  # past the calibrated peak: nothing
    unknown = _kernel_time("m/copy", 0.001, gflops=None, roofline=None)  # no FLOPs: nothing claimed
    assert slow.headroom_s == pytest.approx(0.003) and fast.headroom_s == 0.0 and unknown.headroom_s == 0.0
    p = Profile(workload="m", target="cpu", runs=1, end_to_end_s=0.0075, kernels_s=0.007, other_s=0.0005,
                kernels=(slow, fast, unknown), peak_gflops=200.0, memory=MemoryRoof(20.0))
    assert p.headroom_s == pytest.approx(0.003)
    assert p.to_dict()["headroom_s"] == pytest.approx(0.003) and p.to_dict()["kernels"][0]["headroom_s"] > 0
    assert p.to_dict()["memory"] == {"memory_gbps": 20.0, "caches": []}  # the tiers its rooflines read against
    assert Profile(workload="m", target="cpu", runs=1, end_to_end_s=0.0075, kernels_s=0.007, other_s=0.0005,
                   kernels=(slow,)).headroom_s is None  # without the machine's peaks there is no roofline


def test_the_roofline_of_a_matrix_vector_product_is_its_bandwidth():
    """A classifier's matrix-vector product reads each weight once for one multiply-add: the copy
    bandwidth bounds it far below the FLOP peak; a square product is bound by the peak."""
    from types import SimpleNamespace

    import tvm

    from explorer.kernels import load_kernel
    from export.profile import roofline_gflops

    def task(spec):
        k = load_kernel(spec)
        return SimpleNamespace(flops=k.info.flops, mod=tvm.IRModule({"main": k.func}))

    copy = MemoryRoof(20.0)  # the large copy's bandwidth, no caches
    gemv = roofline_gflops(task("matmul:M=1,N=1024,K=1024"), 200.0, copy)
    assert gemv == pytest.approx(2 * 1024 * 1024 / (4 * (1024 + 1024 * 1024 + 1024)) * 20.0)  # ~10 GFLOPS
    assert roofline_gflops(task("matmul:M=512,N=512,K=512"), 200.0, copy) == 200.0
    assert roofline_gflops(task("matmul:M=1,N=64,K=64"), None, copy) is None


def test_the_rooflines_peak_is_the_best_kernel_where_it_beats_the_calibration():
    from export.profile import PEAK_CAP, roofline_peak

    assert roofline_peak(200.0, [(0.010, 220.0), (0.010, 150.0)]) == 220.0  # the machine did better: believe it
    assert roofline_peak(200.0, [(0.010, 180.0), (0.010, 150.0)]) == 200.0
    assert roofline_peak(200.0, [(0.020, 180.0), (0.0001, 900.0)]) == 200.0  # a sliver of the time: unsure
    assert roofline_peak(200.0, [(0.010, 900.0)]) == PEAK_CAP * 200.0  # a timing gone wrong, not the machine
    assert roofline_peak(None, [(0.010, 220.0)]) is None


def test_a_profile_suggests_searching_where_there_is_headroom_not_the_hottest_kernel():
    from types import SimpleNamespace

    from app.cli_profile import suggested_kernels

    at_peak = _kernel_time("m/at_peak", 0.010, gflops=205.0, roofline=200.0)  # the hottest: nothing to give
    slow = _kernel_time("m/slow", 0.002, gflops=50.0, roofline=200.0)
    searched = _kernel_time("m/searched", 0.004, gflops=20.0, roofline=200.0)
    result = SimpleNamespace(kernels=(at_peak, searched, slow))
    assert [k.task for k in suggested_kernels(result, {"m/searched"})] == ["m/slow"]
    # no rooflines (or nothing below them): the hottest kernels without a record, as before
    assert [k.task for k in suggested_kernels(SimpleNamespace(kernels=(at_peak,)), set())] == ["m/at_peak"]


# small_cnn as profiled on a 2-core Xeon (issue 52): seconds per run and calls per function, the
# instrument's cost 1.53 us a call; FLOPs and argument bytes per call of each task
_SMALL_CNN_CALLS = {"conv": {"seconds": 17.8e-6, "calls": 1}, "pool": {"seconds": 1.79e-6, "calls": 1},
                    "mean": {"seconds": 0.9e-6, "calls": 1}, "vm.builtin.alloc": {"seconds": 4e-6, "calls": 2}}
_PER_CALL = 1.53e-6
_CACHE = MemoryRoof.of(26.0, l2_gbps=180.0, l2_bytes=4 * 2**20)


def _small_cnn_rows(**peaks):
    from export.profile import TaskCost, kernel_rows

    tasks = [TaskCost("m/fused_conv2d_add_relu", ("conv",), flops=2_375_680, nbytes=67_712),
             TaskCost("m/max_pool2d", ("pool",), flops=16_384, nbytes=81_920),
             TaskCost("m/mean", ("mean",), flops=4_160, nbytes=16_640),
             TaskCost("m/fused_transpose1_reshape", ("reshape",), flops=0, nbytes=512)]  # a view: never called
    return kernel_rows(tasks, _SMALL_CNN_CALLS, _PER_CALL, peak_gflops=351.0, **peaks)


def test_a_kernel_that_ran_is_never_shown_as_zero():
    """Issue 52: 6 of 9 small_cnn kernels showed 0 ms / 0.0 % once the instrument's cost was taken
    out (ONNX Runtime times its pooling at ~0.01 ms). A kernel left with less than was taken out
    shows its time as timed, a bound, and its rates as lower bounds."""
    rows = _small_cnn_rows(memory=_CACHE)
    by = {k.task.split("/")[1]: k for k in rows.kernels}
    conv, pool, mean, view = by["fused_conv2d_add_relu"], by["max_pool2d"], by["mean"], by["fused_transpose1_reshape"]
    assert conv.resolved and conv.seconds == pytest.approx(17.8e-6 - _PER_CALL)
    assert conv.cells(rows.kernels_s)["ms"] == "0.016" and not conv.cells(rows.kernels_s)["GFLOPS"].startswith("≥")
    # 0.26 us left of 1.79 us: less than the 1.53 us taken out
    assert not pool.resolved and pool.upper_s == pytest.approx(1.79e-6)
    assert pool.gflops == pytest.approx(16_384 / 1.79e-6 / 1e9)  # from the time as timed: a lower bound
    cells = pool.cells(rows.kernels_s)
    assert cells["ms"] == "< 0.0018" and cells["GFLOPS"] == "≥ 9.2" and cells["share"].startswith("< ")
    assert mean.seconds == 0.0 and mean.cells(rows.kernels_s)["ms"] == "< 0.0009"  # clamped to 0: shown as a bound
    assert view.cells(rows.kernels_s)["ms"] == "not run"
    for k in rows.kernels:  # no row that ran reads 0
        c = k.cells(rows.kernels_s)
        assert k.ran <= (c["ms"] not in ("0.000", "0.0000") and c["share"] != "0.0%"), (k.task, c)
    # the rows still add up to the plain run: the estimates, not the bounds
    assert rows.kernels_s == pytest.approx(17.8e-6 - _PER_CALL + 1.79e-6 - _PER_CALL)
    assert rows.other_s == pytest.approx(4e-6 - 2 * _PER_CALL)
    assert [k.seconds for k in rows.kernels] == sorted((k.seconds for k in rows.kernels), reverse=True)


def test_a_max_pool_is_bound_by_the_bandwidth_of_where_its_bytes_are():
    """Issue 52: small_cnn's max_pool2d read 5145 % of its roofline: its 80 KB (input read once,
    output written once) were priced at the large copy's 26 GB/s, while the convolution before it
    had just written them to the cache; and its rate came from a time near zero."""
    from export.profile import roofline_bound

    # 16384 comparisons over 81920 bytes: 0.2 per byte, at the cache's bandwidth where the bytes fit
    assert roofline_bound(16_384, 81_920, 351.0, _CACHE) == pytest.approx(0.2 * 180.0)
    assert roofline_bound(16_384, 81_920, 351.0, MemoryRoof(26.0)) == pytest.approx(0.2 * 26.0)  # no cache figure: the copy's
    big = 64 * 2**20  # past the caches: what they hold at theirs, the rest at the large copy's bandwidth
    assert roofline_bound(big // 5, big, 351.0, _CACHE) == pytest.approx(0.2 * 64 / (4 / 180.0 + 60 / 26.0))
    assert roofline_bound(2 * 512**3, 3 * 4 * 512**2, 351.0, _CACHE) == 351.0  # compute-bound: the peak
    assert roofline_bound(0, 512, 351.0, _CACHE) is None  # no FLOPs (a transpose): no FLOP roofline
    pool = next(k for k in _small_cnn_rows(memory=_CACHE).kernels if k.task == "m/max_pool2d")
    assert pool.percent_of_roofline is not None and pool.percent_of_roofline <= 100.0, pool  # was 5145


def test_small_cnns_max_pool_moves_its_input_and_output():
    """The bytes of the roofline: the pooling's input read once and its output written once."""
    from explorer.workload import load_workload
    from export.profile import task_cost

    pool = next(t for t in load_workload("small_cnn").tasks() if t.name == "small_cnn/max_pool2d")
    cost = task_cost(pool)
    assert cost.nbytes == 4 * (32 * 32 * 16 + 16 * 16 * 16) and cost.flops == 16 * 16 * 16 * 4  # 2x2 windows


def test_a_bf16_kernel_reads_against_the_bf16_peak_and_never_above_100(monkeypatch):
    """Issue 51: a bf16 AMX kernel read against the fp32 FMA peak (and raised it to 1346 GFLOPS for
    every fp32 kernel after it). Each kernel's % peak and roofline are its family's; one above its
    family's peak raises that peak only, and then reads 100 % at most."""
    import math

    from explorer.measure import peak_check
    from explorer.measure.families import FamilyPeak
    from export.profile import TaskCost, checked_peaks, kernel_rows

    tasks = [TaskCost("m/fused_conv2d_bf16_add_relu", ("conv",), flops=8 * 2_375_680, nbytes=67_712, family="bf16"),
             TaskCost("m/max_pool2d", ("pool",), flops=16_384, nbytes=81_920)]
    calls = {"conv": {"seconds": 17.8e-6, "calls": 1}, "pool": {"seconds": 5e-6, "calls": 1}}
    bf16 = FamilyPeak("bf16", 3000.0, "bf16 AMX tdpbf16ps kernel, 4 tiles", "bf16 AMX")

    def rows(peaks):
        return kernel_rows(tasks, calls, _PER_CALL, peak_gflops=351.0, memory=_CACHE,
                           family_peaks={p.family: p.gflops for p in peaks})

    by = {k.family: k for k in rows((bf16,)).kernels}
    conv, pool = by["bf16"], by["fp32"]
    assert conv.gflops > 351.0 and conv.peak_gflops == 3000.0  # above the fp32 peak, well under its own
    assert conv.percent_of_peak == pytest.approx(100 * conv.gflops / 3000.0)
    assert conv.roofline_gflops == 3000.0 and pool.peak_gflops == 351.0
    assert by["bf16"].percent_of_peak < 100 and rows(()).kernels[0].percent_of_peak is None  # no bf16 peak: no %

    seen = []
    monkeypatch.setattr(peak_check, "within_peak", lambda g, kernel, peak, family="fp32": seen.append(family) or
                        peak_check.PeakCheck(math.ceil(g * 10) / 10, f"{family} peak raised by {kernel}", None, family))
    low = FamilyPeak("bf16", 1000.0, "bf16 AMX tdpbf16ps kernel, 4 tiles", "bf16 AMX")
    fp32, raised, notes = checked_peaks(rows((low,)).kernels, 351.0, (low,))
    assert fp32 == 351.0 and seen == ["bf16"] and notes == ["bf16 peak raised by m/fused_conv2d_bf16_add_relu"]
    assert raised[0].gflops >= conv.gflops and raised[0].raised_by == "m/fused_conv2d_bf16_add_relu"
    assert all(k.percent_of_peak <= 100.0 for k in rows(raised).kernels if k.percent_of_peak is not None)


def test_a_raised_family_peak_names_the_sure_kernel_that_raised_it_not_a_faster_short_one(monkeypatch):
    """A short kernel's figure raises nothing (its time is not sure): the raised peak names the sure
    kernel checked, and a peak that measuring the calibration again explained names no kernel."""
    from explorer.measure import peak_check
    from explorer.measure.calibration import CALIBRATION_VERSION, Calibration
    from explorer.measure.families import FamilyPeak
    from export.profile import KernelTime, checked_peaks

    def k(task, share, gflops):
        return KernelTime(task=task, funcs=(task,), calls=1, seconds=share, share=share, flops=1, gflops=gflops,
                          percent_of_peak=None, schedule="default", family="bf16")

    bf16 = FamilyPeak("bf16", 1000.0, "bf16 AMX tdpbf16ps kernel, 4 tiles", "bf16 AMX")
    kernels = (k("m/conv_bf16", 0.6, 1500.0), k("m/dense_bf16", 0.01, 2500.0))
    other = Calibration("another machine", 351.0, 20.0, "then", CALIBRATION_VERSION, families=(bf16,))
    real = peak_check.within_peak
    monkeypatch.setattr(peak_check, "within_peak", lambda g, kernel, peak, family="fp32":
                        real(g, kernel, peak, peaks=other, family=family))  # raised in the returned value only
    _, (raised,), notes = checked_peaks(kernels, 351.0, (bf16,))
    assert (raised.gflops, raised.raised_by) == (1500.0, "m/conv_bf16") and "m/conv_bf16" in notes[0]

    again = Calibration("this machine", 351.0, 20.0, "now", CALIBRATION_VERSION,
                        families=(FamilyPeak("bf16", 1600.0, "bf16 AMX tdpbf16ps kernel, 4 tiles", "bf16 AMX"),))
    monkeypatch.setattr(peak_check, "within_peak", lambda g, kernel, peak, family="fp32":
                        peak_check.PeakCheck(1600.0, "measured again, the bf16 peak is now 1600.0", again, family))
    _, (remeasured,), _ = checked_peaks(kernels, 351.0, (bf16,))
    assert (remeasured.gflops, remeasured.raised_by) == (1600.0, "")


def test_a_bf16_profile_prints_each_familys_peak(tmp_path):
    from explorer.schedule.bf16_dot import why_not
    from explorer.target import host_target

    if why_not(host_target().features):
        pytest.skip(f"no bf16 profile on this CPU: {why_not(host_target().features)}")
    result = CliRunner().invoke(cli, ["profile", "small_cnn", "--no-db", "--runs", "2", "--precision", "bf16",
                                      "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{"):])
    bf16 = [k for k in data["kernels"] if k["family"] == "bf16" and k["gflops"]]
    peaks = {p["family"]: p["gflops"] for p in data["family_peaks"]}
    assert bf16 and all(k["peak_gflops"] == peaks["bf16"] != data["peak_gflops"] for k in bf16)
    assert all(k["percent_of_peak"] is None or k["percent_of_peak"] <= 100.0 for k in data["kernels"])
    table = CliRunner().invoke(cli, ["profile", "small_cnn", "--no-db", "--runs", "2", "--precision", "bf16"])
    assert table.exit_code == 0, table.output
    assert "peaks: fp32 " in table.output and " GFLOPS, bf16 " in table.output and "prec" in table.output
