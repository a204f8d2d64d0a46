"""The bf16 and int8 peak kernels: each CPU gets its best instruction of the family (AMX tiles,
vdpbf16ps/vpdpbusd, vpmaddubsw) in its assembly and none it lacks; on this host each kernel the CPU
runs computes exactly the products its op count says (skipped, with the reason, where the
instructions are hidden); the calibration keeps a peak per family. No test asserts a speed."""

from __future__ import annotations

import importlib
import json
import re
from dataclasses import replace

import numpy as np
import pytest

from explorer.measure import dot_peaks, peak_check
from explorer.measure.families import FamilyPeak, family_of_name, kernel_family, peaks_line
from explorer.target import host_target, parse_target
from explorer.target.host import host_cpu

cal_mod = importlib.import_module("explorer.measure.calibration")
HOST = host_target()
x86_only = pytest.mark.skipif(HOST.arch != "x86_64", reason="spells x86 CPUs as this machine's (cpu:MCPU)")
TILE = re.compile(r"\b(tdp\w+|tileloadd\w*|ldtilecfg)\b|%tmm\d")


@x86_only
@pytest.mark.parametrize("spec, family, instruction", [
    ("cpu:sapphirerapids", "bf16", "tdpbf16ps"), ("cpu:sapphirerapids", "int8", "tdpbusd"),
    ("cpu:znver4", "bf16", "vdpbf16ps"), ("cpu:znver4", "int8", "vpdpbusd"),
    ("cpu:znver3", "int8", "vpmaddubsw"), ("cpu:skylake-avx512", "int8", "vpmaddubsw"),
])
def test_each_cpu_gets_its_best_instruction_of_the_family(spec, family, instruction):
    target = parse_target(spec)
    kernel = dot_peaks.for_target(target, family)
    assert kernel.instruction.instruction == instruction and kernel.cores == target.cpu_spec().cores
    asm = dot_peaks.assembly(kernel, target)
    assert re.search(rf"\b{instruction}\b", asm)
    if kernel.amx:  # the tile configuration, and the permission request before it (SYS_arch_prctl)
        assert "ldtilecfg" in asm and "syscall" in asm
    else:
        assert not TILE.search(asm), "a CPU without AMX got a tile instruction"
    if instruction == "vpmaddubsw":  # the int8 kernels' sequence: pairs to int16, to int32 by ones, added
        assert "vpmaddwd" in asm and "vpdpbusd" not in asm
        assert ("%zmm" in asm) == (spec == "cpu:skylake-avx512")


@x86_only
def test_a_cpu_without_bf16_units_has_no_bf16_peak_and_says_why():
    with pytest.raises(ValueError, match="no bf16 peak on .*znver3.*no AVX512-BF16"):
        dot_peaks.for_target(parse_target("cpu:znver3"), "bf16")


def _expected_sum(kernel: dot_peaks.DotKernel) -> float:
    """What the accumulators add up to after one call from zero: one product per 2 ops, each
    2^-10 x 2^-10 (bf16) or 1 x 1 (int8)."""
    products = kernel.ops // 2
    return products * 2.0**-20 if kernel.family == "bf16" else float(products)


