"""No convolution the AMX kernels accept may fall back silently to a simpler rule: a sweep over
kernels (1x1, 3x3, 5x5, 7x7, 1x7, 7x1, 1x3, 3x1), strides 1 and 2, "same" and no padding, map sizes
(7-147) and channel counts (3-768). For each shape the direct bf16 kernel takes
(:func:`explorer.passes.bf16_conv_nhwc.amx_direct_fits`, and :func:`explorer.passes.bf16_conv.why_fp32`
letting it through; a split product where the pass writes one) and each int8 shape the AMX-INT8 rule
takes (:func:`explorer.schedule.defaults.int8_amx.amx_call`), the default schedule for
``cpu:sapphirerapids`` is the first rule, with no fallback reason, its step an AMX call, and it
compiles to the tile instruction. Compile only: any host. Why: 1x7 and 7x1 bf16 convolutions once
matched no tile call and fell to the scalar ``safe`` rule at 2 GFLOPS (Inception v3 at bf16 2.2 s a
run, not 25 ms), and nothing said so. A fast cross-section here; the whole sweep is marked slow."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
import tvm
from tvm import s_tir, te

from explorer.passes.bf16_conv import MIN_REDUCTION_DIRECT, split_fits, why_fp32
from explorer.passes.bf16_conv_nhwc import amx_direct_fits
from explorer.passes.bf16_conv_split import pack_split_weights, split_conv_func
from explorer.passes.qdq_int8 import conv2d_nhwc_int8
from explorer.schedule.defaults import default_schedule
from explorer.schedule.defaults.analysis import NotApplicable
from explorer.schedule.defaults.int8_amx import amx_call
from explorer.target import parse_target
from tests.direct_bf16_conv import conv_out_size, direct_conv_func

TARGET = parse_target("cpu:sapphirerapids")
KERNELS = ((1, 1), (3, 3), (5, 5), (7, 7), (1, 7), (7, 1), (1, 3), (3, 1))
SIZES = (7, 14, 17, 28, 35, 56, 73, 147)
CHANNELS = (3, 4, 16, 32, 64, 192, 768)


def _shapes(out_channels: tuple[int, ...]):
    """Every (channels, map size, output channels, kernel, stride, padding) of the sweep that fits."""
    for kernel, stride, same, size, c, oc in itertools.product(KERNELS, (1, 2), (True, False), SIZES, CHANNELS,
                                                               out_channels):
        pad = (kernel[0] // 2, kernel[1] // 2) if same else (0, 0)
        if (kernel == (1, 1) and same) or size + 2 * pad[0] < kernel[0] or size + 2 * pad[1] < kernel[1]:
            continue  # (a 1x1's "same" padding is none)
        yield c, size, oc, kernel, stride, pad


def _cross_section(shapes: list) -> list:
    """Two shapes of each kernel, stride and padding, each the one whose map size and channels the
    shapes picked before have had least (so that every size and channel count comes up)."""
    groups: dict = {}
    for shape in shapes:
        groups.setdefault((shape[3], shape[4], shape[5] == (0, 0)), []).append(shape)
    picked, seen = [], Counter()
    for group in groups.values():
        for _ in range(min(2, len(group))):
            best = min((s for s in group if s not in picked), key=lambda s: (seen[s[1]] + seen[("c", s[0])], s))
            picked.append(best)
            seen.update([best[1], ("c", best[0])])
    return picked


def bf16_direct_shapes(out_channels: tuple[int, ...]) -> list:
    """The sweep's shapes the bf16 pass puts on the direct AMX kernel (as :func:`explorer.passes.bf16_conv._plan`)."""
    taken = []
    for c, size, oc, (kh, kw), stride, pad in _shapes(out_channels):
        weights, width = (oc, c, kh, kw), conv_out_size(size, kw, stride, pad[1])
        if amx_direct_fits(weights, width, (1, 1), (stride, stride)) \
                and why_fp32(weights, direct=True, splittable=split_fits(weights, width)) is None:
            taken.append((c, size, oc, (kh, kw), stride, pad))
    return taken


