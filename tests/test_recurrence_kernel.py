"""A recurrent layer's sequence kernel (explorer.schedule.defaults.recurrence): its values against numpy,
the register tiles a target's vector width decides (AVX2 and AVX-512 builds, compile only), the
GPU variant through nvcc-free CUDA code generation, and the swaps a build makes."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm

from explorer.errors import ExplorerError
from explorer.schedule.defaults.recurrence import for_target
from explorer.schedule.defaults.recurrence_cpu import cpu_recurrence
from explorer.schedule.defaults.recurrence_gpu import gpu_recurrence, gpu_recurrence_source
from explorer.schedule.defaults.recurrence_spec import RecurrenceSpec, spec_of
from explorer.schedule.defaults.machine import CpuSpec
from explorer.target import parse_target
from tests.recurrence_reference import reference

SPECS = [
    RecurrenceSpec("GRU", 9, 1, 20),
    RecurrenceSpec("GRU", 5, 2, 12, directions=("reverse",), linear_before_reset=True, clip=1.5),
    RecurrenceSpec("LSTM", 6, 1, 33, directions=("forward", "reverse"), peepholes=True),
    RecurrenceSpec("LSTM", 4, 3, 8, directions=("reverse",), activations=(("Sigmoid", "Relu", "Softsign"),)),
    RecurrenceSpec("RNN", 7, 2, 17, directions=("forward", "reverse"), activations=(("Relu",), ("Softplus",))),
]


def _run(func, spec: RecurrenceSpec, seed: int = 0, scale: float = 0.3) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    args = [(rng.standard_normal(s) * scale).astype("float32") for s in spec.input_shapes()]
    outs = [np.zeros(s, "float32") for s in spec.output_shapes()]
    lib = tvm.tirx.build(tvm.IRModule({"main": func}), target=parse_target("cpu").tvm())
    tensors = [tvm.runtime.tensor(a) for a in args + outs]
    lib(*tensors)
    return [t.numpy() for t in tensors[len(args):]], reference(spec, args)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.op}-{'-'.join(s.directions)}-{s.hidden}")
@pytest.mark.parametrize("lanes", [4, 16])
def test_the_kernel_computes_onnx_equations(spec, lanes):
    """Any vector width computes the same: whole tiles, short tiles and a last short vector."""
    got, want = _run(cpu_recurrence(spec, lanes), spec)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=2e-6)


def test_saturated_gates_stay_finite():
    """Inputs far out of the polynomial exp's range (|x| > 88): sigmoid and tanh saturate, softplus
    stays x (written as max(x, 0) + log(1 + exp(-|x|)), not log(1 + exp(x)), which overflows)."""
    for spec in (RecurrenceSpec("RNN", 3, 1, 8, activations=(("Softplus",),)), RecurrenceSpec("LSTM", 3, 1, 8)):
        got, want = _run(cpu_recurrence(spec, 8), spec, scale=200.0)
        for g, w in zip(got, want):
            assert np.isfinite(g).all()
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4)


def test_the_spec_travels_in_the_kernel():
    spec = SPECS[2]
    func = cpu_recurrence(spec, 8)
    assert spec_of(func) == spec and RecurrenceSpec.from_json(spec.to_json()) == spec
    assert func.attrs["tirx.is_scheduled"]
    assert spec.macs() == 2 * 6 * 1 * 33 * 4 * 33
    from explorer.workload.task import _flops

    assert _flops(tvm.IRModule({"main": func})) == 2 * spec.macs()  # the products, not the exp polynomials


@pytest.mark.parametrize("target, lanes, register", [("cpu:x86-64-v3", 8, "ymm"), ("cpu:skylake-avx512", 16, "zmm")])
def test_register_tiles_follow_the_targets_vectors(target, lanes, register):
    """The default schedules rewrite the kernel for the CPU's width: its products are FMAs on full
    registers, its gates vectorized (the polynomial exp: no call of libm's expf per element)."""
    from explorer.schedule.defaults import default_schedule

    cpu = CpuSpec(vector_bits=lanes * 32, registers=32 if lanes == 16 else 16, cores=2, arch="x86_64")
    spec = RecurrenceSpec("LSTM", 5, 1, 96, directions=("forward", "reverse"))
    scheduled, choice = default_schedule(cpu_recurrence(spec, 4), cpu)
    assert choice.rule == "full" and "every step in one kernel" in choice.steps[0]
    source = scheduled.script()
    assert f"T.vectorized({lanes})" in source and "T.parallel(2)" in source
    asm = tvm.tirx.build(tvm.IRModule({"main": scheduled}), target=parse_target(target).tvm()).inspect_source("asm")
    assert re.search(rf"vfmadd\w+ps\s+[^\n]*%{register}", asm), "no FMA on full vector registers"
    assert "expf" not in asm and "tanhf" not in asm


def test_the_gpu_variant_generates_cuda_with_barriers():
    """For CUDA, a thread block per direction and batch row, shared state, a barrier after each
    phase of a step; code generation only (no GPU here)."""
    spec = RecurrenceSpec("GRU", 4, 2, 40, directions=("forward", "reverse"))
    func = gpu_recurrence(spec).with_attr("global_symbol", "main")
    lib = tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target({"kind": "cuda", "arch": "sm_80"}))
    cuda = lib.mod.imports[0].inspect_source()
    assert "__syncthreads()" in cuda and "__shared__" in cuda and "blockIdx.x" in cuda


def test_a_gpu_block_shares_one_state_between_directions_and_names_its_limit():
    """Only one direction runs in a thread block: both use the same shared arrays. A layer whose
    state does not fit a block's 48 KB is refused with the numbers, not left to ptxas."""
    source = gpu_recurrence_source(RecurrenceSpec("LSTM", 3, 1, 64, directions=("forward", "reverse")))
    assert source.count("scope=\"shared\"") == 3  # h, acc, c: once
    with pytest.raises(ExplorerError, match=r"GRU of width 1400: .* KB of shared memory .* 48 KB"):
        gpu_recurrence_source(RecurrenceSpec("GRU", 3, 1, 1400))


def test_for_target_keeps_the_kernels_attributes():
    func = cpu_recurrence(SPECS[0], 4).with_attr("global_symbol", "gru_sequence7")
    cpu, gpu = for_target(func, lanes=16), for_target(func, gpu=True)
    assert cpu.attrs["global_symbol"] == gpu.attrs["global_symbol"] == "gru_sequence7"
    assert "T.vectorized(16)" in cpu.script() and "threadIdx.x" in gpu.script()
    assert for_target(cpu_recurrence(SPECS[0]).without_attr("schedx.recurrence")) is None