def _run_once(kernel: dot_peaks.DotKernel, target) -> float:
    import tvm

    buf = tvm.runtime.tensor(dot_peaks.scratch(kernel))
    dot_peaks.build(kernel, target).jit()["main"](buf, kernel.iters)
    results = buf.numpy()[:, :dot_peaks.OPERANDS // 4]
    return float(results.view("float32").astype(np.float64).sum() if kernel.family == "bf16"
                 else results.astype(np.int64).sum())


def _host_kernel(target, family: str) -> dot_peaks.DotKernel:
    try:
        return dot_peaks.for_target(target, family, iters=64)
    except ValueError as why:
        pytest.skip(str(why))


@pytest.mark.parametrize("family", dot_peaks.FAMILIES)
def test_the_hosts_kernel_computes_exactly_the_products_it_counts(family):
    kernel = _host_kernel(HOST, family)
    assert _run_once(kernel, HOST) == _expected_sum(kernel)
    assert all(g > 0 for g in dot_peaks.time_kernel(kernel, HOST, repeats=2, min_repeat_s=0.001))


@pytest.mark.parametrize("family", dot_peaks.FAMILIES)
def test_without_amx_the_vector_kernel_runs_here_too(family, monkeypatch):
    """SCHEDX_CPU_FLAGS plays this CPU without its tile unit: vdpbf16ps / vpdpbusd / vpmaddubsw."""
    from explorer.target.environment import cpu_flags

    if not any(f.startswith("amx") for f in cpu_flags()):
        pytest.skip("this CPU has no AMX: the host test ran its vector kernels")
    monkeypatch.setenv("SCHEDX_CPU_FLAGS", " ".join(f for f in cpu_flags() if not f.startswith("amx")))
    target = host_target()
    kernel = _host_kernel(target, family)
    assert not kernel.amx
    assert _run_once(kernel, target) == _expected_sum(kernel)


def test_the_families_are_measured_in_a_child_each_with_a_figure_or_a_reason():
    found = dot_peaks.measure_in_child(repeats=1)
    for family in dot_peaks.FAMILIES:
        entry = found[family]
        assert entry.get("gflops", 0) > 0 or entry["error"], entry
        if "gflops" in entry:
            assert entry["kernel"]["unit"] == ("GOPS" if family == "int8" else "GFLOPS")


# -- which peak a kernel reads against ---------------------------------------------------------------

def test_a_kernels_family_is_read_from_its_blocks_annotations():
    from tvm import te

    from explorer.passes.bf16_dense import dense_bf16
    from explorer.passes.qdq_int8 import dense_int8

    x = te.placeholder((4, 32), "float32", name="x")
    wb = te.placeholder((1, 16, 16, 2), "uint16", name="w")
    assert kernel_family(te.create_prim_func([x, wb, dense_bf16(x, wb)])) == "bf16"
    xq = te.placeholder((4, 32), "uint8", name="x")
    wq = te.placeholder((1, 8, 16, 4), "int8", name="w")
    assert kernel_family(te.create_prim_func([xq, wq, dense_int8(xq, wq, 64)])) == "int8"
    b = te.placeholder((32, 16), "float32", name="b")
    k = te.reduce_axis((0, 32), "k")
    mm = te.compute((4, 16), lambda i, j: te.sum(x[i, k] * b[k, j], axis=k), name="matmul")
    assert kernel_family(te.create_prim_func([x, b, mm])) == "fp32"
    assert family_of_name("resnet18/fused_conv2d_bf164_add6_add8_relu3") == "bf16"


def test_the_peaks_line_names_each_family_and_its_unit():
    peaks = (FamilyPeak("fp32", 477.0, "FMA kernel AVX512 16 lanes", "fp32"),
             FamilyPeak("bf16", 3339.0, "bf16 AMX tdpbf16ps kernel, 4 tiles", "bf16 AMX"),
             FamilyPeak("int8", None, "no int8 peak on x: ..."))
    assert peaks_line(peaks) == "peaks: fp32 477 GFLOPS, bf16 AMX 3339 GFLOPS, no int8 peak"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private calibration cache; calibrations of fixed figures, families 1000 GFLOPS bf16 and
    2000 GOPS int8 (measured ones counted), and no memory of earlier re-checks."""
    from explorer.target.environment import hardware_fingerprint

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(cal_mod, "_quiet_checked", {})
    monkeypatch.setattr(cal_mod, "_families_tried", set())
    monkeypatch.setattr(peak_check, "_recalibrated", {})
    measured = []
    families = (FamilyPeak("bf16", 1000.0, "bf16 AMX tdpbf16ps kernel, 4 tiles", "bf16 AMX", 1000.0),
                FamilyPeak("int8", 2000.0, "int8 AMX tdpbusd kernel, 4 tiles", "int8 AMX", 2000.0))
    monkeypatch.setattr(cal_mod, "measure_families", lambda repeats=5: measured.append("families") or families)
    monkeypatch.setattr(cal_mod, "measure_peaks", lambda: measured.append("all") or cal_mod.Calibration(
        hardware_fingerprint(), 400.0, 20.0, "now", cal_mod.CALIBRATION_VERSION, fma_gflops=400.0,
        fma_kernel="FMA kernel", numpy_gflops=300.0, families=families))
    return measured


def test_a_bf16_kernel_above_the_bf16_peak_raises_that_peak_only(cache):
    check = peak_check.within_peak(1200.04, "m/conv2d_bf16", family="bf16")  # within 1.25 times the 1000 measured
    assert check.peak_gflops == 1200.1 and check.family == "bf16"
    assert check.note == "above the calibrated bf16 peak: bf16 peak raised to 1200.1 GFLOPS measured by m/conv2d_bf16"
    stored = cal_mod.calibration()
    assert stored.peak_gflops == 400.0 and not stored.raised_by  # fp32 untouched
    assert stored.family("bf16").gflops == 1200.1 and stored.family("bf16").raised_by == "m/conv2d_bf16"
    assert stored.peak_for("int8") == 2000.0
    assert peak_check.within_peak(900.0, "m/dense_bf16", family="bf16").percent(900.0) == pytest.approx(75.0, 0.01)
    assert cache == ["all", "all"]  # measured once, again once when the kernel read above (then raised)


def test_an_int8_figure_reads_in_gops_against_the_int8_peak(cache):
    assert peak_check.within_peak(1800.0, "m/conv2d_nhwc_int8", family="int8").peak_gflops == 2000.0
    note = peak_check.within_peak(2500.0, "m/dense_int8", family="int8").note
    assert note.endswith("int8 peak raised to 2500.0 GOPS measured by m/dense_int8")


def test_an_old_calibration_keeps_fp32_has_its_families_measured_and_loses_a_bf16_raise(cache):
    """Written before families: the fp32 peak a bf16 kernel had raised falls back to the FMA kernel's."""
    from explorer.target.environment import hardware_fingerprint

    old = {"hardware": hardware_fingerprint(), "peak_gflops": 1346.2, "peak_gbps": 26.7, "measured_at": "then",
           "version": cal_mod.CALIBRATION_VERSION, "fma_gflops": 477.4, "fma_kernel": "FMA kernel AVX512 16 lanes",
           "numpy_gflops": 360.0, "raised_by": "resnet18/fused_conv2d_bf164_add6_add8_relu3",
           "cpu": host_cpu().llvm_cpu}
    path = cal_mod._cache_path(old["hardware"])
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(old))
    cal = cal_mod.calibration()
    assert (cal.peak_gflops, cal.raised_by, cal.measured_at) == (477.4, "", "then")
    assert cal.peak_for("bf16") == 1000.0 and cache == ["families"]
    stored = json.loads(path.read_text())
    assert [f["family"] for f in stored["families"]] == ["bf16", "int8"]
    assert cal_mod.calibration() == cal and cache == ["families"]  # stored: not measured again
    assert "bf16 AMX 1000 GFLOPS, int8 AMX 2000 GOPS" in cal.summary()


