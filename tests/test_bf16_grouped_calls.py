"""AMX bf16 products with several grids of tiles a call (one ``ldtilecfg`` and ``tilerelease`` for
all, the next call's weight panels prefetched, the block's init tensorized into no code): what
:func:`explorer.schedule.defaults.bf16.tile_bf16` picks where the rows and columns give enough calls.
Compile-level checks on any host; the numeric ones where /proc/cpuinfo lists AMX-BF16."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tvm
from tvm import te

from explorer.passes.bf16_attention import batch_dense_bf16
from explorer.passes.bf16_dense import bf16_round, dense_bf16, pack_weights
from explorer.schedule.bf16_dot import AmxBf16
from explorer.schedule.defaults import default_schedule
from explorer.schedule.intrinsics import register_for_trace
from explorer.target import parse_target
from tests.cpu_marks import NEEDS_AMX


def _dense(m: int, n: int, k: int) -> tvm.tirx.PrimFunc:
    x = te.placeholder((1, m, k), "float32", "x")
    w = te.placeholder((n // 16, k // 2, 16, 2), "uint16", "w")
    b = te.placeholder((n,), "float32", "b")
    y = dense_bf16(x, w)
    return te.create_prim_func([x, w, b, te.compute(y.shape, lambda z, i, j: y[z, i, j] + b[j], name="bias")])


def _scores(heads: int, m: int, n: int, k: int) -> tvm.tirx.PrimFunc:
    a, b = te.placeholder((1, heads, m, k), "float32", "a"), te.placeholder((1, heads, k, n), "float32", "b")
    y = batch_dense_bf16(a, b)
    return te.create_prim_func([a, b, te.compute(y.shape, lambda *i: y[i] * 0.125, name="scale")])


def _built(func, spec: str = "cpu", cores: int = 1):
    target = parse_target(spec)
    cpu = dataclasses.replace(target.cpu_spec(), cores=cores)
    scheduled, choice = default_schedule(func, cpu)
    return tvm.compile(tvm.IRModule({"main": scheduled}), target=target.tvm()), choice


def test_a_128_row_product_takes_4_x_2_grids_a_call_with_one_tile_config():
    lib, choice = _built(_dense(128, 256, 64), "cpu:sapphirerapids")
    assert "_g4x2_zero_u" in choice.steps[0] and "4 x 2 grids a call" in choice.steps[0], choice
    asm = lib.mod.inspect_source("asm")
    assert asm.count("ldtilecfg") == 1 and asm.count("tilerelease") == 1 and "tdpbf16ps" in asm
    assert "prefetcht1" in asm  # the next call's weight panels, into L2


def test_few_calls_a_core_keep_one_grid_a_call():
    _, choice = _built(_dense(32, 64, 1024), "cpu:sapphirerapids", cores=2)
    assert "grids a call" not in choice.steps[0] and "AMX" in choice.steps[0], choice
    assert "parallel outside" in choice.steps[0], choice


def test_a_product_too_small_for_two_cores_runs_on_one_in_one_call():
    """A small encoder's 16 x 64 x 64 product (its fork and join cost more than its tiles: 4x slower
    than fp32 at 2 threads) runs on one core, every grid after one tile configuration."""
    lib, choice = _built(_dense(16, 64, 64), "cpu:sapphirerapids", cores=2)
    assert "on one core" in choice.steps[0] and "1 x 2 grids a call" in choice.steps[0], choice
    asm = lib.mod.inspect_source("asm")
    assert asm.count("ldtilecfg") == 1 and "tdpbf16ps" in asm


@NEEDS_AMX
@pytest.mark.parametrize("m, n, k", [(16, 64, 64), (16, 48, 96), (64, 256, 64)])  # 1 x 2, 1 x 1, 2 x 2 tiles a grid
def test_a_product_on_one_core_matches_numpy(m, n, k):
    lib, choice = _built(_dense(m, n, k), cores=2)
    assert "on one core" in choice.steps[0] and "AMX" in choice.steps[0], choice
    rng = np.random.default_rng(7)
    x, w, b = (rng.standard_normal(s).astype("float32") for s in ((1, m, k), (k, n), (n,)))
    out = tvm.runtime.tensor(np.zeros((1, m, n), "float32"))
    lib["main"](*(tvm.runtime.tensor(v) for v in (x, pack_weights(w), b)), out)
    exact = bf16_round(x[0]).astype(np.float64) @ bf16_round(w).astype(np.float64) + b
    assert np.abs(out.numpy()[0] - exact).max() <= 1e-5 * np.abs(exact).max()


def test_grouped_names_register_again_from_a_trace():
    from tvm.s_tir import TensorIntrin

    dot = AmxBf16(768, 2, 2, zero=True, row_groups=4, col_groups=2, update=True, kblocks=2)
    register_for_trace(f'sch.tensorize(block=b, tensor_intrin="{dot.name}")')
    assert TensorIntrin.get(dot.name, allow_missing=True) is not None
    assert (dot.rows, dot.cols, dot.function) == (128, 64, "schedx_amx_bf16_tile_2x2_g4x2_kb2_zero")


@NEEDS_AMX
@pytest.mark.parametrize("k, kblocks", [(96, ""), (768, "_kb2")])  # K=768: two K blocks, the second from the stored sums
def test_grouped_product_matches_numpy(k, kblocks):
    m, n = 128, 256
    lib, choice = _built(_dense(m, n, k))
    assert "4 x 2 grids a call" in choice.steps[0] and f"_g4x2{kblocks}_zero_u" in choice.steps[0], choice
    rng = np.random.default_rng(5)
    x, w, b = (rng.standard_normal(s).astype("float32") for s in ((1, m, k), (k, n), (n,)))
    out = tvm.runtime.tensor(np.zeros((1, m, n), "float32"))
    lib["main"](*(tvm.runtime.tensor(v) for v in (x, pack_weights(w), b)), out)
    exact = bf16_round(x[0]).astype(np.float64) @ bf16_round(w).astype(np.float64) + b
    assert np.abs(out.numpy()[0] - exact).max() <= 1e-5 * np.abs(exact).max()  # bf16 products, fp32 sums


@NEEDS_AMX
def test_grouped_attention_product_matches_numpy_across_heads():
    heads, m, n, k = 3, 64, 128, 32  # (under 2^21 multiply-adds: one core, a head's whole product a call)
    lib, choice = _built(_scores(heads, m, n, k))
    assert "2 x 4 grids a call" in choice.steps[0] and "on one core" in choice.steps[0], choice
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((1, heads, m, k)).astype("float32"), rng.standard_normal((1, heads, k, n)).astype("float32")
    out = tvm.runtime.tensor(np.zeros((1, heads, m, n), "float32"))
    lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), out)
    exact = (bf16_round(a).astype(np.float64) @ bf16_round(b).astype(np.float64)) * 0.125
    assert np.abs(out.numpy() - exact).max() <= 1e-5 * np.abs(exact).max()


@pytest.mark.parametrize("groups", [(1, 1, 1), (4, 2, 1), (4, 1, 8)])
def test_each_call_loads_the_tile_config_once(groups):
    ir = AmxBf16(64 * groups[2], 2, 2, zero=True, row_groups=groups[0], col_groups=groups[1], kblocks=groups[2]).llvm_ir
    assert ir.count("call void @llvm.x86.ldtilecfg") == 1 and ir.count("call void @llvm.x86.tilerelease") == 1
    assert ("call void @llvm.prefetch" in ir) == (groups != (1, 1, 1))
    assert ("label %cload" in ir) == (groups[2] > 1)  # K in blocks: the first from tilezero, the next from the sums


def test_a_call_takes_the_most_grids_that_leave_enough_calls_and_keep_its_sums_in_l1():
    from explorer.schedule.defaults.amx_calls import MAX_CALL_SUMS, call_fits, most_dividing

    grid_sums = 32 * 32  # a 2 x 2 grid of 16 x 16 tiles
    assert most_dividing(8, lambda g: call_fits(64, grid_sums, 2, g)) == 8  # 8 calls: 4 a core
    assert most_dividing(8, lambda g: call_fits(64, grid_sums, 4, g)) == 4  # 16 calls: 4 a core
    assert not call_fits(1024, grid_sums, 1, MAX_CALL_SUMS // (grid_sums * 4) + 1)  # sums past L1
    assert most_dividing(7, lambda g: g % 2 == 0) == 1  # no divisor fits: one grid a call
