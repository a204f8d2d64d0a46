"""The memory side of the roofline (issue 51): the tier a kernel's bytes fit in (L2 caches, the shared
L3, memory), the caches' sizes read from Linux's sysfs, their measured bandwidth cached per machine,
and profile rows that never read above 100 % of the roofline they are priced at."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from explorer.measure.cache_sizes import cache_units, level_bytes, level_count, parse_cpu_list, parse_size
from explorer.measure.memory_roof import CacheTier, MemoryRoof
from explorer.target import host_target

MB = 2**20
# the 2-core Xeon of issue 51: two 2 MB L2 caches, a 480 MB L3 they share, a 25 GB/s large copy
XEON = MemoryRoof.of(24.8, l2_gbps=203.6, l2_bytes=4 * MB, l3_gbps=45.0, l3_bytes=480 * MB)


def test_a_kernel_is_in_the_smallest_tier_its_bytes_fit_in():
    assert XEON.tier_for(80 * 1024) == "L2" and XEON.gbps_for(80 * 1024) == 203.6  # small_cnn's max-pool
    assert XEON.tier_for(4 * MB) == "L2" and XEON.gbps_for(4 * MB) == 203.6  # exactly the L2 caches
    assert XEON.tier_for(4 * MB + 1) == "L3" and XEON.tier_for(480 * MB) == "L3"  # ResNet-18's bf16 weights
    assert XEON.tier_for(480 * MB + 1) == "memory"


def test_bytes_past_a_cache_move_at_best_as_fast_as_the_caches_that_hold_them():
    # 6 MB (mobilenet_v2's depthwise input and output): 4 MB at the L2's bandwidth, 2 MB at the L3's
    assert XEON.gbps_for(6 * MB) == pytest.approx(6 / (4 / 203.6 + 2 / 45.0))
    # 1 GB: 4 MB at the L2's, 476 MB at the L3's, the rest at memory's
    assert XEON.gbps_for(1024 * MB) == pytest.approx(1024 / (4 / 203.6 + 476 / 45.0 + 544 / 24.8))
    sizes = [2**k for k in range(10, 41)]  # 1 KB to 1 TB: never a cliff, never below memory, never above the L2
    rates = [XEON.gbps_for(n) for n in sizes]
    assert rates == sorted(rates, reverse=True) and all(24.8 <= r <= 203.6 for r in rates)
    assert XEON.gbps_for(4 * MB + 1024) == pytest.approx(203.6, rel=1e-3)  # just past the L2: just below its figure


def test_a_tier_without_a_figure_or_slower_than_memory_never_lowers_the_roof():
    no_l3 = MemoryRoof.of(24.8, l2_gbps=203.6, l2_bytes=4 * MB)  # the OS reports no L3
    assert no_l3.tier_for(5 * MB) == "memory" and no_l3.gbps_for(5 * MB) == pytest.approx(5 / (4 / 203.6 + 1 / 24.8))
    busy = MemoryRoof.of(24.8, l2_gbps=203.6, l2_bytes=4 * MB, l3_gbps=20.0, l3_bytes=480 * MB)  # timed when busy
    assert busy.tier_for(5 * MB) == "L3" and busy.gbps_for(5 * MB) == no_l3.gbps_for(5 * MB)
    odd = MemoryRoof(24.8, (CacheTier("L3", 480 * MB, 300.0), CacheTier("L2", 4 * MB, 200.0)))  # any order, any figure
    assert odd.tier_for(MB) == "L2" and odd.gbps_for(MB) == 300.0  # an upper bound: the fastest it fits in
    assert MemoryRoof(24.8).gbps_for(MB) == 24.8
    assert MemoryRoof.of(0.0, l2_gbps=200.0, l2_bytes=4 * MB) is None  # no copy figure: no roofline at all


def test_the_tiers_read_as_a_sentence():
    assert XEON.text() == "L2 204 GB/s up to 4.0 MB, L3 45 GB/s up to 480.0 MB, memory 25 GB/s beyond"
    assert MemoryRoof(24.8).text() == "memory 25 GB/s"


def test_a_profiles_tiers_say_how_many_kernels_each_holds_and_travel_in_its_json():
    """The headroom line names each tier with the kernels whose bytes fit there; the profile's JSON
    carries the tiers as one nested dict."""
    from explorer.measure.cache_peak import CachePeak
    from export.profile import Profile, TaskCost, kernel_rows, tiers_text

    caches = CachePeak("hw", 203.6, 4 * MB, l3_gbps=45.0, l3_bytes=480 * MB)
    assert caches.memory_roof(24.8) == XEON and caches.memory_roof(0.0) is None  # no copy figure: no roofline
    tasks = [TaskCost("m/pool", ("pool",), flops=16_384, nbytes=80 * 1024),
             TaskCost("m/conv", ("conv",), flops=302_150_000, nbytes=5 * MB),
             TaskCost("m/view", ("view",), flops=0, nbytes=512)]  # no FLOPs: no tier
    calls = {"pool": {"seconds": 2e-6, "calls": 1}, "conv": {"seconds": 2e-4, "calls": 1}}
    rows = kernel_rows(tasks, calls, 0.0, peak_gflops=326.2, memory=XEON)
    profile = Profile(workload="m", target="cpu", runs=1, end_to_end_s=2.1e-4, kernels_s=rows.kernels_s, other_s=0.0,
                      kernels=rows.kernels, peak_gflops=326.2, memory=XEON)
    assert tiers_text(profile) == ("L2 204 GB/s up to 4.0 MB (1 kernels), L3 45 GB/s up to 480.0 MB (1), "
                                   "memory 25 GB/s beyond (0)")
    assert MemoryRoof(24.8).text({"memory": 3}) == "memory 25 GB/s (3 kernels)"
    assert tiers_text(Profile(workload="m", target="cpu", runs=1, end_to_end_s=0.0, kernels_s=0.0, other_s=0.0,
                              kernels=rows.kernels)) == "no bandwidth measured"
    data = json.loads(json.dumps(profile.to_dict()))
    assert data["memory"]["memory_gbps"] == 24.8 and [t["name"] for t in data["memory"]["caches"]] == ["L2", "L3"]
    assert data["memory"] == XEON.to_dict()


def _cache(root, cpu: int, index: int, level: int, kind: str, size: str, shared: str | None) -> None:
    folder = root / f"cpu{cpu}" / "cache" / f"index{index}"
    folder.mkdir(parents=True)
    for name, text in (("level", str(level)), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
        if text is not None:
            (folder / name).write_text(text + "\n")


def test_the_caches_sizes_are_read_from_sysfs_each_shared_cache_once(tmp_path):
    for cpu in (0, 1, 2):  # cpu 2 is not ours (another cgroup's): its caches do not count
        _cache(tmp_path, cpu, 0, 1, "Data", "48K", str(cpu))
        _cache(tmp_path, cpu, 1, 1, "Instruction", "64K", str(cpu))
        _cache(tmp_path, cpu, 2, 2, "Unified", "2048K", str(cpu))
        _cache(tmp_path, cpu, 3, 3, "Unified", "491520K", "0-2")
    units = cache_units(frozenset({0, 1}), tmp_path)
    assert level_bytes(2, units) == 4 * MB and level_count(2, units) == 2
    assert level_bytes(3, units) == 480 * MB and level_count(3, units) == 1  # one L3 the cores share
    assert level_bytes(1, units) == 2 * 48 * 1024  # instruction caches left out


def test_hyperthreads_sharing_an_l2_and_two_sockets_l3s_are_counted_as_they_are(tmp_path):
    for cpu in range(4):  # two sockets of two hyperthreads: one L2 per pair, one L3 per socket
        pair = "0-1" if cpu < 2 else "2-3"
        _cache(tmp_path, cpu, 0, 2, "Unified", "1M", pair)
        _cache(tmp_path, cpu, 1, 3, "Unified", "32M", pair)
    units = cache_units(frozenset(range(4)), tmp_path)
    assert level_bytes(2, units) == 2 * MB and level_bytes(3, units) == 64 * MB and level_count(3, units) == 2


def test_a_missing_or_odd_sysfs_tree_reports_no_cache(tmp_path):
    assert cache_units(frozenset({0}), tmp_path / "nothing") == ()
    _cache(tmp_path, 0, 0, 2, "Unified", "lots", None)  # an unreadable size, no shared_cpu_list
    _cache(tmp_path, 0, 1, 3, "Unified", "8M", None)
    units = cache_units(frozenset({0}), tmp_path)
    assert level_bytes(2, units) == 0 and level_bytes(3, units) == 8 * MB
    assert parse_size("2048K") == 2 * MB and parse_size("1G") == 2**30 and parse_size("512") == 512
    assert parse_size("") == 0 and parse_cpu_list("0-1,4") == {0, 1, 4} and parse_cpu_list("x") == frozenset()


def test_the_caches_bandwidth_is_measured_once_cached_and_again_when_provisional(tmp_path, monkeypatch):
    import explorer.measure.cache_peak as cache_peak
    from explorer.measure import machine_load

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = cache_peak.cache_peak()
    assert (first.gbps > 0) == (first.nbytes > 0)  # 0 where the OS does not report the L2 caches
    assert first.sizes == cache_peak.cache_sizes()
    host = host_target()
    if host.runs_here and host.vector_width and cache_peak.cache_sizes()[0]:  # sysfs reports an L1: streamed
        assert first.method.startswith("stream kernels") and first.l1_gbps > 0 and first.l1_bytes > 0, first.method
        assert first.memory_gbps > 0 or "memory" not in cache_peak.tier_probes(*first.sizes), first.method
    assert (first.l3_gbps > 0) == (first.l3_bytes > 0) and first.l3_bytes in (0, level_bytes(3, cache_units()))
    stored = json.loads(next(tmp_path.rglob("*-l2.json")).read_text())
    assert stored["version"] == cache_peak.VERSION and stored["l3_bytes"] == first.l3_bytes
    monkeypatch.setattr(cache_peak, "measure_cache_peak", lambda: pytest.fail("measured twice"))
    assert cache_peak.cache_peak() == first

    # a figure taken on a busy machine is measured again once it is quiet, and the quiet figures replace it
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "another"))
    busy = cache_peak.CachePeak(first.hardware, 150.0, 4 * MB, l3_gbps=60.0, l3_bytes=480 * MB, provisional=True,
                                sizes=first.sizes)
    quiet = cache_peak.CachePeak(first.hardware, 200.0, 4 * MB, l3_gbps=40.0, l3_bytes=480 * MB, sizes=first.sizes)
    taken = [busy, quiet]
    monkeypatch.setattr(cache_peak, "measure_cache_peak", lambda: taken.pop(0))
    monkeypatch.setattr(machine_load, "machine_load", lambda: machine_load.MachineLoad(0.0, 2))
    assert cache_peak.cache_peak(refresh=True) == busy
    monkeypatch.setattr(cache_peak, "_quiet_checked", {})  # a minute later
    again = cache_peak.cache_peak()
    assert not again.provisional and (again.gbps, again.l3_gbps) == (200.0, 40.0) and not taken  # not the busy 60
    assert cache_peak.cache_peak() == again


def test_another_cpus_cache_figures_under_the_same_fingerprint_and_cache_sizes_are_not_this_ones(tmp_path,
                                                                                                 monkeypatch):
    """Zen 4 and Zen 5 guests of 2 cores share a fingerprint and their cache sizes: each keeps its own file (LLVM's
    name of the CPU in its key), so one's figures are never read, nor raised past, as the other's."""
    import explorer.measure.cache_peak as cache_peak
    import explorer.target.host as host_mod

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    real = host_mod.host_cpu()
    other = "znver4" if real.llvm_cpu != "znver4" else "znver5"
    theirs = cache_peak.CachePeak(cache_peak.hardware_fingerprint(), 999.0, 2 * MB, l3_gbps=888.0, l3_bytes=32 * MB,
                                  sizes=cache_peak.cache_sizes())
    monkeypatch.setattr(host_mod, "host_cpu", lambda: replace(real, llvm_cpu=other))
    cache_peak.save(theirs)
    assert cache_peak.cache_peak() == theirs  # that CPU reads its own
    monkeypatch.setattr(host_mod, "host_cpu", lambda: real)
    mine = cache_peak.CachePeak(theirs.hardware, 300.0, 2 * MB, l3_gbps=150.0, l3_bytes=32 * MB, sizes=theirs.sizes)
    monkeypatch.setattr(cache_peak, "measure_cache_peak", lambda: mine)
    assert cache_peak.cache_peak() == mine  # measured here, not raised to the other CPU's figures
    assert len(list(tmp_path.rglob("*-l2.json"))) == 2


def test_a_quiet_figure_is_never_lost_to_a_busy_measurement_after_it(tmp_path, monkeypatch):
    """Quiet L2 500 GB/s; measured again on a busy machine, every figure lower: the quiet figures stand and are
    no longer provisional, so the next quiet measurement (450) cannot replace them: a roof never drops."""
    from dataclasses import replace

    import explorer.measure.cache_peak as cache_peak
    from explorer.measure import machine_load

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(cache_peak, "_quiet_checked", {})
    monkeypatch.setattr(machine_load, "machine_load", lambda: machine_load.MachineLoad(0.0, 2))  # quiet from now on
    quiet = cache_peak.save(cache_peak.CachePeak(cache_peak.hardware_fingerprint(), 500.0, 2 * MB, l3_gbps=226.0,
                                                 l3_bytes=32 * MB, memory_gbps=34.7, sizes=cache_peak.cache_sizes()))
    busy = replace(quiet, gbps=400.0, l3_gbps=200.0, memory_gbps=30.0, provisional=True)
    taken = [busy, replace(quiet, gbps=450.0)]
    monkeypatch.setattr(cache_peak, "measure_cache_peak", lambda: taken.pop(0))
    assert cache_peak.cache_peak(refresh=True) == quiet  # the busy figures all lower: nothing of theirs kept
    assert cache_peak.cache_peak() == quiet and len(taken) == 1  # not provisional: not measured again
    assert cache_peak.cache_peak(refresh=True).gbps == 500.0  # measured again, quietly, lower: the roof holds

    # a busy figure above the quiet one is kept (the other tiers the quiet figures), provisional: a quiet
    # measurement replaces it; busy over busy stays provisional
    higher = replace(busy, gbps=600.0)
    kept = higher.at_least(quiet)
    assert kept.provisional and (kept.gbps, kept.l3_gbps, kept.memory_gbps) == (600.0, 226.0, 34.7)
    assert replace(quiet, gbps=450.0).at_least(kept) == replace(quiet, gbps=450.0)
    assert busy.at_least(replace(quiet, provisional=True)).provisional  # busy over busy: still provisional


def test_a_copy_within_the_l3_is_timed_beyond_the_l2_caches():
    from explorer.measure.cache_peak import MIN_L3_PROBE, l3_probe_bytes, parallel_gbps

    assert l3_probe_bytes(2 * MB, 480 * MB) == MIN_L3_PROBE  # 4 times the L2 caches, 16 MB at least
    assert l3_probe_bytes(16 * MB, 480 * MB) == 64 * MB
    assert l3_probe_bytes(8 * MB, 32 * MB) == 16 * MB  # half the L3 at most
    assert parallel_gbps(MB, 2, repeats=2, round_bytes=1e7) > 0
    assert parallel_gbps(MB, 2, read=True, repeats=2, round_bytes=1e7) > 0


def test_resnet18s_bf16_convolutions_read_below_the_l3s_roofline():
    """Issue 51: ResNet-18's last bf16 convolutions (4.7 MB of bf16 weights) read 107 % and 117 % of a
    roofline priced at the large copy's 25 GB/s; their bytes fit in the L3, whose bandwidth prices
    them now, and no row reads above 100 %."""
    from export.profile import TaskCost, kernel_rows

    # fused_conv2d_nhwc_bf168_add7_add8_relu4 as timed on a quiet Xeon: 302 MFLOP over 5.03 MB, 0.173 ms
    conv = TaskCost("r/fused_conv2d_nhwc_bf168_add7_add8_relu4", ("conv",), flops=302_150_000, nbytes=5_030_000,
                    family="bf16")
    calls = {"conv": {"seconds": 0.173e-3, "calls": 1}}
    peaks = {"bf16": 3606.6}
    before = MemoryRoof.of(24.8, l2_gbps=203.6, l2_bytes=4 * MB)  # the L2 caches, then the large copy's 25 GB/s
    old = kernel_rows([conv], calls, 0.0, peak_gflops=326.2, memory=MemoryRoof(24.8), family_peaks=peaks).kernels[0]
    assert old.percent_of_roofline > 100 and old.tier == "memory"  # the bug: 117 %
    assert kernel_rows([conv], calls, 0.0, peak_gflops=326.2, memory=before, family_peaks=peaks).kernels[0].tier \
        == "memory"
    row = kernel_rows([conv], calls, 0.0, peak_gflops=326.2, memory=XEON, family_peaks=peaks).kernels[0]
    assert row.tier == "L3" and row.nbytes == 5_030_000 and row.percent_of_roofline <= 100.0
    assert row.to_dict()["tier"] == "L3"


def test_mobilenets_depthwise_convolution_reads_below_its_roofline():
    """Issue 51: mobilenet_v2's stride-2 depthwise convolution (5.7 MB: the 4.8 MB its producer has just
    written, most of it still in the L2 caches) read 201 % of a roofline priced at the large copy's
    25 GB/s; as many of its bytes as the L2 caches hold move at theirs now."""
    from export.profile import TaskCost, kernel_rows

    conv = TaskCost("m/fused_conv2d4_add3_maximum2_minimum2", ("conv",), flops=6_320_000, nbytes=6_025_000)
    calls = {"conv": {"seconds": 6_320_000 / 52.3e9, "calls": 1}}  # 52.3 GFLOPS, as on a quiet machine
    row = kernel_rows([conv], calls, 0.0, peak_gflops=326.2, memory=XEON).kernels[0]
    assert row.tier == "L3" and row.gflops == pytest.approx(52.3) and row.percent_of_roofline <= 100.0
    assert kernel_rows([conv], calls, 0.0, peak_gflops=326.2, memory=MemoryRoof(24.8)).kernels[0] \
        .percent_of_roofline > 200  # the bug