def test_measuring_an_int8_kernel_reads_it_against_the_int8_peak():
    """`schedx schedule` and the Schedule page: an int8 kernel's % is of the int8 peak (GOPS)."""
    from dataclasses import replace

    from tvm import te

    from explorer.kernels.kernel import make_kernel
    from explorer.measure import measure
    from explorer.passes.qdq_int8 import dense_int8

    x = te.placeholder((4, 32), "uint8", name="x")
    w = te.placeholder((1, 8, 16, 4), "int8", name="w")
    kernel = make_kernel(te.create_prim_func([x, w, dense_int8(x, w, 64)]), name="dense_int8", title="int8 dense",
                         source="test", spec="dense_int8:M=4,N=16,K=32", params={})
    other = cal_mod.Calibration("another machine", 1.0, 20.0, "now", cal_mod.CALIBRATION_VERSION,
                                families=(FamilyPeak("int8", 1e6, "int8 AMX tdpbusd kernel, 4 tiles", "int8 AMX"),))
    r = measure(kernel, repeat=2, min_repeat_s=0.001, isolate=False, peaks=other)
    assert r.ok and r.peak_family == "int8" and r.peak_gflops == 1e6 and not r.peak_note  # not the fp32 1.0
    assert r.percent_of_peak == pytest.approx(100 * r.gflops / 1e6)
    tiny = replace(other, families=(replace(other.families[0], gflops=1e-6),))
    r = measure(kernel, repeat=2, min_repeat_s=0.001, isolate=False, peaks=tiny)
    assert r.percent_of_peak <= 100.0 and "int8 peak raised to" in r.peak_note and "GOPS" in r.peak_note