def bf16_kernel(c, size, oc, kernel, stride, pad) -> tvm.tirx.PrimFunc:
    """The kernel the bf16 pass writes for the shape: a split product below the direct cut, else the direct one."""
    kh, kw = kernel
    out_hw = (conv_out_size(size, kh, stride, pad[0]), conv_out_size(size, kw, stride, pad[1]))
    if c * kh * kw < MIN_REDUCTION_DIRECT:
        packed = pack_split_weights(np.zeros((oc, c, kh, kw), np.float32)).shape
        return split_conv_func((1, size, size, c), packed, strides=(stride, stride), padding=pad, out_hw=out_hw)
    return direct_conv_func(1, c, size, size, oc, kernel, stride, pad)


def int8_kernel(c, size, oc, kernel, stride, pad) -> tvm.tirx.PrimFunc:
    """The QDQ pass's int8 convolution of the shape (its input padded already, channels to 4, outputs to 16)."""
    (kh, kw), c = kernel, -(-c // 4) * 4
    oh, ow = conv_out_size(size, kh, stride, pad[0]), conv_out_size(size, kw, stride, pad[1])
    x = te.placeholder((1, (oh - 1) * stride + kh, (ow - 1) * stride + kw, c), "uint8", name="X")
    w = te.placeholder((-(-oc // 16), kh, kw, c // 4, 16, 4), "int8", name="W")
    return te.create_prim_func([x, w, conv2d_nhwc_int8(x, w, stride, stride, oh, ow, 63)])


def int8_amx_shapes(out_channels: tuple[int, ...]) -> list:
    """The sweep's int8 shapes the AMX-INT8 rule takes (its own check, on the unscheduled kernel)."""
    taken = []
    for shape in _shapes(out_channels):
        sch = s_tir.Schedule(int8_kernel(*shape))
        try:
            amx_call(sch, sch.get_sblock("conv2d_nhwc_int8"), TARGET.cpu_spec())
        except NotApplicable:
            continue
        taken.append(shape)
    return taken


def _name(shape) -> str:
    c, size, oc, (kh, kw), stride, pad = shape
    return f"{kh}x{kw}-s{stride}-p{pad[0]}{pad[1]}-{size}px-{c}to{oc}"


def _assert_on_tiles(func, instruction: str) -> None:
    scheduled, choice = default_schedule(func, TARGET.cpu_spec())
    assert choice.rule == "full" and not choice.fallback_reason, choice
    assert instruction in choice.steps[0], choice.steps[0]  # (the step names the AMX call)
    asm = tvm.compile(tvm.IRModule({"main": scheduled}), target=TARGET.tvm()).mod.inspect_source("asm")
    assert instruction in asm


BF16_FAST = _cross_section(bf16_direct_shapes((24, 64)))
INT8_FAST = _cross_section(int8_amx_shapes((64,)))


def test_the_sweep_reaches_every_kernel_and_stride_on_both_amx_kernels():
    for shapes in (BF16_FAST, INT8_FAST):
        assert {(s[3], s[4]) for s in shapes} == set(itertools.product(KERNELS, (1, 2)))
    assert {s[0] for s in BF16_FAST} == {c for s in bf16_direct_shapes((24, 64)) for c in [s[0]]}
    assert {s[1] for s in BF16_FAST} == set(SIZES)


@pytest.mark.parametrize("shape", BF16_FAST, ids=_name)
def test_a_bf16_convolution_the_direct_kernel_takes_gets_its_amx_call(shape):
    _assert_on_tiles(bf16_kernel(*shape), "tdpbf16ps")


@pytest.mark.parametrize("shape", INT8_FAST, ids=_name)
def test_an_int8_convolution_the_amx_rule_takes_gets_its_amx_call(shape):
    _assert_on_tiles(int8_kernel(*shape), "tdpbusd")


@pytest.mark.slow
@pytest.mark.parametrize("shapes, kernel, instruction",
                         [(lambda: bf16_direct_shapes((24, 64)), bf16_kernel, "tdpbf16ps"),
                          (lambda: int8_amx_shapes((64, 192)), int8_kernel, "tdpbusd")], ids=["bf16", "int8"])
def test_every_convolution_of_the_sweep_gets_its_amx_call(shapes, kernel, instruction):
    bad = []
    for shape in shapes():
        try:
            _assert_on_tiles(kernel(*shape), instruction)
        except AssertionError as err:
            bad.append(f"{_name(shape)}: {str(err)[:300]}")
    assert not bad, bad
