"""An SE block's sigmoid gate (EfficientNet's: a 1x1 conv on the pooled 1x1xC map, sigmoid, times the
HxWxC map): the default schedule computes the sigmoid once per channel, not again at every pixel
that reads it (inlined into the broadcast product it took EfficientNet-B0's SE kernels 2-3x the time:
0.031 -> 0.010 ms on a 14x14x480 map, 0.25 -> 0.19 ms on 112x112x96, timed alternately)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tvm
from tvm import te, topi

from explorer.ir.tir_walk import blocks
from explorer.schedule.defaults import CpuSpec, default_schedule
from explorer.schedule.defaults.analysis import sub_exprs
from explorer.target import host_target, parse_target

AVX512 = CpuSpec(vector_bits=512, registers=32, cores=2, arch="x86_64")
AVX2 = CpuSpec(vector_bits=256, registers=16, cores=2, arch="x86_64")
SQUEEZED, CHANNELS, SIDE = 6, 48, 10


def _sigmoid_gate():
    pooled = te.placeholder((1, 1, 1, SQUEEZED), "float32", name="pooled")
    weight = te.placeholder((1, 1, SQUEEZED, CHANNELS), "float32", name="weight")
    fmap = te.placeholder((1, SIDE, SIDE, CHANNELS), "float32", name="fmap")
    gate = topi.sigmoid(topi.nn.conv2d_nhwc(pooled, weight, 1, 0, 1))
    return te.create_prim_func([pooled, weight, fmap, topi.multiply(fmap, gate)])


def _calls_sigmoid(block) -> bool:
    names = [str(getattr(n.op, "name", "")) for n in sub_exprs(getattr(block.body, "value", block.body))
             if isinstance(n, tvm.ir.expr.Call)]
    return any("sigmoid" in name or "exp" in name for name in names)


@pytest.mark.parametrize("cpu", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_the_gate_is_computed_once_per_channel_and_the_product_is_right(cpu):
    scheduled, choice = default_schedule(_sigmoid_gate(), cpu)
    assert choice.rule == "full" and "register tile" in choice.steps[0], (choice.fallback_reason, choice.steps)
    with_sigmoid = [b for b in blocks(scheduled) if _calls_sigmoid(b)]
    assert with_sigmoid, "the sigmoid went missing"
    for block in with_sigmoid:  # no block that runs over the feature map computes it
        assert math.prod(int(iv.dom.extent) for iv in block.iter_vars) <= CHANNELS * SQUEEZED, block.name_hint
    target = parse_target("cpu:x86-64-v4" if cpu is AVX512 else "cpu:x86-64-v3")
    lib = tvm.tirx.build(tvm.IRModule({"main": scheduled}), target=target.tvm())
    if cpu.vector_bits <= host_target().vector_width:  # values where the host runs it
        rng = np.random.default_rng(0)
        args = [rng.standard_normal(s).astype("float32")
                for s in ((1, 1, 1, SQUEEZED), (1, 1, SQUEEZED, CHANNELS), (1, SIDE, SIDE, CHANNELS))]
        out = tvm.runtime.tensor(np.zeros((1, SIDE, SIDE, CHANNELS), "float32"))
        lib(*[tvm.runtime.tensor(a) for a in args], out)
        gate = 1 / (1 + np.exp(-(args[0].reshape(1, SQUEEZED) @ args[1].reshape(SQUEEZED, CHANNELS))))
        np.testing.assert_allclose(out.numpy(), args[2] * gate.reshape(1, 1, 1, CHANNELS), rtol=1e-5, atol=1e-5)
