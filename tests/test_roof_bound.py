"""A roofline that holds (issue 51): the memory roof is an upper bound on how fast a kernel's bytes
move. The caches' and memory's bandwidths are streamed by kernels built with TVM for the machine
(read, copy, add; the target's full vectors; every core) over sizes beyond every smaller cache, with
an L1 tier; a kernel still above its roof has the figures measured again, then its tier raised just
enough to hold it (a quarter at most: beyond, the kernel's figure is not trusted), and a note says
so. The figures are kept per machine and per cache sizes. Assembly is checked per ISA by building;
numbers are run on this host only."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import replace

import pytest

from explorer.measure import cache_peak as cp
from explorer.measure import roof_check, stream_kernel
from explorer.measure.memory_roof import MemoryRoof
from explorer.schedule.codegen import asm_stats, hot_loop
from explorer.target import host_target, parse_target

KB, MB = 2**10, 2**20
HOST = host_target()
x86_only = pytest.mark.skipif(HOST.arch != "x86_64", reason="spells x86 CPUs as this machine's (cpu:MCPU)")
# the 2-core Zen 5 guest of the bench: 2 x 48 KB L1d, 2 x 1 MB L2, a 32 MB L3; its stream figures, quiet
ZEN5 = MemoryRoof.of(34.7, l1_gbps=1352.6, l1_bytes=96 * KB, l2_gbps=500.0, l2_bytes=2 * MB, l3_gbps=226.0,
                     l3_bytes=32 * MB)


def test_bytes_that_fit_in_the_l1_caches_move_at_their_bandwidth_and_no_cliff_past_them():
    assert ZEN5.tier_for(48 * KB) == "L1" and ZEN5.gbps_for(48 * KB) == 1352.6
    assert ZEN5.tier_for(96 * KB + 1) == "L2" and ZEN5.tier_for(32 * MB + 1) == "memory"
    assert ZEN5.gbps_for(MB) == pytest.approx(MB / (96 * KB / 1352.6 + (MB - 96 * KB) / 500.0))
    rates = [ZEN5.gbps_for(2**k) for k in range(10, 36)]
    assert rates == sorted(rates, reverse=True) and all(34.7 <= r <= 1352.6 for r in rates)
    assert ZEN5.text() == ("L1 1353 GB/s up to 96.0 KB, L2 500 GB/s up to 2.0 MB, L3 226 GB/s up to 32.0 MB, "
                           "memory 35 GB/s beyond")
    # without an L1 figure (a cache measured before version 3, numpy's fallback) the tiers are as before
    old = MemoryRoof.of(34.7, l2_gbps=405.7, l2_bytes=2 * MB, l1_bytes=96 * KB)
    assert [t.name for t in old.caches] == ["L2", "L3"] and old.tier_for(48 * KB) == "L2"


# (L1d, L2, L3) bytes of the usable cores: the Zen 5 guest; a 2-core Xeon with a 480 MB L3; a whole Sapphire
# Rapids socket (56 cores: 112 MB of L2s, a 105 MB L3); a 16-core Zen 4 (64 MB of L3); an L3 hardly larger than
# the L2s (12 MB over 8 MB); no L3; no sysfs at all
# the tiers streamed: memory not past MAX_MEMORY_PROBE (the calibration's copy stands), nor the L3 where half of
# it is under twice the L2s
CACHES = {(96 * KB, 2 * MB, 32 * MB): "L1 L2 L3 memory", (96 * KB, 4 * MB, 480 * MB): "L1 L2 L3",
          (56 * 48 * KB, 112 * MB, 105 * MB): "L1 L2", (16 * 32 * KB, 16 * MB, 64 * MB): "L1 L2 L3",
          (64 * KB, 8 * MB, 12 * MB): "L1 L2 memory", (64 * KB, 512 * KB, 0): "L1 L2", (0, 0, 0): ""}


@pytest.mark.parametrize("sizes", list(CACHES), ids=lambda s: "/".join(f"{b // KB}K" for b in s))
def test_each_tier_is_streamed_over_more_bytes_than_every_smaller_cache_holds_and_fits_in_its_own(sizes):
    """A probe that fits in a smaller cache times that cache; one that overflows its own times the next.
    A victim L3 (AMD's) holds what the L2s do not, so a probe beyond the L3 alone is not beyond the caches."""
    probes = cp.tier_probes(*sizes)
    own = dict(zip(("L1", "L2", "L3"), sizes))
    for tier, tier_sizes in probes.items():
        smaller = sum(b for name, b in own.items() if cp.TIERS.index(name) < cp.TIERS.index(tier))
        for size in tier_sizes:
            assert size > smaller and (tier == "memory" or size <= own[tier] // 2), (tier, size)
            if tier == "L3":
                assert size >= 2 * own["L2"], size  # else it times the L2s as much as the L3
            if tier == "memory":
                assert size >= 4 * sum(sizes) and size <= cp.MAX_MEMORY_PROBE
    assert " ".join(probes) == CACHES[sizes]


def test_the_fastest_pattern_at_any_of_a_tiers_sizes_is_its_figure():
    found = {str(48 * KB): {"read": 500.0, "copy": 1000.0, "add": 1350.0},
             str(512 * KB): {"read": 380.0, "copy": 382.0, "add": 381.0}, str(MB): {"read": 501.0, "add": 440.0}}
    assert cp.streamed({"L1": [48 * KB], "L2": [512 * KB, MB], "L3": [16 * MB]}, found) == {
        "L1": 1350.0, "L2": 501.0, "L3": 0.0}  # as the child's JSON gives its probes (lists); a size not timed: none


# spelling -> (fp32 lanes, vector bits)
ISAS = {"cpu:znver5": (16, 512), "cpu:sapphirerapids": (16, 512), "cpu:haswell": (8, 256),
        "aarch64:cortex-a76": (4, 128)}


@pytest.mark.parametrize("spec", [pytest.param(s, marks=x86_only) if s.startswith("cpu:") else s for s in ISAS])
@pytest.mark.parametrize("pattern", list(stream_kernel.PATTERNS))
def test_the_stream_kernels_move_bytes_with_the_targets_full_vectors(spec, pattern):
    """Built only (nothing runs): the hot loop loads (and, copy and add, stores) whole vectors of the
    target's width, every core a row; the read kernel's sums stay in registers (no store in its loop)."""
    lanes, bits = ISAS[spec]
    target = parse_target(spec)
    kernel = stream_kernel.for_target(target, pattern)
    assert (kernel.lanes, kernel.cores, kernel.buffers) == (lanes, target.cpu_spec().cores,
                                                           stream_kernel.PATTERNS[pattern])
    from explorer.measure.peak_kernel import executable_asm

    asm = executable_asm(stream_kernel.build(kernel, target))
    loop = hot_loop(asm, target.asm)
    body = asm.splitlines()[loop.first - 1:loop.last]
    assert max(asm_stats("\n".join(body), target.asm).vector) == bits, "\n".join(body)
    x86 = spec.startswith("cpu:")
    store = re.compile(r"^\s*vmov\w*\s+%[xyz]mm\d+, -?\w*\(" if x86 else r"^\s*stp?\s+q\d+")
    memory = re.compile(r"\(%r" if x86 else r"\[x\d+")

    def vectors(lines):  # vector registers loaded or stored (AArch64's ldp/stp move two)
        return sum(1 if x86 else len(re.findall(r"\bq\d+\b", line)) for line in lines)

    stores = vectors(line for line in body if store.search(line))
    if pattern == "read":
        assert not stores and vectors(line for line in body if memory.search(line)) >= kernel.chains, "\n".join(body)
    else:
        assert stores >= kernel.chains, "\n".join(body)
    with pytest.raises(ValueError, match="unknown stream pattern"):
        stream_kernel.for_target(target, "scatter")


def test_the_stream_kernels_run_on_this_host_and_move_every_byte():
    """Each pattern, run once over random rows, computes what it claims: ``read`` sums every element (its
    loads all done), ``copy`` leaves B == A, ``add`` C == A + B; then each gives a figure at an L1 and an L2
    size. (The child process of the calibration runs in test_memory_roof.)"""
    import numpy as np
    import tvm

    if not HOST.runs_here or not HOST.vector_width:
        pytest.skip(f"this machine cannot run its own target ({HOST.why_not_here() or 'no vector width'})")
    rng = np.random.default_rng(0)
    for pattern in stream_kernel.PATTERNS:
        kernel = stream_kernel.for_target(HOST, pattern)
        n = 3 * kernel.step
        a, b = (rng.integers(-8, 8, (kernel.cores, n)).astype("float32") for _ in range(2))  # sums exact in fp32
        args = [tvm.runtime.tensor(x) for x in (a, b, np.zeros((kernel.cores, n), "float32"),
                                                np.zeros((kernel.cores, kernel.lanes), "float32"))]
        stream_kernel.build(kernel, HOST).jit()["main"](*args, 2)
        if pattern == "read":
            sums = 2 * a.reshape(kernel.cores, -1, kernel.lanes).sum(axis=1)
            np.testing.assert_array_equal(args[3].numpy(), sums)
        elif pattern == "copy":
            np.testing.assert_array_equal(args[1].numpy(), a)
        else:
            np.testing.assert_array_equal(args[2].numpy(), a + b)
    found = stream_kernel.time_patterns(HOST, [32 * KB, 512 * KB], repeats=2)
    assert set(found) == {str(32 * KB), str(512 * KB)}
    assert all(set(f) == set(stream_kernel.PATTERNS) and min(f.values()) > 0 for f in found.values())


def test_a_cache_figure_of_an_older_version_or_other_caches_is_measured_again_and_a_raise_survives_a_lower_one(
        tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    hw, sizes = cp.hardware_fingerprint(), cp.cache_sizes()
    old = {"hardware": hw, "gbps": 405.7, "nbytes": 2 * MB, "version": 2, "l3_gbps": 228.4, "l3_bytes": 32 * MB}
    cp.save(cp.CachePeak.from_dict(old))
    path = next(tmp_path.rglob("*-l2.json"))
    path.write_text(json.dumps(old))  # as version 2 wrote it
    new = cp.CachePeak(hw, 500.0, 2 * MB, l3_gbps=226.0, l3_bytes=32 * MB, l1_gbps=1352.6, l1_bytes=96 * KB,
                       memory_gbps=46.8, method="stream kernels 16 fp32 lanes, 2 cores", sizes=sizes)
    monkeypatch.setattr(cp, "measure_cache_peak", lambda: new)
    assert cp.cache_peak() == new  # version 2: measured again (its figures are no floor: another method)
    assert json.loads(path.read_text())["version"] == cp.VERSION == 3
    monkeypatch.setattr(cp, "measure_cache_peak", lambda: pytest.fail("measured twice"))
    assert cp.cache_peak() == new and cp.CachePeak.from_dict(json.loads(json.dumps(new.to_dict()))) == new

    # the same fingerprint on caches of other sizes (a Zen 4 guest's figures read on a Zen 5): measured again
    other = cp.replace(new, gbps=900.0, sizes=(64 * KB, 2 * MB, 32 * MB + 1))
    cp.save(other)
    monkeypatch.setattr(cp, "measure_cache_peak", lambda: new)
    assert cp.cache_peak() == new  # not other's 900 GB/s: no floor either

    raised = cp.save(cp.CachePeak.from_dict(new.to_dict() | {"gbps": 620.0, "raised": [["L2", "m/pool", 495.0]]}))
    assert cp.cache_peak() == raised and raised.raised == (("L2", "m/pool", 495.0),)
    monkeypatch.setattr(cp, "measure_cache_peak", lambda: new)  # measured again, lower: the raise stands
    again = cp.cache_peak(refresh=True)  # its measured figure the best measured: 500 now
    assert (again.gbps, again.raised, again.l1_gbps) == (620.0, (("L2", "m/pool", 500.0),), 1352.6)
    quiet = cp.replace(new, l3_gbps=200.0)  # a provisional figure measured again quietly: replaced, the raise stands
    assert cp.replace(quiet, l1_gbps=1000.0).at_least(cp.replace(again, provisional=True)) == cp.replace(
        quiet, gbps=620.0, l1_gbps=1000.0, raised=(("L2", "m/pool", 500.0),))
    higher = cp.CachePeak.from_dict(new.to_dict() | {"gbps": 700.0})
    monkeypatch.setattr(cp, "measure_cache_peak", lambda: higher)  # measured higher: no longer a kernel's figure
    assert (cp.cache_peak(refresh=True).gbps, cp.cache_peak().raised) == (700.0, ())
    assert higher.memory_roof(34.7).memory_gbps == 46.8 and higher.memory_roof(50.0).memory_gbps == 50.0
    assert higher.memory_roof(0.0) is None  # no copy figure: no roofline


def _stored(tmp_path, monkeypatch, **figures) -> cp.CachePeak:
    """This machine's cache figures as stored in ``tmp_path`` (the Zen 5 guest's, or ``figures``), never
    measured again unless a test says so."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("SCHEDX_LOCK_DIR", str(tmp_path / "lock"))  # this test's own measuring lock
    monkeypatch.setattr(roof_check, "_rechecked", {})
    monkeypatch.setattr(cp, "measure_cache_peak", lambda: pytest.fail("measured again"))
    zen5 = dict(gbps=500.0, nbytes=2 * MB, l3_gbps=226.0, l3_bytes=32 * MB, l1_gbps=1352.6, l1_bytes=96 * KB,
                memory_gbps=34.7, sizes=cp.cache_sizes())
    return cp.save(cp.CachePeak(cp.hardware_fingerprint(), **(zen5 | figures)))


def test_a_kernel_under_its_roof_changes_nothing_and_one_above_has_the_figures_measured_again(tmp_path, monkeypatch):
    stored = _stored(tmp_path, monkeypatch, gbps=400.0)
    roof = stored.memory_roof(34.7)
    assert roof_check.within_roof(300.0, MB, "m/pool", roof) == roof_check.RoofCheck(roof)
    assert roof_check.within_roof(34.0, 256 * MB, "m/matvec", roof).note == ""

    monkeypatch.setattr(cp, "measure_cache_peak", lambda: cp.replace(stored, gbps=480.0))
    check = roof_check.within_roof(450.0, MB, "m/pool", roof)  # above 428: measured again, each figure the higher
    assert check.trusted and check.roof.figure("L2") == 480.0 and check.roof.gbps_for(MB) >= 450.0
    assert check.note == ("m/pool moved its 1.0 MB at 450 GB/s, above its roof of 428 GB/s: the cache figures, "
                          "measured again, hold it")
    assert cp.cache_peak().gbps == 480.0 and cp.cache_peak().raised == ()


@pytest.mark.parametrize("nbytes, tier", [(MB, "L2"), (20 * MB, "L3"), (33 * MB, "L3"), (40 * MB, "memory"),
                                          (256 * MB, "memory")])
def test_a_kernel_still_above_its_roof_raises_its_tier_just_enough_to_hold_it(tmp_path, monkeypatch, nbytes, tier):
    """The tier is raised to the least figure whose roof of the kernel's bytes is the kernel's rate (not to
    the rate itself: the roof blends the tiers its bytes fill). 33 MB fit in the Zen 5 guest's L2s and
    victim L3 together (34 MB): they raise the L3, never memory; 40 MB do not."""
    _stored(tmp_path, monkeypatch)
    roof = ZEN5
    roof_check._rechecked[cp.hardware_fingerprint()] = time.monotonic()  # measured just now
    gbps = 1.1 * roof.gbps_for(nbytes)
    check = roof_check.within_roof(gbps, nbytes, "m/k", roof)
    assert check.trusted and check.roof.gbps_for(nbytes) == pytest.approx(gbps, rel=2e-3), check.note
    assert roof.figure(tier) < check.roof.figure(tier) <= 1.25 * roof.figure(tier)
    assert [t for t in cp.TIERS if check.roof.figure(t) != roof.figure(t)] == [tier]
    assert check.note.endswith(f"the {tier} bandwidth raised to {check.roof.figure(tier):.0f} GB/s to hold it")
    stored = cp.cache_peak()
    assert (stored.figure(tier), stored.raised) == (check.roof.figure(tier), ((tier, "m/k", roof.figure(tier)),))
    assert roof_check.within_roof(gbps, nbytes, "m/k", stored.memory_roof(34.7)).note == ""  # held from now on


def test_a_kernel_whose_tier_would_rise_past_a_quarter_raises_nothing_and_is_not_trusted(tmp_path, monkeypatch):
    """100 KB just past the L1s at 1.2 times their roof (1266 GB/s, most of it the L1's): the L2 would have to
    go from 500 to 1519 GB/s. A slice counted whole, a time too short: its % roofline is no figure."""
    stored = _stored(tmp_path, monkeypatch)
    roof_check._rechecked[cp.hardware_fingerprint()] = time.monotonic()
    for nbytes, times in ((100 * KB, 1.2), (MB, 2.0), (33 * MB, 1.4)):
        check = roof_check.within_roof(times * ZEN5.gbps_for(nbytes), nbytes, "m/strided_slice", ZEN5)
        assert not check.trusted and check.roof == ZEN5 and "its % roofline is left blank" in check.note
    assert cp.cache_peak() == stored


def test_a_raise_is_stored_only_above_the_stored_figure_and_only_for_this_machine(tmp_path, monkeypatch):
    stored = _stored(tmp_path, monkeypatch, gbps=560.0)  # the stored L2 above the roof the caller holds
    roof_check._rechecked[cp.hardware_fingerprint()] = time.monotonic()
    check = roof_check.within_roof(1.05 * ZEN5.gbps_for(MB), MB, "m/pool", ZEN5)
    assert check.trusted and 500.0 < check.roof.figure("L2") < 560.0 and cp.cache_peak() == stored
    # another machine's figures (a test's, a bench file's): raised in the value returned, never measured or
    # stored, though this machine's stored L2 (500) is below the raise
    stored = _stored(tmp_path, monkeypatch)
    check = roof_check.within_roof(1.05 * ZEN5.gbps_for(MB), MB, "m/pool", ZEN5, hardware="another machine")
    assert check.trusted and check.roof.figure("L2") > 500.0 and cp.cache_peak() == stored


def test_raises_do_not_pile_up_past_a_quarter_above_the_figure_measured(tmp_path, monkeypatch):
    """A raised tier keeps the figure it was measured at: a later kernel raises it again up to 1.25 times that
    figure, never 1.25 times the raise (one profile's kernels one after the other; run after run)."""
    _stored(tmp_path, monkeypatch)
    roof_check._rechecked[cp.hardware_fingerprint()] = time.monotonic()
    assert roof_check.within_roof(1.1 * ZEN5.gbps_for(MB), MB, "m/a", ZEN5).trusted  # the L2 to about 571
    first = cp.cache_peak()
    assert first.raised == (("L2", "m/a", 500.0),) and 550.0 < first.gbps < 600.0
    roof = first.memory_roof(34.7)
    over = roof_check.within_roof(roof.with_tier("L2", 1.2 * first.gbps).gbps_for(MB), MB, "m/b", roof)
    assert not over.trusted and over.roof == roof and "past 1.25 times the 500 GB/s measured" in over.note
    assert cp.cache_peak() == first
    check = roof_check.within_roof(roof.with_tier("L2", 610.0).gbps_for(MB), MB, "m/c", roof)
    assert check.trusted and 609.0 < check.roof.figure("L2") <= 610.1
    assert cp.cache_peak().raised == (("L2", "m/c", 500.0),)  # the figure measured, not m/a's raise


def test_measuring_again_and_storing_a_raise_hold_the_measuring_lock(tmp_path, monkeypatch):
    """Two processes that raise at once would each write a raise over the other's; a measurement taken while
    another process times a kernel is wrong. Both happen under the lock every timed run holds."""
    from explorer.measure import lock

    stored = _stored(tmp_path, monkeypatch)
    holders = []

    def holder() -> int | None:
        found = lock.lock_status()["holder"]
        return found and found["pid"]

    monkeypatch.setattr(cp, "measure_cache_peak", lambda: holders.append(holder()) or stored)  # the same again
    real_save = roof_check.save
    monkeypatch.setattr(roof_check, "save", lambda peak: holders.append(holder()) or real_save(peak))
    check = roof_check.within_roof(1.1 * ZEN5.gbps_for(MB), MB, "m/pool", ZEN5)
    assert check.trusted and cp.cache_peak().raised == (("L2", "m/pool", 500.0),)
    assert holders == [os.getpid(), os.getpid()] and lock.lock_status()["holder"] is None


def test_a_stream_kernel_that_leaves_bytes_unmoved_gives_no_figure(monkeypatch):
    """time_patterns checks what each kernel wrote: a copy built without its stores (as a broken schedule
    would drop them) moves half the bytes it is counted for, and raises instead of giving a figure."""
    if not HOST.runs_here or not HOST.vector_width:
        pytest.skip(f"this machine cannot run its own target ({HOST.why_not_here() or 'no vector width'})")
    real = stream_kernel.prim_func
    monkeypatch.setattr(stream_kernel, "prim_func",
                        lambda kernel: real(replace(kernel, pattern="read") if kernel.pattern == "copy" else kernel))
    with pytest.raises(ValueError, match="the copy kernel wrote the wrong numbers"):
        stream_kernel.time_patterns(HOST, [32 * KB], repeats=1)
