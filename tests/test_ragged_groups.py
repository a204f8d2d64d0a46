"""Default schedules for what ShuffleNet v1 holds: grouped 1x1 convs whose groups (34, 68, 136
channels) no whole number of vectors fills, and an epilogue adding a bias over 136 channels.

Each decision is checked by building for AVX2 and AVX-512 (compile only: the instructions), the
values on this machine."""

import re

import numpy as np
import pytest
import tvm
from tvm import te, topi

from explorer.schedule.defaults import default_schedule
from explorer.schedule.defaults.machine import CpuSpec
from explorer.target import host_target, parse_target

ISAS = [("cpu:x86-64-v3", CpuSpec(vector_bits=256, registers=16, cores=2, arch="x86_64"), "ymm"),
        ("cpu:skylake-avx512", CpuSpec(vector_bits=512, registers=32, cores=2, arch="x86_64"), "zmm")]
# lane-by-lane loads and stores: what a vector that straddles a group or a row costs
LANE_BY_LANE = ("gather", "scatter", "vpextrd", "vinsertps", "vpinsrd")


def _grouped_conv(channels: int, groups: int, size: int = 14):
    x = te.placeholder((1, size, size, channels), name="x")
    w = te.placeholder((1, 1, channels // groups, channels), name="w")
    b = te.placeholder((1, 1, 1, channels), name="b")
    y = topi.nn.relu(topi.nn.group_conv2d_nhwc(x, w, 1, 0, 1, groups) + b)
    return te.create_prim_func([x, w, b, y]).with_attr("schedx.weight_buffers", [1, 2])


def _bias_relu(channels: int, size: int = 28):
    x = te.placeholder((1, size, size, channels), name="x")
    b = te.placeholder((channels,), name="b")
    y = te.compute(x.shape, lambda n, h, w, c: te.max(x[n, h, w, c] + b[c], 0.0), name="y")
    return te.create_prim_func([x, b, y])


def _asm(func, spec: str) -> str:
    return tvm.tirx.build(tvm.IRModule({"main": func}), target=parse_target(spec).tvm()).inspect_source("asm")


def _run(func, arrays):
    built = tvm.tirx.build(tvm.IRModule({"main": func}), target=host_target().tvm())
    args = [tvm.runtime.tensor(a) for a in arrays]
    built["main"](*args)
    return args[-1].numpy()


def _conv_inputs(channels: int, groups: int, size: int = 14):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, size, size, channels)).astype("float32")
    w = rng.standard_normal((1, 1, channels // groups, channels)).astype("float32")
    b = rng.standard_normal((1, 1, 1, channels)).astype("float32")
    width = channels // groups
    ref = np.empty((1, size, size, channels), "float32")
    for g in range(groups):
        part = slice(g * width, (g + 1) * width)
        ref[..., part] = np.einsum("nhwc,cf->nhwf", x[..., part], w[0, 0, :, part])
    return [x, w, b, np.zeros_like(ref)], np.maximum(ref + b, 0)


@pytest.mark.parametrize("spec, cpu, register", ISAS)
def test_a_group_of_34_channels_is_tiled_in_whole_vectors_and_a_narrow_rest(spec, cpu, register):
    """Groups of 34 channels: 2 whole vectors and 2 channels on AVX-512, 4 and 2 on AVX2 (before:
    one tile of 2 lanes for the whole group, 14% of the peak)."""
    lanes = cpu.lanes("float32")
    scheduled, choice = default_schedule(_grouped_conv(136, 4), cpu)
    assert choice.rule == "full", choice
    assert f"x{lanes} per group of 34" in choice.steps[0] and "the last 2 of each group" in choice.steps[0], choice
    asm = _asm(scheduled, spec)
    fmas = [ln for ln in asm.splitlines() if "vfmadd" in ln and f"%{register}" in ln]
    assert fmas, "no FMA on whole vectors"
    assert not any(word in asm for word in LANE_BY_LANE)


def test_a_grouped_conv_with_ragged_groups_computes_the_grouped_sum():
    cpu = host_target().cpu_spec()
    for channels, groups in ((136, 4), (272, 4), (120, 5)):
        arrays, expected = _conv_inputs(channels, groups)
        scheduled, choice = default_schedule(_grouped_conv(channels, groups), cpu)
        assert choice.rule == "full", (channels, groups, choice)
        np.testing.assert_allclose(_run(scheduled, arrays), expected, rtol=1e-4, atol=1e-4)


def test_groups_of_whole_vectors_keep_the_plain_register_tile():
    cpu = ISAS[1][1]
    _, choice = default_schedule(_grouped_conv(128, 4), cpu)
    assert "per group" not in choice.steps[0] and choice.steps[0].startswith("register tile"), choice


@pytest.mark.parametrize("spec, cpu, _register", ISAS)
def test_a_bias_over_ragged_channels_is_added_by_rows_not_gathered(spec, cpu, _register):
    """The rows of 136 channels (100 on AVX2) are LLVM's to vectorize where no whole vectors fill
    them: vectors of the fused loop would read the bias at ``% 136``, lane by lane."""
    channels = 136 if cpu.lanes("float32") == 16 else 100
    scheduled, choice = default_schedule(_bias_relu(channels), cpu)
    assert choice.steps[0].startswith(f"parallel rows of {channels}"), choice
    asm = _asm(scheduled, spec)
    # LLVM's own vectors (256 bits wide for skylake-avx512: LLVM prefers them there)
    assert any(line.split()[0] == "vaddps" and "mm" in line for line in asm.splitlines() if line.strip())
    assert not any(word in asm for word in LANE_BY_LANE)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 28, 28, 136)).astype("float32")
    b = rng.standard_normal(136).astype("float32")
    host, _ = default_schedule(_bias_relu(136), host_target().cpu_spec())
    np.testing.assert_allclose(_run(host, [x, b, np.zeros_like(x)]), np.maximum(x + b, 0), rtol=1e-6)


