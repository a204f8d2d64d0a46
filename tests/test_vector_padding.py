"""A reduction whose vector axis no multiple of the lanes divides (attention over 49 or 197
tokens) is padded to whole vectors instead of getting a scalar register tile: decided and
compiled for each target kind (AVX2, AVX-512, NEON), and numerically checked on this machine."""

import numpy as np
import pytest
import tvm
from tvm import te

from explorer.schedule.codegen import asm_stats
from explorer.schedule.defaults import default_schedule
from explorer.target import host_target, parse_target

TARGETS = {"cpu:x86-64-v3": 256, "cpu:x86-64-v4": 512, "aarch64:cortex-a76": 128}


def _scores(batch=12, tokens=49, dim=32):
    """Attention scores plus a bias: (batch, tokens, dim) x (batch, dim, tokens) + bias."""
    a = te.placeholder((batch, tokens, dim), name="q")
    b = te.placeholder((batch, dim, tokens), name="k")
    bias = te.placeholder((tokens, tokens), name="bias")
    k = te.reduce_axis((0, dim), name="r")
    mm = te.compute((batch, tokens, tokens), lambda n, i, j: te.sum(a[n, i, k] * b[n, k, j], axis=k), name="matmul")
    out = te.compute(mm.shape, lambda n, i, j: mm[n, i, j] + bias[i, j], name="T_add")
    return te.create_prim_func([a, b, bias, out])


@pytest.mark.parametrize("spec", list(TARGETS))
def test_49_tokens_are_padded_to_whole_vectors_for_every_target(spec):
    target = parse_target(spec)
    scheduled, choice = default_schedule(_scores(), target.cpu_spec())
    assert choice.rule == "full" and "padded to whole vectors" in choice.steps[0], choice
    assert "x1 " not in choice.steps[0]  # not a scalar tile
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target=target.tvm())
    asm = (lib.mod.imports[0] if lib.mod.imports else lib.mod).inspect_source("asm")
    assert asm_stats(asm).fma.get(TARGETS[spec], 0) > 0, asm_stats(asm).summary()


def test_whole_vectors_and_vectors_too_short_are_left_alone():
    cpu = parse_target("cpu:x86-64-v4").cpu_spec()
    assert "padded" not in default_schedule(_scores(tokens=64), cpu)[1].steps[0]
    assert "padded" not in default_schedule(_scores(tokens=7), cpu)[1].steps[0]


def test_the_padded_schedule_computes_the_same_numbers():
    func = _scores()
    scheduled, choice = default_schedule(func, host_target().cpu_spec())
    rng = np.random.default_rng(0)
    q, k, bias = (rng.standard_normal(s).astype("float32") for s in ((12, 49, 32), (12, 32, 49), (49, 49)))
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target=host_target().tvm())
    out = tvm.runtime.tensor(np.full((12, 49, 49), np.nan, "float32"))
    lib["main"](*(tvm.runtime.tensor(x) for x in (q, k, bias)), out)
    np.testing.assert_allclose(out.numpy(), q @ k + bias, rtol=1e-4, atol=1e-4)
