"""A transformer's weight products at bf16 keep their ``[1, M, K]`` activations (no reshape around
``dense_bf16``), so the bias, residual and activation after them fuse into the product's kernel,
and that epilogue runs per tile, right after the tile's call (AMX tiles and vdpbf16ps alike). Compile-only per target
(any host); the numeric run only where /proc/cpuinfo lists AMX-BF16."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tvm
from tvm import relax, te

from explorer.passes.bf16_dense import bf16_products, bf16_round, dense_bf16, pack_weights
from explorer.schedule.defaults import default_schedule
from explorer.target import parse_target
from tests.cpu_marks import NEEDS_AMX, NEEDS_BF16

M, N, K = 32, 64, 96


def _fused_func(m: int = M, rows_to: int | None = None) -> tvm.tirx.PrimFunc:
    """``dense_bf16(x) + bias + residual`` on ``[1, m, K]``, as FuseOps leaves a BERT product
    (``rows_to``: the kernel's rows padded, the epilogue reading the real ones, as a ViT's)."""
    x = te.placeholder((1, m, K), "float32", "x")
    w = te.placeholder((N // 16, K // 2, 16, 2), "uint16", "w")
    bias, residual = te.placeholder((N,), "float32", "bias"), te.placeholder((1, m, N), "float32", "residual")
    y = dense_bf16(x, w, rows_to=rows_to)
    out = te.compute((1, m, N), lambda b, i, j: y[b, i, j] + bias[j] + residual[b, i, j], name="epilogue")
    return te.create_prim_func([x, w, bias, residual, out])


def _built(spec: str, m: int = M, rows_to: int | None = None):
    target = parse_target(spec)
    func, choice = default_schedule(_fused_func(m, rows_to), target.cpu_spec())
    return tvm.compile(tvm.IRModule({"main": func}), target=target.tvm()), choice


def test_hidden_states_reach_the_bf16_product_without_a_reshape():
    bb = relax.BlockBuilder()
    rng = np.random.default_rng(0)
    x = relax.Var("x", relax.TensorType((1, M, K), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, relax.const(rng.standard_normal((K, N)).astype("float32"))))
            out = bb.emit_output(relax.op.add(y, relax.const(rng.standard_normal(N).astype("float32"))))
        bb.emit_func_output(out)
    mod, converted, _ = bf16_products(bb.get())
    text = mod.script()
    assert converted == 1 and "dense_bf16" in text and "R.reshape" not in text and "R.matmul" not in text


@pytest.mark.parametrize("m, rows_to", [(M, None), (29, 32)])  # (29 rows padded to two whole tiles)
def test_sapphirerapids_finishes_each_amx_tile_with_its_epilogue(m, rows_to):
    lib, choice = _built("cpu:sapphirerapids", m, rows_to)
    assert choice.rule == "full" and "AMX" in choice.steps[0], choice
    assert "epilogue per tile" in choice.steps[0], choice
    assert "tdpbf16ps" in lib.mod.inspect_source("asm")


@pytest.mark.parametrize("m, rows_to", [(M, None), (29, 32)])
def test_znver4_finishes_each_vdpbf16ps_tile_with_its_epilogue_too(m, rows_to):
    """As on AMX tiles: before, the epilogue was a pass of its own over the whole output (and a
    padded product's slice a copy of it)."""
    lib, choice = _built("cpu:znver4", m, rows_to)
    assert "vdpbf16ps" in choice.steps[0] and "epilogue per tile" in choice.steps[0], choice
    assert len(choice.steps) == 2, choice  # the product (its epilogue inside) and the packing, nothing after
    assert "vdpbf16ps" in lib.mod.inspect_source("asm")


def _check_fused(lib, m: int = M):
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, m, K)).astype("float32"), rng.standard_normal((K, N)).astype("float32")
    bias, residual = rng.standard_normal(N).astype("float32"), rng.standard_normal((1, m, N)).astype("float32")
    out = tvm.runtime.tensor(np.zeros((1, m, N), "float32"))
    args = [tvm.runtime.tensor(a) for a in (x, pack_weights(w), bias, residual)]
    lib["main"](*args, out)
    got = out.numpy()
    exact = bf16_round(x).astype(np.float64) @ bf16_round(w).astype(np.float64) + bias + residual
    assert np.abs(got - exact).max() <= 1e-5 * np.abs(exact).max()  # bf16 products, fp32 sums and epilogue
    ref = x @ w + bias + residual
    assert np.abs(got - ref).max() <= 1e-2 * np.abs(ref).max()  # the bf16 tolerance against fp32


@NEEDS_AMX
@pytest.mark.parametrize("m, rows_to", [(M, None), (29, 32)])
def test_the_fused_amx_product_matches_numpy_at_the_bf16_tolerance(m, rows_to):
    lib, choice = _built("cpu", m, rows_to)
    assert "AMX" in choice.steps[0] and "per tile" in choice.steps[0], choice
    _check_fused(lib, m)


@NEEDS_BF16
@pytest.mark.parametrize("m, rows_to", [(M, None), (29, 32)])
def test_the_fused_vdpbf16ps_product_matches_numpy_at_the_bf16_tolerance(m, rows_to):
    target = parse_target("cpu")
    cpu = dataclasses.replace(target.cpu_spec(), bf16_dot="avx512bf16")  # (an AMX CPU: its vector path)
    func, choice = default_schedule(_fused_func(m, rows_to), cpu)
    assert "epilogue per tile" in choice.steps[0], choice
    _check_fused(tvm.compile(tvm.IRModule({"main": func}), target=target.tvm()), m)
