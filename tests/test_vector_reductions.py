"""Reductions with no vector axis of their own (a min over a whole tensor for dynamic quantization,
layer norm's and softmax's row sums): their innermost reduction runs as a vector of partial
results (rfactor), reduced once at the end; decisions and instructions for AVX2 and AVX-512
(compile only), values on the host."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from tvm import te, topi

from explorer.measure.verify import compare
from explorer.schedule.codegen import code_views
from explorer.schedule.defaults import default_schedule
from explorer.schedule.defaults.machine import CpuSpec
from explorer.target import parse_target

CPUS = {"cpu:x86-64-v3": (CpuSpec(vector_bits=256, registers=16, cores=2, arch="x86_64"), "ymm"),
        "cpu:skylake-avx512": (CpuSpec(vector_bits=512, registers=32, cores=2, arch="x86_64"), "zmm")}


def _min_all(rows: int = 32, cols: int = 512):
    x = te.placeholder((rows, cols), "float32", name="x")
    return te.create_prim_func([x, topi.min(x)]), [(rows, cols)], lambda a: a.min()


def _row_sums(rows: int = 40, cols: int = 384):
    x = te.placeholder((rows, cols), "float32", name="x")
    return te.create_prim_func([x, topi.sum(x, axis=1)]), [(rows, cols)], lambda a: a.sum(axis=1)


def _group_sums(shape=(2, 8, 4, 100)):
    """Two row axes, two reduction axes, the inner one no vector divides (a group norm's sums)."""
    x = te.placeholder(shape, "float32", name="x")
    return te.create_prim_func([x, topi.sum(x, axis=(2, 3))]), [shape], lambda a: a.sum(axis=(2, 3))


def _column_sums(rows: int = 384, cols: int = 40):
    x = te.placeholder((rows, cols), "float32", name="x")
    return te.create_prim_func([x, topi.sum(x, axis=0)]), [(rows, cols)], lambda a: a.sum(axis=0)


@pytest.mark.parametrize("spec", list(CPUS))
@pytest.mark.parametrize("make, words", [
    (_min_all, "serial reduction"), (_row_sums, "parallel rows"),
    # rows whose length no vector divides (wav2vec2's group norm over 1599 steps ran scalar at 2 GFLOPS)
    (lambda: _row_sums(cols=1599), "parallel rows"), (lambda: _min_all(cols=517), "serial reduction"),
    (_group_sums, "parallel rows")],
    ids=["min", "rows", "rows-1599", "min-517", "groups-4x100"])
def test_a_contiguous_reduction_runs_as_a_vector_of_partial_results(spec, make, words):
    cpu, register = CPUS[spec]
    lanes = cpu.lanes("float32")
    func, shapes, ref = make()
    scheduled, choice = default_schedule(func, cpu)
    assert any(words in s and f"{lanes} partial results in a vector" in s for s in choice.steps), choice.steps
    tail = shapes[0][-1] % lanes
    assert any("a scalar tail" in s for s in choice.steps) == bool(tail), choice.steps
    if tail:  # the whole vectors run without a predicate: one loop of them, then the tail
        lowered = code_views(tvm.IRModule({"main": scheduled}), parse_target(spec)).lowered_tir
        assert f"range({shapes[0][-1] // lanes})" in lowered and "T.Ramp" in lowered, lowered
    asm = tvm.tirx.build(tvm.IRModule({"main": scheduled}), target=parse_target(spec).tvm()).inspect_source("asm")
    assert re.search(rf"v(add|min)ps\s+[^\n]*%{register}", asm), "no vector add or min on full registers"
    if cpu.vector_bits <= (parse_target("cpu").vector_width or 0):  # values where the host runs it
        rng = np.random.default_rng(0)
        args = [rng.standard_normal(s).astype("float32") for s in shapes]
        out = np.zeros(np.shape(ref(*args)), "float32")
        lib = tvm.tirx.build(tvm.IRModule({"main": scheduled}), target=parse_target("cpu").tvm())
        tensors = [tvm.runtime.tensor(a) for a in args] + [tvm.runtime.tensor(out)]
        lib(*tensors)
        ok, abs_err, _, why = compare([tensors[-1].numpy()], [ref(*args)])
        assert ok, why


def test_a_reduction_across_rows_is_not_gathered_into_vectors():
    """Summing a column reads with a stride: no partial-result vector (it would gather); the
    columns themselves are the vector axis of the tiled rules."""
    cpu, _ = CPUS["cpu:skylake-avx512"]
    func, _, _ = _column_sums()
    _, choice = default_schedule(func, cpu)
    assert not any("partial results" in s for s in choice.steps), choice.steps


def test_short_reductions_stay_serial():
    cpu, _ = CPUS["cpu:skylake-avx512"]
    func, _, _ = _row_sums(cols=24)  # not two whole vectors of 16
    _, choice = default_schedule(func, cpu)
    assert not any("partial results" in s for s in choice.steps), choice.steps


def test_a_scalar_output_is_compared_like_any_other():
    """A reduction to a 0-d tensor: verification compared it as an array and failed on it."""
    ok, abs_err, _, _ = compare([np.array(1.0, "float32")], [np.array(1.0, "float32")])
    assert ok and abs_err == 0.0
    ok, _, _, _ = compare([np.array(2.0, "float32")], [np.array(1.0, "float32")])
    assert not ok
