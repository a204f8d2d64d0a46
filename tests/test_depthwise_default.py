"""A depthwise conv with channels as vectors (NHWC, groups = channels) gets its own register tile:
7 pixels of a row by one vector of channels (a pixel's channels whole where they are two vectors at
most; 14 pixels by half a vector where channels fill only half vectors), its taps unrolled; it
still computes the convolution. Grouped convs, NCHW depthwise convs and sums of products along the
channels (no sliding window, or more taps than it unrolls) keep the product model's tile; that
model's tiles stay the next variants, rows fused as the model ranks them."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import s_tir, te, topi

from explorer.ir.tir_walk import walk
from explorer.schedule.defaults import CpuSpec, default_schedule
from explorer.schedule.defaults.analysis import block_facts
from explorer.schedule.defaults.apply import tiled
from explorer.schedule.defaults.depthwise import depthwise_tiling
from explorer.schedule.defaults.tile_choice import fits, row_axis, vector_axis
from explorer.schedule.defaults.variant import DefaultVariant
from explorer.target import host_target

AVX512 = CpuSpec(vector_bits=512, registers=32, cores=2, arch="x86_64")
AVX2 = CpuSpec(vector_bits=256, registers=16, cores=2, arch="x86_64")


def _grouped_nhwc(channels: int, size: int, stride: int, groups: int, taps: int = 3):
    """An NHWC grouped conv (HWIO weights) with bias and ReLU6, as MobileNetV2's blocks have it."""
    data = te.placeholder((1, size, size, channels), "float32", name="data")
    weight = te.placeholder((taps, taps, channels // groups, channels), "float32", name="weight")
    bias = te.placeholder((1, 1, 1, channels), "float32", name="bias")
    conv = topi.nn.group_conv2d_nhwc(data, weight, stride, taps // 2, 1, groups, "float32")
    out = te.compute(conv.shape, lambda n, y, x, c: te.min(te.max(conv[n, y, x, c] + bias[0, 0, 0, c], 0.0), 6.0),
                     name="relu6")
    return te.create_prim_func([data, weight, bias, out])


def _reference(data, weight, bias, stride: int, groups: int):
    taps, channels = weight.shape[0], data.shape[-1]
    per = channels // groups
    x = np.pad(data, ((0, 0), (taps // 2, taps // 2), (taps // 2, taps // 2), (0, 0)))
    size = (x.shape[1] - taps) // stride + 1
    out = np.zeros((1, size, size, channels), "float32")
    for r in range(taps):
        for s in range(taps):
            win = x[:, r:r + stride * size:stride, s:s + stride * size:stride, :]
            for g in range(groups):
                cs = slice(g * per, (g + 1) * per)
                out[..., cs] += np.einsum("nhwi,io->nhwo", win[..., cs], weight[r, s, :, cs])
    return np.clip(out + bias, 0.0, 6.0)


def _tile(steps) -> str:
    return steps[0].split("register tile ")[1].split()[0]


def _computes_right(func, cpu: CpuSpec, stride: int, groups: int) -> None:
    if cpu.vector_bits > host_target().vector_width:
        return  # built for a wider vector unit than this host has
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal([int(d) for d in p.shape]).astype("float32") for p in func.params[:3]]
    lib = tvm.compile(tvm.IRModule({"main": func}), target=host_target().tvm())
    out = tvm.runtime.tensor(np.zeros([int(d) for d in func.params[3].shape], "float32"))
    lib["main"](*[tvm.runtime.tensor(a) for a in arrays], out)
    np.testing.assert_allclose(out.numpy(), _reference(*arrays, stride=stride, groups=groups), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cpu, lanes", [(AVX512, 16), (AVX2, 8)], ids=["avx512", "avx2"])
@pytest.mark.parametrize("stride", [1, 2])
def test_a_depthwise_conv_runs_seven_pixels_by_one_vector_with_its_taps_unrolled(cpu, lanes, stride):
    func = _grouped_nhwc(channels=64, size=28, stride=stride, groups=64)
    scheduled, choice = default_schedule(func, cpu)
    assert choice.rule == "full" and _tile(choice.steps) == f"7x{lanes}", choice.steps
    assert "taps unrolled" in choice.steps[0]
    unrolled = [loop for loop in _loops(scheduled) if loop.kind == tvm.tirx.ForKind.UNROLLED]
    assert len(unrolled) >= 3  # the tile's rows, the kernel's rows and its columns
    _computes_right(scheduled, cpu, stride, groups=64)


@pytest.mark.parametrize("channels, size, taps, tile", [
    (32, 14, 3, "7x32"),  # a pixel of two vectors of channels: one tile
    (72, 28, 3, "14x8"),  # channels in half vectors: half-vector tiles of twice the rows
    (48, 10, 5, "5x16"),  # a 5x5 kernel on rows that 7 does not divide
], ids=["whole-pixel", "half-vectors", "five-by-five"])
def test_other_channel_counts_and_kernels_get_their_tiles_and_compute_right(channels, size, taps, tile):
    func = _grouped_nhwc(channels=channels, size=size, stride=1, groups=channels, taps=taps)
    scheduled, choice = default_schedule(func, AVX512)
    assert _tile(choice.steps) == tile and "taps unrolled" in choice.steps[0], choice.steps
    _computes_right(scheduled, AVX512, 1, groups=channels)


def test_grouped_convs_keep_the_product_models_tile():
    func = _grouped_nhwc(channels=64, size=14, stride=1, groups=4)
    _, choice = default_schedule(func, AVX512)
    assert choice.rule == "full" and "taps unrolled" not in choice.steps[0], choice.steps


def test_the_product_models_tile_stays_the_next_variant():
    func = _grouped_nhwc(channels=64, size=28, stride=1, groups=64)
    _, own = tiled(func, AVX512)
    _, model = tiled(func, AVX512, DefaultVariant(rank=1))
    assert "taps unrolled" in own[0] and "taps unrolled" not in model[0], (own, model)


def _loops(func):
    return [node for node in walk(func.body) if isinstance(node, tvm.tirx.For)]


def _sum_of_products(taps: int):
    """``out[n, c] = sum_k a[k, n, c] * b[k, n, c]``: every operand along the channels, no window."""
    a = te.placeholder((taps, 56, 64), "float32", name="a")
    b = te.placeholder((taps, 56, 64), "float32", name="b")
    k = te.reduce_axis((0, taps), "k")
    out = te.compute((56, 64), lambda n, c: te.sum(a[k, n, c] * b[k, n, c], axis=k), name="out")
    return te.create_prim_func([a, b, out])


@pytest.mark.parametrize("taps", [9, 512])
def test_a_sum_of_products_along_the_channels_is_no_depthwise_conv(taps):
    _, choice = default_schedule(_sum_of_products(taps), AVX512)
    assert choice.rule == "full" and "taps unrolled" not in choice.steps[0], choice.steps


def test_a_seven_by_seven_depthwise_conv_still_unrolls_its_taps():
    _, choice = default_schedule(_grouped_nhwc(channels=32, size=7, stride=1, groups=32, taps=7), AVX512)
    assert "taps unrolled" in choice.steps[0], choice.steps


def test_nchw_depthwise_convs_keep_the_product_models_tile():
    data = te.placeholder((1, 32, 14, 14), "float32", name="data")
    weight = te.placeholder((32, 1, 3, 3), "float32", name="weight")
    func = te.create_prim_func([data, weight, topi.nn.depthwise_conv2d_nchw(data, weight, 1, 1, 1)])
    scheduled, choice = default_schedule(func, AVX512)
    assert choice.rule == "full" and "register tile" in choice.steps[0], choice.steps
    assert "taps unrolled" not in choice.steps[0], choice.steps
    if AVX512.vector_bits <= host_target().vector_width:
        rng = np.random.default_rng(0)
        x, w = rng.standard_normal((1, 32, 14, 14), "float32"), rng.standard_normal((32, 1, 3, 3), "float32")
        padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        want = sum(padded[:, :, r:r + 14, s:s + 14] * w[None, :, 0, r, s, None, None]
                   for r in range(3) for s in range(3))
        lib = tvm.compile(tvm.IRModule({"main": scheduled}), target=host_target().tvm())
        out = tvm.runtime.tensor(np.zeros((1, 32, 14, 14), "float32"))
        lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


def test_the_next_variants_fuse_rows_as_the_product_model_ranks_them():
    """Variant n + 1 of a depthwise conv is the model's rank n, rows over pixels fused as the model
    ranks n: on a 5x5 map of 72 channels its second tile, 4x8 with a 1x8 tail, runs unfused (fused
    by the model's third ranking it ran 14x8); its third runs over the 25 pixels as one axis."""
    func = _grouped_nhwc(channels=72, size=5, stride=1, groups=72)
    _, second = tiled(func, AVX512, DefaultVariant(rank=2))
    third, steps = tiled(func, AVX512, DefaultVariant(rank=3))
    assert _tile(second) == "4x8" and "rows over" not in second[0], second
    assert "rows over 5x5 outputs as one axis" in steps[0], steps
    _computes_right(third.mod["main"], AVX512, 1, groups=72)


@pytest.mark.parametrize("cpu, channels, size, tile", [
    (AVX512, 32, 112, "7x32"), (AVX512, 72, 56, "14x8"), (AVX512, 960, 7, "7x16"),
    (AVX2, 32, 112, "7x8"), (AVX2, 72, 56, "7x8"), (AVX2, 20, 48, "8x4"), (AVX2, 36, 24, "8x4"),
], ids=lambda v: "avx512" if v is AVX512 else "avx2" if v is AVX2 else None)
def test_a_depthwise_tile_fits_the_registers_as_a_products_does(cpu, channels, size, tile):
    """The tile passes :func:`tile_choice.fits`, and holds at most half the registers as
    accumulators (AVX2's half-vector 20 and 36 channels take 8x4, not 12x4, which spilled)."""
    func = _grouped_nhwc(channels=channels, size=size, stride=1, groups=channels)
    sch = s_tir.Schedule(func)
    facts = block_facts(sch, sch.get_sblock("group_conv2d_nhwc"))
    vec = vector_axis(facts)
    own = depthwise_tiling(facts, vec, row_axis(facts, vec), cpu)
    assert own is not None and f"{own.row_tile}x{own.vec_tile}" == tile, own
    assert fits(facts, vec, cpu, own.row_tile, own.vec_tile)
    assert own.row_tile * -(-own.vec_tile // cpu.lanes("float32")) <= cpu.registers // 2
