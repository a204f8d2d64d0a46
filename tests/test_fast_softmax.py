"""Softmax as the pipeline writes it (:mod:`explorer.passes.fast_softmax`): rows normalised by one
reciprocal each, scheduled by default row by row, computing what numpy computes along any axis."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax, te

from explorer.passes.fast_math import FastMathTransform
from explorer.passes.fast_softmax import fast_softmax
from explorer.schedule.defaults import CpuSpec, default_schedule
from explorer.target import host_target

AVX512 = CpuSpec(vector_bits=512, registers=32, cores=2, arch="x86_64")
AVX2 = CpuSpec(vector_bits=256, registers=16, cores=2, arch="x86_64")


def _softmax_func(shape, axis):
    x = te.placeholder(shape, name="x")
    return te.create_prim_func([x, fast_softmax(x, axis)]).with_attr("global_symbol", "main")


def _numpy_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _build(func):
    return tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target=host_target().tvm())


@pytest.mark.parametrize("cpu", [AVX2, AVX512], ids=["avx2", "avx512"])
@pytest.mark.parametrize("shape,axis", [((3, 40, 64), -1), ((2, 5, 96), 1), ((6, 24), -1)],
                         ids=["last-axis", "middle-axis", "two-dims"])
def test_scheduled_softmax_matches_numpy(cpu, shape, axis):
    """Row by row over the last axis, block by block over another; the same numbers either way.
    Compiled for both vector widths, run where this machine has them."""
    func, choice = default_schedule(_softmax_func(shape, axis), cpu)
    assert choice.rule == "full", choice
    if axis == -1 and shape[-1] % cpu.lanes("float32") == 0:  # (rows of 24 on AVX-512: block by block)
        assert "one loop (T_softmax_norm)" in choice.steps[-1], choice.steps
    if cpu.vector_bits > (host_target().vector_width or 128):
        tvm.compile(tvm.IRModule({"main": func}), target={"kind": "llvm", "mcpu": "skylake-avx512"})
        return
    x = (np.random.default_rng(4).standard_normal(shape) * 6).astype("float32")
    out = tvm.runtime.tensor(np.full(shape, np.nan, "float32"))
    _build(func)["main"](tvm.runtime.tensor(x), out)
    np.testing.assert_allclose(out.numpy(), _numpy_softmax(x, axis), rtol=2e-6, atol=1e-7)


def test_the_rows_are_multiplied_by_their_reciprocal_not_divided():
    """One division a row (the reciprocal, hoisted out of the row's vectors), none per element:
    a vector division per 16 values was the kernel's largest cost after the exponentials."""
    func, _ = default_schedule(_softmax_func((64, 128), -1), host_target().cpu_spec())
    asm = _build(func).mod.inspect_source("asm")
    if "vdivss" not in asm and "divss" not in asm:
        pytest.skip("not an x86 host")
    assert "vdivps" not in asm and "divps" not in asm.replace("vdivps", "")


def test_the_pipeline_softmax_is_this_one():
    """FastMathTransform writes ``relax.nn.softmax`` as this softmax (its reciprocal block)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 8, 32), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.softmax(x, axis=-1))
        bb.emit_func_output(out)
    mod = FastMathTransform(bb.get())
    funcs = [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    assert len(funcs) == 1 and "T_softmax_recip" in funcs[0].script()


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_the_softmax_keeps_its_input_dtype(dtype):
    """A float16 softmax stays float16 (its reciprocal in the input's type): an fp16 model's
    softmax read by an fp16 matmul imported with mismatched types when the reciprocal was 1.0 / x."""
    x = te.placeholder((4, 16), dtype)
    assert fast_softmax(x).dtype == dtype