def test_a_bias_over_whole_vectors_stays_one_fused_vector_loop():
    _, choice = default_schedule(_bias_relu(128), ISAS[1][1])
    assert choice.steps[0].startswith("parallel x16"), choice


def _channel_shuffle(channels: int, groups: int, size: int = 28):
    """ShuffleNet's channel shuffle in NHWC, as the reshape-transpose-reshape leaves it inlined."""
    x = te.placeholder((1, size, size, channels), name="x")
    per = channels // groups
    y = te.compute(x.shape, lambda n, h, w, c: x[n, h, w, c % groups * per + c // groups], name="y")
    return te.create_prim_func([x, y])


@pytest.mark.parametrize("spec, cpu, _register", ISAS)
def test_a_channel_shuffle_runs_rows_cut_at_the_group_count_not_gathered_vectors(spec, cpu, _register):
    """Vectors over the fused loops computed each lane's ``c % 4 * 34 + c // 4`` and gathered
    (50 us for 28x28x136, 12% of ShuffleNet v1); rows cut in steps of 4 give LLVM affine indices."""
    scheduled, choice = default_schedule(_channel_shuffle(136, 4), cpu)
    assert choice.steps[0].startswith("parallel rows of 136 in steps of 4"), choice
    script = scheduled.script()
    assert "T.vectorized" not in script and re.search(r"T\.grid\((T\.int64\()?34\)?, (T\.int64\()?4\)?\)", script), script
    assert "mm" in _asm(scheduled, spec)  # LLVM's own vectors (vpermt2ps on AVX-512)
    x = np.random.default_rng(2).standard_normal((1, 28, 28, 136)).astype("float32")
    host, _ = default_schedule(_channel_shuffle(136, 4), host_target().cpu_spec())
    expected = x.reshape(1, 28, 28, 4, 34).transpose(0, 1, 2, 4, 3).reshape(1, 28, 28, 136)
    np.testing.assert_array_equal(_run(host, [x, np.zeros_like(x)]), expected)


def test_an_inlined_reshape_chain_that_is_a_transpose_is_not_read_as_divisions():
    """Attention's keys transposed (100 tokens x 2 heads x 64, as Whisper's encoder reshapes them)
    and fused, then inlined, leave terms such as ``(t // 100 + d) % 64 // 64``; simplified within
    the iterators' domains they vanish, and the block is not cut in steps (the encoder ran 1.3x
    slower when it was)."""
    from tvm import relax

    from explorer.workload.fusion import fused_module

    x = relax.Var("x", relax.TensorType((1, 100, 128), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.reshape(x, (1, 100, 2, 64)))
            y = bb.emit(relax.op.permute_dims(y, [0, 2, 1, 3]))
            y = bb.emit(relax.op.reshape(y, (2, 100, 64)))
            y = bb.emit(relax.op.permute_dims(y, [0, 2, 1]))
            y = bb.emit_output(relax.op.reshape(y, (1, 2, 64, 100)))
        bb.emit_func_output(y)
    mod = fused_module(bb.get())
    (func,) = [f for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    _, choice = default_schedule(func, ISAS[1][1])
    assert "in steps of" not in "; ".join(choice.steps), choice


def test_an_nchw_channel_shuffle_copies_plane_by_plane():
    """ShuffleNetV2's shuffle in NCHW reads plane ``c % 2 * 116 + c // 2``: contiguous within a 14x14
    plane (196 floats, no whole number of 16-lane vectors), so the planes are rows for LLVM, not
    vectors of the fused loop that cross from one plane to a far one lane by lane."""
    x = te.placeholder((1, 232, 14, 14), name="x")
    y = te.compute(x.shape, lambda n, c, h, w: x[n, c % 2 * 116 + c // 2, h, w], name="y")
    func = te.create_prim_func([x, y])
    _, choice = default_schedule(func, ISAS[1][1])
    assert "rows of 196" in choice.steps[0], choice
    host, _ = default_schedule(func, host_target().cpu_spec())
    data = np.random.default_rng(3).standard_normal((1, 232, 14, 14)).astype("float32")
    expected = data.reshape(1, 2, 116, 14, 14).transpose(0, 2, 1, 3, 4).reshape(1, 232, 14, 14)
    np.testing.assert_array_equal(_run(host, [data, np.zeros_like(data)]), expected)