def test_a_machine_seen_without_its_tiles_reads_bf16_against_vdpbf16ps_and_keeps_the_tiles_peak(cache, monkeypatch):
    """Same hardware fingerprint, AMX hidden (SCHEDX_CPU_FLAGS, a VM): the stored AMX peaks are not
    this CPU's; its vector instructions' peaks are measured once and kept beside the tiles' ones."""
    from explorer.measure import dot_peaks as dp

    amx = {"bf16": "amx", "int8": "amx"}
    vector = {"bf16": "avx512bf16", "int8": "vnni"}
    seen = {"isas": amx}
    monkeypatch.setattr(dp, "host_instructions", lambda: seen["isas"])
    tiles = (FamilyPeak("bf16", 3000.0, "bf16 AMX tdpbf16ps kernel, 4 tiles", "bf16 AMX", 3000.0, isa="amx"),
             FamilyPeak("int8", 6000.0, "int8 AMX tdpbusd kernel, 4 tiles", "int8 AMX", 6000.0, isa="amx"))
    vectors = (FamilyPeak("bf16", 110.0, "bf16 AVX512-BF16 vdpbf16ps kernel, 12 accumulators", "bf16 AVX512-BF16",
                          110.0, isa="avx512bf16"),
               FamilyPeak("int8", 900.0, "int8 VNNI vpdpbusd kernel, 12 accumulators", "int8 VNNI", 900.0, isa="vnni"))
    monkeypatch.setattr(cal_mod, "measure_families",
                        lambda repeats=5: cache.append("families") or (tiles if seen["isas"] == amx else vectors))
    base = cal_mod.calibration()  # the fixture's calibration (entries of no recorded instruction set) ...
    cal_mod.save(replace(base, families=tiles))  # ... stored as one measured with the tiles
    assert cal_mod.calibration().peak_for("bf16") == 3000.0 and cache == ["all"]
    seen["isas"] = vector  # the tiles hidden
    hidden = cal_mod.calibration()
    assert hidden.peak_for("bf16") == 110.0 and hidden.peak_for("int8") == 900.0 and cache == ["all", "families"]
    assert peaks_line(hidden.peaks()) == "peaks: fp32 400 GFLOPS, bf16 AVX512-BF16 110 GFLOPS, int8 VNNI 900 GOPS"
    assert cal_mod.calibration() == hidden and cache == ["all", "families"]  # stored: not measured again
    seen["isas"] = amx  # shown again: the tiles' peaks, kept, not measured again
    assert cal_mod.calibration().peak_for("bf16") == 3000.0 and cache == ["all", "families"]
    # a raise of the vector peak stays the vector instruction's (measured again first: the same figures)
    seen["isas"] = vector
    monkeypatch.setattr(cal_mod, "measure_peaks", lambda: replace(base, families=vectors))
    peak_check.within_peak(130.0, "m/conv2d_bf16", family="bf16")  # within 1.25 times the 110 measured
    assert cal_mod.calibration().family("bf16").raised_by == "m/conv2d_bf16"
    seen["isas"] = amx
    assert cal_mod.calibration().family("bf16") == tiles[0]


def test_an_entry_stored_before_instruction_sets_were_recorded_reads_its_own_from_the_label():
    old = FamilyPeak("bf16", 3000.0, "bf16 AMX tdpbf16ps kernel, 4 tiles", "bf16 AMX").to_dict()
    del old["isa"]
    assert FamilyPeak.from_dict(old).isa == "amx" and not FamilyPeak.from_dict(old).matches("avx512bf16")
    assert FamilyPeak("bf16", 120.0, "bf16 kernel").matches("avx512bf16")  # no isa, a figure: any
    assert not FamilyPeak("bf16", None, "not measured").matches("avx512bf16")  # failed: measured again


def test_a_failed_family_measurement_is_measured_again_once_a_process_and_never_hides_a_stored_peak():
    from explorer.measure.calibration import Calibration

    vector = FamilyPeak("bf16", 119.9, "bf16 AVX512-BF16 vdpbf16ps kernel, 12 accumulators", "bf16 AVX512-BF16",
                        isa="avx512bf16")
    tiles = FamilyPeak("bf16", 2272.7, "bf16 AMX tdpbf16ps kernel, 4 tiles", "bf16 AMX", isa="amx")
    cal = Calibration("hw", 300.0, 20.0, "now", 3, families=(FamilyPeak("bf16", None, "child crashed"),),
                      other_families=(vector, tiles))
    assert cal.for_instructions({"bf16": "amx"}).family("bf16") == tiles
    assert cal.for_instructions({"bf16": "avx512bf16"}).family("bf16") == vector
    alone = Calibration("hw", 300.0, 20.0, "now", 3, families=(FamilyPeak("bf16", None, "child crashed"),))
    assert "bf16" in alone.for_instructions({"bf16": "amx"}).missing


def test_this_cpu_without_its_tiles_has_vector_instructions_in_each_family(monkeypatch):
    from explorer.target.environment import cpu_flags

    if not any(f.startswith("amx") for f in cpu_flags()):
        pytest.skip("this CPU has no AMX to hide")
    assert dot_peaks.host_instructions()["bf16"] == "amx"
    monkeypatch.setenv("SCHEDX_CPU_FLAGS", " ".join(f for f in cpu_flags() if not f.startswith("amx")))
    assert dot_peaks.host_instructions() == {"bf16": "avx512bf16", "int8": "vnni"}
