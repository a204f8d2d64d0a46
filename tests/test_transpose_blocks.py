"""A transpose of long rows (NHWC -> NCHW of many channels, with a reshape that splits the channels,
as ResNeSt's split attention writes it) runs in blocks of a vector's lanes of the rows it reads,
the output's rows inside (explorer.schedule.defaults.transpose_blocks), and computes the same
values; a transpose into a few channels keeps its own rules."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te, topi

from explorer.schedule.defaults import CpuSpec, default_schedule
from explorer.target import parse_target


def _cpu(spec: str) -> CpuSpec:
    t = parse_target(spec)
    return CpuSpec.of(vector_width=t.vector_width, features=t.features, arch=t.arch, cores=2)


def _relu_transpose_reshape(h: int, w: int, c: int):
    """ReLU, NHWC -> NCHW and a reshape of the channels into 2 x c/2: what the grouped conv's output
    meets in ResNeSt."""
    x = te.placeholder((1, h, w, c), "float32", name="x")
    relu = te.compute(x.shape, lambda *i: te.max(x(*i), tvm.tirx.const(0, "float32")), name="compute")
    nchw = topi.transpose(relu, [0, 3, 1, 2])
    return te.create_prim_func([x, topi.reshape(nchw, (1, 2, c // 2, h, w))])


def test_a_transpose_of_many_channels_runs_in_blocks_and_computes_the_same_values():
    h, w, c = 6, 20, 64
    scheduled, choice = default_schedule(_relu_transpose_reshape(h, w, c), _cpu("cpu"))
    lanes = _cpu("cpu").lanes("float32")
    assert f"transpose in blocks of {lanes} rows of {c // 2} x {w}" in choice.steps[-1], choice.steps
    data = np.random.default_rng(0).standard_normal((1, h, w, c)).astype("float32")
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target=parse_target("cpu").tvm())
    got = tvm.runtime.tensor(np.zeros((1, 2, c // 2, h, w), "float32"))
    lib(tvm.runtime.tensor(data), got)
    expected = np.maximum(data, 0).transpose(0, 3, 1, 2).reshape(1, 2, c // 2, h, w)
    assert np.array_equal(got.numpy(), expected)


def test_rows_shorter_than_a_vector_keep_the_plain_transpose():
    image = te.placeholder((1, 3, 32, 32), "float32", name="image")  # into 3 channels: the rules for images
    copy = te.compute((1, 32, 32, 3), lambda n, y, x, c: image[n, c, y, x], name="T_transpose")
    _, choice = default_schedule(te.create_prim_func([image, copy]), _cpu("cpu:sapphirerapids"))
    assert choice.steps == ("parallel transpose (T_transpose)",), choice.steps
    narrow = _relu_transpose_reshape(4, 4, 64)  # output rows of 4 pixels: shorter than a vector
    _, choice = default_schedule(narrow, _cpu("cpu:sapphirerapids"))
    assert "blocks" not in choice.steps[-1], choice.steps


def _nhwc_to_nchw(h: int, w: int, c: int):
    x = te.placeholder((1, h, w, c), "float32", name="x")
    return te.create_prim_func([x, topi.transpose(x, [0, 3, 1, 2])])


def test_a_plain_nhwc_to_nchw_transpose_runs_in_blocks_and_computes_the_same_values():
    h, w, c = 6, 20, 64
    scheduled, choice = default_schedule(_nhwc_to_nchw(h, w, c), _cpu("cpu"))
    lanes = _cpu("cpu").lanes("float32")
    assert choice.steps == (f"transpose in blocks of {lanes} rows of {c} x {w} (T_transpose)",), choice.steps
    data = np.random.default_rng(0).standard_normal((1, h, w, c)).astype("float32")
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target=parse_target("cpu").tvm())
    got = tvm.runtime.tensor(np.zeros((1, c, h, w), "float32"))
    lib(tvm.runtime.tensor(data), got)
    assert np.array_equal(got.numpy(), data.transpose(0, 3, 1, 2))


@pytest.mark.parametrize("channels", [24, 56])
def test_the_blocks_are_a_vector_of_the_target_so_rows_of_24_or_56_block_on_avx2_only(channels):
    """Rows of 24 or 56 channels are whole 8-lane vectors (Haswell's AVX2), not whole 16-lane ones
    (Sapphire Rapids' AVX-512): blocks on the one, the plain transpose on the other."""
    _, avx2 = default_schedule(_nhwc_to_nchw(6, 20, channels), _cpu("cpu:haswell"))
    assert avx2.steps == (f"transpose in blocks of 8 rows of {channels} x 20 (T_transpose)",), avx2.steps
    _, avx512 = default_schedule(_nhwc_to_nchw(6, 20, channels), _cpu("cpu:sapphirerapids"))
    assert avx512.steps == ("parallel transpose (T_transpose)",), avx512.steps


def test_an_add_that_reads_another_operand_along_the_output_rows_is_not_blocked():
    """NCHW ``b`` plus NHWC ``x`` transposed: blocks over the channels would read ``b`` across its
    rows; a per-channel bias (not read along the rows) leaves the blocks."""
    x = te.placeholder((1, 16, 16, 64), "float32", name="x")
    b = te.placeholder((1, 64, 16, 16), "float32", name="b")
    mixed = te.compute((1, 64, 16, 16), lambda n, c, h, w: x[n, h, w, c] + b[n, c, h, w], name="T_add")
    _, choice = default_schedule(te.create_prim_func([x, b, mixed]), _cpu("cpu:sapphirerapids"))
    assert "blocks" not in choice.steps[-1], choice.steps
    bias = te.placeholder((64,), "float32", name="bias")
    biased = te.compute((1, 64, 16, 16), lambda n, c, h, w: x[n, h, w, c] + bias[c], name="T_add")
    _, choice = default_schedule(te.create_prim_func([x, bias, biased]), _cpu("cpu:sapphirerapids"))
    assert choice.steps == ("transpose in blocks of 16 rows of 64 x 16 (T_add)",), choice.steps


@pytest.mark.parametrize("cores, blocked", [(2, True), (8, False)])
def test_blocks_in_parallel_only_where_they_feed_every_core(cores, blocked):
    """A 2-D transpose of 64 rows of 1024 in parallel: 4 blocks of 16 rows for 2 cores; not for 8
    (the plain transpose's 64 rows in parallel)."""
    x = te.placeholder((1024, 64), "float32", name="x")
    t = parse_target("cpu:sapphirerapids")
    cpu = CpuSpec.of(vector_width=t.vector_width, features=t.features, arch=t.arch, cores=cores)
    _, choice = default_schedule(te.create_prim_func([x, topi.transpose(x, [1, 0])]), cpu)
    expected = ("parallel transpose in blocks of 16 rows of 64 x 1024 (T_transpose)" if blocked
                else "parallel transpose (T_transpose)")
    assert choice.steps == (expected,), choice.steps
