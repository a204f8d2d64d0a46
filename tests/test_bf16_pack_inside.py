"""A direct AMX convolution whose channels fill no vector (ResNet's stem: 3 channels and a zero one)
packs its input's box of rows and columns apart from the zero padding
(:data:`explorer.schedule.defaults.bf16_amx_conv.PACK_INSIDE_APART`): the box has no branch left, and
LLVM vectorizes it. Structure for a Sapphire Rapids target on any host; numbers where the CPU has AMX."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm

from explorer.passes.bf16_conv_nhwc import nhwc_channels, pack_nhwc_weights
from explorer.schedule.defaults import bf16_amx_conv, default_schedule
from explorer.target import parse_target
from tests.direct_bf16_conv import conv_out_size, direct_conv_func
from tests.cpu_marks import NEEDS_AMX

SPR2 = parse_target("cpu:sapphirerapids", cores=2)
# n, c, h, w, oc, kernel, stride, pad: the stem's 7x7 stride 2 on a small image (odd rows: the packing
# holds rows past the image's), and a 3-channel 3x3 at stride 1 (kernel rows as tile rows too)
STEM, SMALL_3X3 = (1, 3, 30, 32, 16, 7, 2, 3), (1, 3, 20, 28, 16, 3, 1, 1)
TWO_IMAGES = (2, 3, 22, 28, 16, 3, 1, 1)  # the box of each of two images


def _vector_i16_stores(func) -> list[int]:
    """The lanes of each store of 8 or more 16-bit values in the kernel built for Sapphire Rapids (only
    the packing stores bf16: the kernel's output is fp32; before, its pixel-at-a-time loop stored pairs)."""
    ll = tvm.compile(tvm.IRModule({"main": func}), target=SPR2.tvm()).mod.inspect_source("ll")
    return [lanes for lanes in map(int, re.findall(r"store <(\d+) x i16>", ll)) if lanes >= 8]


@pytest.mark.parametrize("shape", [STEM, SMALL_3X3], ids=["stem", "3x3"])
def test_the_packing_of_few_channels_stores_vectors_of_its_input_box(shape, monkeypatch):
    func, choice = default_schedule(direct_conv_func(*shape), SPR2.cpu_spec())
    assert choice.rule == "full" and "apart from the padding" in choice.steps[0], choice
    assert _vector_i16_stores(func), "the packing's box is not vectorized"
    monkeypatch.setattr(bf16_amx_conv, "PACK_INSIDE_APART", False)  # as before: one pixel at a time, a branch
    func, choice = default_schedule(direct_conv_func(*shape), SPR2.cpu_spec())
    assert choice.rule == "full" and "apart from the padding" not in choice.steps[0], choice
    assert not _vector_i16_stores(func)


def test_a_replayed_trace_builds_the_partitioned_packing():
    import tvm_ffi

    from explorer.schedule.trace import replay
    from explorer.workload.keys import owned_task_module

    func, choice = default_schedule(direct_conv_func(*STEM), SPR2.cpu_spec())
    replayed = replay(owned_task_module(direct_conv_func(*STEM)), choice.trace).mod["main"]
    assert tvm_ffi.structural_equal(replayed, func)


@NEEDS_AMX
@pytest.mark.parametrize("shape", [STEM, SMALL_3X3, TWO_IMAGES], ids=["stem", "3x3", "two_images"])
def test_the_partitioned_packing_computes_the_same_bits(shape, monkeypatch):
    n, c, h, w, oc, k, s, p = shape
    rng = np.random.default_rng(5)
    x, wt = rng.standard_normal((n, h, w, c)).astype("float32"), rng.standard_normal((oc, c, k, k)).astype("float32")
    outs = []
    for apart in (True, False):
        monkeypatch.setattr(bf16_amx_conv, "PACK_INSIDE_APART", apart)
        func, choice = default_schedule(direct_conv_func(*shape), parse_target("cpu").cpu_spec())
        assert ("apart from the padding" in choice.steps[0]) == apart, choice
        lib = tvm.compile(tvm.IRModule({"main": func}), target=parse_target("cpu").tvm())
        out = tvm.runtime.tensor(np.zeros((n, conv_out_size(h, k, s, p), conv_out_size(w, k, s, p), oc), "float32"))
        lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(pack_nhwc_weights(wt, nhwc_channels(c, k))), out)
        outs.append(out.numpy())
    assert np.array_equal(outs[0], outs[1]) and np.abs(outs[0]).max() > 0
