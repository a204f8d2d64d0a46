"""Where a bf16 weight product pays, per target (:func:`explorer.passes.bf16_dense.why_fp32`): on
AMX tiles every product the tiles take, the small ones on one core; on vdpbf16ps only few rows by
many weights. Compile-only (AMX and AVX512-BF16 targets built on any host)."""

from __future__ import annotations

import pytest

from explorer.passes.bf16_dense import bf16_kernels, bf16_products, why_fp32
from explorer.precision import bf16_module
from explorer.target import parse_target
from explorer.target.host import host_cpu
from tests.bf16_models import attention_relax


@pytest.mark.parametrize("m, n, k", [(16, 64, 64), (16, 192, 64), (64, 64, 256), (128, 768, 768)])
def test_amx_tiles_take_every_product_they_fit(m, n, k):
    assert why_fp32(m, n, k, "amx") is None


@pytest.mark.parametrize("m, n, k, isa", [(8, 256, 256, "avx512bf16"), (16, 768, 768, "avx512bf16"),
                                          (1, 1000, 512, "avx512bf16"), (8, 768, 256, "amx"),
                                          (1, 10, 64, "avx512bf16")])
def test_vdpbf16ps_takes_few_rows_by_many_weights(m, n, k, isa):
    """(8 rows on an AMX CPU: not a whole tile, so vdpbf16ps and its rule; 1 x 64 -> 10: too small to matter)"""
    assert why_fp32(m, n, k, isa) is None


@pytest.mark.parametrize("m, n, k, why", [(64, 768, 768, "64 rows > 16"), (16, 64, 256, "N = 64"),
                                          (7, 192, 64, "N = 192"), (16, 256, 64, "16384")])
def test_vdpbf16ps_keeps_the_rest_in_fp32_and_says_why(m, n, k, why):
    for isa in ("avx512bf16", "amx" if m % 16 else "avx512bf16"):
        text = why_fp32(m, n, k, isa)
        assert text is not None and why in text and text.startswith(f"{m}x{k} -> {n}:"), text


def test_siblings_are_judged_as_the_one_kernel_they_become():
    """Q, K and V of 16 x 64 (64 outputs each) are one product of 192 outputs: kept on vdpbf16ps
    (N < 256), all three; AMX tiles take them as one kernel. (Its heads' products, 16 x 32 x 16,
    stay fp32 by attention's own rule.)"""
    mod = attention_relax(seq=16, hidden=64)
    kernels, kept = bf16_kernels(mod["main"], "avx512bf16")
    assert kernels == [] and len(kept) == 3 and all(line.startswith("16x64 -> 192:") for line in kept)
    kernels, kept = bf16_kernels(mod["main"], "amx")
    assert [len(k) for k in kernels] == [3] and kept == []
    _, converted, _ = bf16_products(mod)  # no CPU named: every product the kernel takes
    assert converted == 3


def test_a_bf16_build_lists_the_products_it_kept_in_fp32_per_target():
    """What :func:`explorer.precision.for_precision` puts in the build's list of what stayed fp32
    (the heads' products, two a build, run in bf16 by attention's rule)."""
    for spec in ("cpu:sapphirerapids", "cpu:znver4"):  # 16 x 256 -> 768 pays on both
        _, converted, kept = bf16_module(attention_relax(seq=16, hidden=256), parse_target(spec))
        assert converted == 3 + 2 and not any("weight product(s)" in line for line in kept), spec
    _, converted, kept = bf16_module(attention_relax(seq=64, hidden=256), parse_target("cpu:znver4"))
    assert converted == 2 and [line for line in kept if "weight product(s)" in line] == [
        "3 weight product(s) where bf16 does not pay on the target's vdpbf16ps (rows x K -> N): 64x256 -> 768 x3"]
    _, converted, kept = bf16_module(attention_relax(seq=64, hidden=256), parse_target("cpu:sapphirerapids"))
    assert converted == 3 + 2 and not any("weight product(s)" in line for line in kept)


def test_compute_bound_products_follow_the_measured_vdpbf16ps_rate_as_convolutions_do():
    """Many rows (compute-bound) stay fp32 on vdpbf16ps unless it was measured fast on the machine
    (``fast_vectors``, the rate where convolutions pay); few rows by few weights stay fp32 either way."""
    assert "64 rows > 16" in why_fp32(64, 768, 768, "avx512bf16")
    assert why_fp32(64, 768, 768, "avx512bf16", fast_vectors=True) is None
    assert "N = 64" in why_fp32(16, 64, 256, "avx512bf16", fast_vectors=True)
    mod = attention_relax(seq=64, hidden=256)
    assert bf16_kernels(mod["main"], "avx512bf16", fast_vectors=True)[1] == []


def test_on_this_machine_a_fast_measured_vdpbf16ps_takes_the_compute_bound_products(tmp_path, monkeypatch):
    """This CPU seen without its tiles (SCHEDX_CPU_FLAGS), its calibration stored at two vdpbf16ps rates:
    at half the FMA rate (what it measured) BERT-like 64-row products stay fp32, at the convolutions'
    rate they run in bf16: one measured rate decides both."""
    import importlib

    from explorer.measure.families import FamilyPeak
    from explorer.passes.bf16_conv import VECTOR_MIN_RATE
    from explorer.target import host_target
    from explorer.target.environment import cpu_flags, hardware_fingerprint

    if "avx512_bf16" not in cpu_flags():
        pytest.skip("this CPU has no AVX512-BF16")
    calibration = importlib.import_module("explorer.measure.calibration")  # the package's `calibration` is a function
    monkeypatch.setenv("SCHEDX_CPU_FLAGS", " ".join(f for f in cpu_flags() if not f.startswith("amx")))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for rate, converted in ((0.5, 2), (VECTOR_MIN_RATE, 3 + 2)):
        vector = FamilyPeak("bf16", 477.0 * rate, "bf16 AVX512-BF16 vdpbf16ps kernel", "bf16 AVX512-BF16",
                            477.0 * rate, isa="avx512bf16")
        calibration.save(calibration.Calibration(hardware_fingerprint(), 480.0, 20.0, "now",
                                                 calibration.CALIBRATION_VERSION, fma_gflops=477.0,
                                                 numpy_gflops=300.0, families=(vector,), cpu=host_cpu().llvm_cpu))
        _, done, kept = bf16_module(attention_relax(seq=64, hidden=256), host_target())
        assert done == converted, (rate, kept)
        assert any("64x256 -> 768 x3" in line for line in kept) == (converted == 2)
