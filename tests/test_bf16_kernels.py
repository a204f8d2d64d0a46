"""bf16 products: the dense_bf16 kernel, its AVX512-BF16 and AMX-BF16 intrinsics and the default
rule that tiles around them. Compile-only per target (any host); the numeric runs only where
/proc/cpuinfo lists the instructions."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tvm

from explorer.passes.bf16_dense import bf16_bits, bf16_round, pack_weights
from explorer.schedule import bf16_dot
from explorer.schedule.defaults import default_schedule
from explorer.target import parse_target
from tests.bf16_products import check_dense_bf16, dense_bf16_func, run_dense_bf16
from tests.cpu_marks import NEEDS_AMX, NEEDS_BF16


def _built(target_spec: str, m: int = 32, n: int = 64, k: int = 64, isa: str | None = None):
    target = parse_target(target_spec)
    cpu = target.cpu_spec()
    if isa is not None:
        cpu = dataclasses.replace(cpu, bf16_dot=isa)
    func, choice = default_schedule(dense_bf16_func(m, n, k), cpu)
    return tvm.compile(tvm.IRModule({"main": func}), target=target.tvm()), choice


def _asm(lib) -> str:
    return lib.mod.inspect_source("asm")


def test_weights_pack_into_panels_of_16_channels_by_pairs_rounded_to_nearest_even():
    w = np.arange(4 * 20, dtype=np.float32).reshape(4, 20) + 0.5
    packed = pack_weights(w)
    assert packed.shape == (2, 2, 16, 2) and packed.dtype == np.uint16
    assert packed[1, 1, 3, 0] == bf16_bits(w[2, 19]) and packed[1, 1, 4:, :].max() == 0  # padded channels are 0
    # nearest even: 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7, and rounds to 1.0
    assert bf16_round(np.float32([1 + 2 ** -8, 1 + 3 * 2 ** -8]))[0] == 1.0
    assert bf16_round(np.float32([1 + 3 * 2 ** -8]))[0] == np.float32(1 + 2 ** -6)


@pytest.mark.parametrize("spec", ["cpu:sapphirerapids", "cpu:znver4"])
def test_avx512_bf16_targets_get_vdpbf16ps_in_the_dense_kernel(spec):
    lib, choice = _built(spec, isa="avx512bf16")
    assert choice.rule == "full" and "vdpbf16ps" in choice.steps[0], choice
    assert "vdpbf16ps" in _asm(lib)


def test_znver4_has_no_amx_and_gets_the_avx512_kernel_by_default():
    assert parse_target("cpu:znver4").cpu_spec().bf16_dot == "avx512bf16"
    lib, choice = _built("cpu:znver4")
    assert "vdpbf16ps" in _asm(lib) and "tdpbf16ps" not in _asm(lib)


def test_sapphirerapids_gets_amx_tiles_and_the_kernel_asks_linux_for_tile_state():
    lib, choice = _built("cpu:sapphirerapids", m=32, n=32, k=64)
    assert "AMX" in choice.steps[0], choice
    asm = _asm(lib)
    assert "tdpbf16ps" in asm and "tileloadd" in asm and "ldtilecfg" in asm and "tilestored" in asm
    assert "tilerelease" in asm  # the tile state released: no configuration left for another library
    # arch_prctl(ARCH_REQ_XCOMP_PERM=0x1023, XFEATURE_XTILEDATA=18) through syscall(158, ...), once per process
    assert "syscall" in asm and "$158" in asm and "$4131" in asm and "$18" in asm


def test_amx_falls_back_to_vdpbf16ps_where_rows_are_not_a_multiple_of_16():
    lib, choice = _built("cpu:sapphirerapids", m=8, n=32, k=64)
    assert "vdpbf16ps" in choice.steps[0] and "tdpbf16ps" not in _asm(lib)


@pytest.mark.parametrize("spec", ["cpu:sapphirerapids", "cpu:znver4"])
@pytest.mark.parametrize("m", [1, 3])
def test_one_row_products_get_vdpbf16ps_too(spec, m):
    """A classifier's one-row product (ResNet-18's 1x512 -> 1000) failed to tensorize (the block had
    no row iterator left, the intrinsic's description one) and fell back to a scalar loop: ~1 ms."""
    lib, choice = _built(spec, m=m, n=1008, k=512)
    assert choice.rule == "full" and "vdpbf16ps, 1 rows" in choice.steps[0], choice
    assert "vdpbf16ps" in _asm(lib)


def test_avx2_target_has_no_bf16_kernel_and_says_why():
    target = parse_target("cpu:x86-64-v3")
    assert target.cpu_spec().bf16_dot == "" and "AVX512-BF16" in bf16_dot.why_not(target.features, target.arch)
    func, choice = default_schedule(dense_bf16_func(8, 32, 64), target.cpu_spec())
    assert "no dot-product intrinsic" in " ".join(choice.steps) and "AVX512-BF16" in " ".join(choice.steps)


@NEEDS_BF16
@pytest.mark.parametrize("m, n, k", [(32, 64, 64), (7, 48, 130), (1, 16, 2)])
def test_vdpbf16ps_kernel_matches_numpy_at_the_bf16_tolerance(m, n, k):
    lib, _ = _built("cpu", m, n, k, isa="avx512bf16")
    check_dense_bf16(*run_dense_bf16(lib, m, n, k))


@NEEDS_AMX
def test_amx_kernel_matches_numpy_at_the_bf16_tolerance():
    lib, choice = _built("cpu", 48, 64, 96, isa="amx")
    assert "AMX" in choice.steps[0]
    check_dense_bf16(*run_dense_bf16(lib, 48, 64, 96))
