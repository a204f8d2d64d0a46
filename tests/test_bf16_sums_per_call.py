"""A direct AMX convolution with an epilogue (bias, ReLU) keeps its fp32 sums in a buffer of one call,
which the call's epilogue reads right after (:data:`explorer.schedule.defaults.bf16_amx_conv.SUMS_PER_CALL`),
not in one of the whole output (the sums' init, decomposed before the parallel loop, had made the
buffer span every call: 3.2 MB for ResNet-18's stem, stored to memory that no call reused).
Structure for a Sapphire Rapids target on any host; numbers where the CPU has AMX."""

from __future__ import annotations

import re

import numpy as np
import tvm
from tvm import te

from explorer.passes.bf16_conv_nhwc import conv2d_nhwc_bf16, nhwc_channels, pack_nhwc_weights
from explorer.passes.bf16_dense import bf16_round
from explorer.schedule.defaults import bf16_amx_conv, default_schedule
from explorer.schedule.defaults.amx_calls import MAX_CALL_SUMS
from explorer.target import parse_target
from tests.direct_bf16_conv import conv_out_size, reference_conv_nhwc
from tests.cpu_marks import NEEDS_AMX

SPR2 = parse_target("cpu:sapphirerapids", cores=2)
# n, c, h, w, oc, kernel, stride, pad: ResNet's 7x7 stride-2 stem (3 channels, kernel rows as tile rows)
# and a 3x3 64 -> 64 (layer1's form) in small
STEM, LAYER1 = (1, 3, 64, 64, 64, 7, 2, 3), (1, 64, 28, 28, 64, 3, 1, 1)


def _conv_bias_relu(n, c, h, w, oc, k, s, p) -> tvm.tirx.PrimFunc:
    x = te.placeholder((n, h, w, c), "float32", "x")
    wb = te.placeholder(pack_nhwc_weights(np.zeros((oc, c, k, k), np.float32), nhwc_channels(c, k)).shape,
                        "uint16", "w")
    b = te.placeholder((oc,), "float32", "b")
    y = conv2d_nhwc_bf16(x, wb, strides=(s, s), padding=(p, p),
                         out_hw=(conv_out_size(h, k, s, p), conv_out_size(w, k, s, p)))
    out = te.compute(y.shape, lambda i, r, q, o: te.max(y[i, r, q, o] + b[o], 0.0), name="bias_relu")
    return te.create_prim_func([x, wb, b, out])


def _built(shape, target=SPR2):
    func, choice = default_schedule(_conv_bias_relu(*shape), target.cpu_spec())
    return tvm.compile(tvm.IRModule({"main": func}), target=target.tvm()), choice


def _workspaces(lib) -> list[int]:
    """Bytes of each workspace the built kernel allocates (its LLVM IR's calls of TVM's allocator)."""
    return [int(v) for v in re.findall(r"call ptr %\w+\(i32 1, i32 %\w+, i64 (\d+)", lib.mod.inspect_source("ll"))]


def _sums_bytes(shape) -> int:
    n, _, h, w, oc, k, s, p = shape
    return n * conv_out_size(h, k, s, p) * conv_out_size(w, k, s, p) * oc * 4


def test_the_sums_are_a_buffer_of_one_call_not_of_the_whole_output(monkeypatch):
    for shape in (STEM, LAYER1):
        lib, choice = _built(shape)
        assert "AMX" in choice.steps[0] and "epilogue per tile" in choice.steps[0], choice
        sizes = _workspaces(lib)
        # the kernel's name: rows x row tiles x column tiles ..., g row groups x column groups a call
        m, mt, nt, gr, gc = (int(v) for v in re.search(r"bf16conv_(\d+)x(\d+)x(\d+)_.*_g(\d+)x(\d+)", choice.steps[0]).groups())
        call_sums = m * mt * nt * 16 * gr * gc * 4
        assert _sums_bytes(shape) not in sizes and call_sums in sizes and call_sums <= MAX_CALL_SUMS, (shape, sizes)
    monkeypatch.setattr(bf16_amx_conv, "SUMS_PER_CALL", False)  # as before: the whole output's sums
    assert _sums_bytes(STEM) in _workspaces(_built(STEM)[0])


# MobileNetV2's 1x1 expansion 96 -> 576 @14 (weights-heavy: a band of 7 rows a core, the band's calls one
# chunk) and its 144 -> 24 @56 (the input packed by chunks of calls)
BAND_1X1, CHUNKED_1X1 = (1, 96, 14, 14, 576, 1, 1, 0), (1, 144, 56, 56, 24, 1, 1, 0)


def test_calls_grouped_a_chunk_keep_their_sums_a_buffer_of_one_call_too(monkeypatch):
    for shape, how in ((BAND_1X1, "rows outermost (a band of rows a core)"), (CHUNKED_1X1, "in that chunk")):
        lib, choice = _built(shape)
        assert how in choice.steps[0] and "epilogue per tile" in choice.steps[0], choice
        # a call's sums: its rows of m pixels (mt, or all of a band's) x nt 16-channel panels, g grids
        m, mt, nt = (int(v) for v in re.search(r"bf16conv_(\d+)x(\d+)x(\d+)_", choice.steps[0]).groups())
        groups = re.search(r"_g(\d+)x(\d+)", choice.steps[0])
        rows = re.search(r"_y(\d+)", choice.steps[0])
        call_sums = ((int(rows[1]) if rows else mt) * m * nt * 16 * 4
                     * (int(groups[1]) * int(groups[2]) if groups else 1))
        assert call_sums in _workspaces(lib), (shape, _workspaces(lib), call_sums)
    monkeypatch.setattr(bf16_amx_conv, "SUMS_PER_CALL_IN_CHUNK", False)  # as before: a band's sums (7 of 14 rows)
    assert _sums_bytes(BAND_1X1) // 2 in _workspaces(_built(BAND_1X1)[0])


@NEEDS_AMX
def test_the_stem_a_3x3_and_the_chunked_1x1s_with_bias_and_relu_match_numpy():
    for shape in (STEM, LAYER1, BAND_1X1, (1, 144, 56, 56, 32, 1, 1, 0)):  # (chunked: 32 channels, no slice)
        lib, _ = _built(shape, parse_target("cpu"))
        n, c, h, w, oc, k, s, p = shape
        rng = np.random.default_rng(3)
        x, wt = rng.standard_normal((n, h, w, c)).astype("float32"), rng.standard_normal((oc, c, k, k)).astype("float32")
        b = rng.standard_normal(oc).astype("float32")
        out = tvm.runtime.tensor(np.zeros((n, conv_out_size(h, k, s, p), conv_out_size(w, k, s, p), oc), "float32"))
        lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(pack_nhwc_weights(wt, nhwc_channels(c, k))),
                    tvm.runtime.tensor(b), out)
        exact = np.maximum(reference_conv_nhwc(bf16_round(x), bf16_round(wt), s, p) + b, 0)
        assert np.abs(out.numpy() - exact).max() <= 1e-5 * np.abs(exact).max(), shape
