"""A direct AMX convolution whose epilogue adds a residual map takes more pixels a call
(:data:`explorer.schedule.defaults.bf16_amx_conv.RESIDUAL_CALL_SUMS`): tf_resnet50_v2's 64 -> 256 1x1 at
40x40 (five 8-pixel tiles a row) a whole row a call with the add, one tile a call without it.
Structure for a Sapphire Rapids target on any host; numbers where the CPU has AMX."""

from __future__ import annotations

import re

import numpy as np
import tvm
from tvm import te

from explorer.passes.bf16_conv_nhwc import conv2d_nhwc_bf16, nhwc_channels, pack_nhwc_weights
from explorer.passes.bf16_dense import bf16_round
from explorer.schedule.defaults import bf16_amx_conv, default_schedule
from explorer.target import parse_target
from tests.direct_bf16_conv import reference_conv_nhwc
from tests.test_bf16_kernels import NEEDS_AMX

SPR2 = parse_target("cpu:sapphirerapids", cores=2)
C, H, W, OC = 64, 40, 40, 256


def _conv_bias(residual: bool) -> tvm.tirx.PrimFunc:
    """1x1 ``C -> OC`` over an ``H x W`` NHWC map, plus a bias, plus (``residual``) a map of the output's shape."""
    x = te.placeholder((1, H, W, C), "float32", "x")
    wb = te.placeholder(pack_nhwc_weights(np.zeros((OC, C, 1, 1), np.float32), nhwc_channels(C, 1)).shape,
                        "uint16", "w")
    b = te.placeholder((OC,), "float32", "b")
    y = conv2d_nhwc_bf16(x, wb, out_hw=(H, W))
    if not residual:
        out = te.compute(y.shape, lambda n, r, q, o: y[n, r, q, o] + b[o], name="bias")
        return te.create_prim_func([x, wb, b, out])
    res = te.placeholder((1, H, W, OC), "float32", "res")
    out = te.compute(y.shape, lambda n, r, q, o: y[n, r, q, o] + b[o] + res[n, r, q, o], name="bias_add")
    return te.create_prim_func([x, wb, b, res, out])


def _pixels_a_call(residual: bool, target=SPR2) -> tuple[int, str]:
    choice = default_schedule(_conv_bias(residual), target.cpu_spec())[1]
    m, mt, gr = (int(v) for v in re.search(r"bf16conv_(\d+)x(\d+)x\d+_.*?_g(\d+)x\d+", choice.steps[0]).groups())
    return m * mt * gr, choice.steps[0]


def test_a_residual_epilogue_takes_a_whole_row_a_call_and_a_bias_alone_one_tile(monkeypatch):
    pixels, step = _pixels_a_call(residual=True)
    assert pixels == W and "epilogue per tile" in step, step
    pixels, step = _pixels_a_call(residual=False)
    assert pixels == 8 and "epilogue per tile" in step, step
    monkeypatch.setattr(bf16_amx_conv, "RESIDUAL_CALL_SUMS", None)  # as before: one 8-pixel tile a call
    assert _pixels_a_call(residual=True)[0] == 8


@NEEDS_AMX
def test_the_row_a_call_with_its_residual_add_matches_numpy():
    func, _ = default_schedule(_conv_bias(residual=True), parse_target("cpu").cpu_spec())
    lib = tvm.compile(tvm.IRModule({"main": func}), target=parse_target("cpu").tvm())
    rng = np.random.default_rng(5)
    x, wt = rng.standard_normal((1, H, W, C)).astype("float32"), rng.standard_normal((OC, C, 1, 1)).astype("float32")
    b, res = rng.standard_normal(OC).astype("float32"), rng.standard_normal((1, H, W, OC)).astype("float32")
    out = tvm.runtime.tensor(np.zeros((1, H, W, OC), "float32"))
    lib["main"](*(tvm.runtime.tensor(a) for a in (x, pack_nhwc_weights(wt, nhwc_channels(C, 1)), b, res)), out)
    exact = reference_conv_nhwc(bf16_round(x), bf16_round(wt), 1, 0) + b + res
    assert np.abs(out.numpy() - exact).max() <= 1e-5 * np.abs(exact).max()
