"""1x1 convolutions over whole output rows a call (:data:`explorer.schedule.defaults.bf16_amx_conv.ROWS_A_CALL_1X1`,
the rows description without tap axes in :mod:`explorer.schedule.amx_bf16_conv`): a weights-heavy 1x1 whose
output rows fill one tile each takes two rows a call as a 2 x 2 grid (each B tile feeds two products), the
split product's expansions (MobileNetV2's 64 -> 384 @14) too. Structure for a Sapphire Rapids target on any
host; numbers where the CPU has AMX."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.passes.bf16_dense import bf16_round
from explorer.schedule.defaults import bf16_amx_conv, default_schedule
from explorer.target import parse_target
from tests.direct_bf16_conv import built_direct_conv, direct_conv_func, reference_conv_nhwc, run_direct_conv
from tests.test_bf16_kernels import NEEDS_AMX

# n, c, h, w, oc, kernel, stride, pad: weights 1.6x the input with 14-pixel rows (two rows a call), a
# strided 1x1 onto a 7x7 map (all 7 rows a call: 3 pairs and a row), ResNet-18's layer4.0 downsample
# in small, and a 1x1 whose input outweighs its weights (one row a call, its calls grouped)
HEAVY_14, STRIDED_7, LIGHT = (1, 32, 14, 14, 320, 1, 1, 0), (1, 32, 14, 14, 256, 1, 2, 0), (1, 64, 14, 14, 64, 1, 1, 0)
SEVEN_WIDE = (1, 32, 7, 7, 320, 1, 1, 0)  # MobileNetV2's 7x7 1x1s: all 7 rows a call, stride 1


def test_weights_heavy_1x1_kernels_take_whole_output_rows_a_call_and_light_ones_do_not():
    lib, choice = built_direct_conv("cpu:sapphirerapids", HEAVY_14)
    step = choice.steps[0]
    assert "2 x 2 tiles of 14 rows" in step and "2 output rows a call" in step and "_t1x1_taps_y2_u" in step, choice
    assert "tdpbf16ps" in lib.mod.inspect_source("asm")
    _, seven = built_direct_conv("cpu:sapphirerapids", STRIDED_7)
    assert "7 output rows a call" in seven.steps[0] and "_s2_t1x1_taps_y7_u" in seven.steps[0], seven
    _, light = built_direct_conv("cpu:sapphirerapids", LIGHT)
    assert "output rows a call" not in light.steps[0], light


def test_without_the_switch_a_1x1_kernel_takes_one_row_a_call(monkeypatch):
    monkeypatch.setattr(bf16_amx_conv, "ROWS_A_CALL_1X1", False)
    _, choice = default_schedule(direct_conv_func(*HEAVY_14), parse_target("cpu:sapphirerapids").cpu_spec())
    assert "1 x 2 tiles of 14 rows" in choice.steps[0] and "output rows a call" not in choice.steps[0], choice


def test_a_replayed_trace_of_a_1x1_over_two_rows_builds_the_same_kernel():
    import tvm_ffi

    from explorer.schedule.trace import replay
    from explorer.workload.keys import owned_task_module

    func, choice = default_schedule(direct_conv_func(*HEAVY_14), parse_target("cpu:sapphirerapids").cpu_spec())
    replayed = replay(owned_task_module(direct_conv_func(*HEAVY_14)), choice.trace).mod["main"]
    assert tvm_ffi.structural_equal(replayed, func)


@NEEDS_AMX
@pytest.mark.parametrize("shape", [HEAVY_14, STRIDED_7, SEVEN_WIDE], ids=["two-rows", "seven-rows-strided", "seven-rows"])
def test_1x1_over_whole_rows_matches_numpy_as_bf16_products_with_fp32_sums(shape):
    lib, choice = built_direct_conv("cpu", shape)
    assert "output rows a call" in choice.steps[0], choice
    got, x, w = run_direct_conv(lib, shape)
    exact = reference_conv_nhwc(bf16_round(x), bf16_round(w), shape[6], shape[7])
    assert np.abs(got - exact).max() <= 1e-5 * np.abs(exact).max()
