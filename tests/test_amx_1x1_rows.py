"""1x1 convolutions over whole output rows a call (:data:`explorer.schedule.defaults.bf16_amx_conv.ROWS_A_CALL_1X1`,
the rows description without tap axes in :mod:`explorer.schedule.amx_bf16_conv`): a weights-heavy 1x1 whose
output rows fill one tile each takes two rows a call as a 2 x 2 grid (each B tile feeds two products), the
split product's expansions (MobileNetV2's 64 -> 384 @14) too, in bands of rows, one a core, each packing its
own rows (:data:`~explorer.schedule.defaults.bf16_amx_conv.ROW_BANDS_1X1`), a band of up to 7 rows one call
(``BAND_A_CALL_1X1``); on a 7-row map 16-channel panels where 32-channel ones would split unevenly among the cores
(``EVEN_PANELS_ODD_ROWS``). Structure for a Sapphire Rapids target on any host; numbers where the CPU has AMX."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import s_tir

from explorer.passes.bf16_dense import bf16_round
from explorer.schedule.defaults import bf16_amx_conv, default_schedule
from explorer.target import parse_target
from tests.direct_bf16_conv import built_direct_conv, direct_conv_func, reference_conv_nhwc, run_direct_conv
from tests.cpu_marks import NEEDS_AMX

# n, c, h, w, oc, kernel, stride, pad: weights 1.6x the input with 14-pixel rows (two rows a call), a
# strided 1x1 onto a 7x7 map (all 7 rows a call: 3 pairs and a row), ResNet-18's layer4.0 downsample
# in small, and a 1x1 whose input outweighs its weights (one row a call, its calls grouped)
HEAVY_14, STRIDED_7, LIGHT = (1, 32, 14, 14, 320, 1, 1, 0), (1, 32, 14, 14, 256, 1, 2, 0), (1, 64, 14, 14, 64, 1, 1, 0)
# the rules are decided per core count (bands of rows, one a core) and were measured on 2 cores: the target
# says 2, whatever this host has (on an x86 host a CPU target otherwise takes the host's usable cores)
SPR2 = parse_target("cpu:sapphirerapids", cores=2)
SEVEN_WIDE = (1, 32, 7, 7, 320, 1, 1, 0)  # MobileNetV2's 7x7 1x1s: all 7 rows a call, stride 1
FIVE_PANELS = (1, 64, 7, 7, 160, 1, 1, 0)  # its 960 -> 160 @7 in small: 5 panels of 32 channels


def test_weights_heavy_1x1_kernels_take_whole_output_rows_a_call_and_light_ones_do_not():
    lib, choice = built_direct_conv(SPR2, HEAVY_14)
    step = choice.steps[0]  # a band of 7 rows a core (2 cores), the band a call (BAND_A_CALL_1X1)
    assert "2 x 2 tiles of 14 rows" in step and "7 output rows a call" in step and "_t1x1_taps_y7_u" in step, choice
    assert "tdpbf16ps" in lib.mod.inspect_source("asm")
    _, seven = built_direct_conv(SPR2, STRIDED_7)
    assert "7 output rows a call" in seven.steps[0] and "_s2_t1x1_taps_y7_u" in seven.steps[0], seven
    _, light = built_direct_conv(SPR2, LIGHT)
    assert "output rows a call" not in light.steps[0], light


def test_without_the_switch_a_1x1_kernel_takes_one_row_a_call(monkeypatch):
    monkeypatch.setattr(bf16_amx_conv, "ROWS_A_CALL_1X1", False)
    _, choice = default_schedule(direct_conv_func(*HEAVY_14), SPR2.cpu_spec())
    assert "1 x 2 tiles of 14 rows" in choice.steps[0] and "output rows a call" not in choice.steps[0], choice


def _parallel_launches(lib) -> int:
    """Parallel regions the built kernel launches (each a load of TVM's launch function in its LLVM IR)."""
    return lib.mod.inspect_source("ll").count("@__TVMBackendParallelLaunch, align")


def _loops(func, block: str) -> list[tuple[int, bool]]:
    """(extent, parallel) of each loop around ``block`` in the scheduled ``func``."""
    sch = s_tir.Schedule(func)
    return [(int(sch.get(loop).extent), sch.get(loop).kind == tvm.tirx.ForKind.PARALLEL)
            for loop in sch.get_loops(sch.get_sblock(block))]


def test_a_weights_heavy_1x1_runs_a_band_of_rows_a_core_packing_its_own_rows_in_one_parallel_region():
    target = SPR2  # 2 cores
    func, choice = default_schedule(direct_conv_func(*HEAVY_14), target.cpu_spec())
    assert "rows outermost (a band of rows a core)" in choice.steps[0] and "padded in that chunk" in choice.steps[0]
    # one loop over the 2 bands, the packing inside it: a call over a band's 7 rows a panel, 10 panels a band,
    # each band packing its own 7 rows, not all 14 (then a unit loop around each call, SUMS_PER_CALL_IN_CHUNK:
    # with an epilogue, its sums a buffer of one call; this kernel has none, its sums are its output)
    assert _loops(func, "bf16_nhwc_input")[:2] == [(2, True), (7, False)], func.script()
    assert _loops(func, "conv2d_nhwc_bf16_o_update") == [(2, True), (10, False), (1, False)]
    lib = tvm.compile(tvm.IRModule({"main": func}), target=target.tvm())
    assert _parallel_launches(lib) == 1


def _two_rows_a_call(monkeypatch, target=SPR2) -> tuple:
    monkeypatch.setattr(bf16_amx_conv, "BAND_A_CALL_1X1", False)
    return default_schedule(direct_conv_func(*HEAVY_14), target.cpu_spec())


def test_without_band_calls_the_bands_take_two_rows_a_call(monkeypatch):
    func, choice = _two_rows_a_call(monkeypatch)
    assert "2 output rows a call" in choice.steps[0] and "_t1x1_taps_y2_u" in choice.steps[0], choice
    # 7 pairs of rows, 70 calls, 35 a band reading rows 0-7 and 6-13 (a band split inside a pair of rows
    # packs the pair too)
    assert _loops(func, "bf16_nhwc_input")[:2] == [(2, True), (8, False)], func.script()
    assert _loops(func, "conv2d_nhwc_bf16_o_update") == [(2, True), (35, False), (1, False)]


@NEEDS_AMX
def test_two_rows_a_call_matches_numpy_as_bf16_products_with_fp32_sums(monkeypatch):
    func, choice = _two_rows_a_call(monkeypatch, parse_target("cpu", cores=2))
    assert "2 output rows a call" in choice.steps[0], choice
    lib = tvm.compile(tvm.IRModule({"main": func}), target=parse_target("cpu").tvm())
    got, x, w = run_direct_conv(lib, HEAVY_14)
    exact = reference_conv_nhwc(bf16_round(x), bf16_round(w), 1, 0)
    assert np.abs(got - exact).max() <= 1e-5 * np.abs(exact).max()


def test_on_a_7_row_map_each_core_packs_the_whole_input_in_its_share_of_the_panels_but_not_strided():
    target = SPR2
    func, seven = default_schedule(direct_conv_func(*SEVEN_WIDE), target.cpu_spec())
    assert "7 output rows a call" in seven.steps[0] and "rows outermost" not in seven.steps[0], seven
    assert _loops(func, "bf16_nhwc_input")[:2] == [(2, True), (7, False)], func.script()  # all 7 rows a core
    assert _parallel_launches(tvm.compile(tvm.IRModule({"main": func}), target=target.tvm())) == 1
    strided, choice = built_direct_conv(SPR2, STRIDED_7)
    assert "padded once" in choice.steps[0] and _parallel_launches(strided) == 2, choice  # the packing, the calls


def test_a_7_row_map_with_an_odd_number_of_32_channel_panels_takes_16_channel_panels_5_a_core(monkeypatch):
    target = SPR2  # 2 cores: 5 panels of 32 split 3 and 2, 10 of 16 split 5 and 5
    func, choice = default_schedule(direct_conv_func(*FIVE_PANELS), target.cpu_spec())
    assert "2 x 1 tiles of 7 rows" in choice.steps[0] and "_7x2x1_" in choice.steps[0], choice
    assert _loops(func, "conv2d_nhwc_bf16_o_update") == [(2, True), (5, False), (1, False)], func.script()
    _, even = default_schedule(direct_conv_func(*SEVEN_WIDE), target.cpu_spec())  # 10 panels of 32: as before
    assert "2 x 2 tiles of 7 rows" in even.steps[0], even
    monkeypatch.setattr(bf16_amx_conv, "EVEN_PANELS_ODD_ROWS", False)
    func, old = default_schedule(direct_conv_func(*FIVE_PANELS), target.cpu_spec())
    assert "2 x 2 tiles of 7 rows" in old.steps[0], old
    # (the 5 calls, then a unit loop in each: the sums a buffer of one call, SUMS_PER_CALL)
    assert [extent for extent, _ in _loops(func, "conv2d_nhwc_bf16_o_update")] == [5, 1], func.script()


def test_without_bands_the_panels_run_outermost_after_the_packing(monkeypatch):
    monkeypatch.setattr(bf16_amx_conv, "ROW_BANDS_1X1", False)
    lib, choice = built_direct_conv(SPR2, HEAVY_14)
    assert "rows outermost" not in choice.steps[0] and "padded once" in choice.steps[0], choice
    assert _parallel_launches(lib) == 2  # the packing's rows, then the calls


def test_a_replayed_trace_of_a_1x1_over_two_rows_builds_the_same_kernel():
    import tvm_ffi

    from explorer.schedule.trace import replay
    from explorer.workload.keys import owned_task_module

    func, choice = default_schedule(direct_conv_func(*HEAVY_14), SPR2.cpu_spec())
    replayed = replay(owned_task_module(direct_conv_func(*HEAVY_14)), choice.trace).mod["main"]
    assert tvm_ffi.structural_equal(replayed, func)


@NEEDS_AMX
@pytest.mark.parametrize("shape", [HEAVY_14, STRIDED_7, SEVEN_WIDE, FIVE_PANELS],
                         ids=["two-rows", "seven-rows-strided", "seven-rows", "seven-rows-16-channel-panels"])
def test_1x1_over_whole_rows_matches_numpy_as_bf16_products_with_fp32_sums(shape):
    lib, choice = built_direct_conv("cpu", shape)
    assert "output rows a call" in choice.steps[0], choice
    got, x, w = run_direct_conv(lib, shape)
    exact = reference_conv_nhwc(bf16_round(x), bf16_round(w), shape[6], shape[7])
    assert np.abs(got - exact).max() <= 1e-5 * np.abs(exact).max()


@pytest.mark.parametrize("shape,cores,banded", [((1, 64, 14, 14, 384, 1, 1, 0), 4, False), (HEAVY_14, 5, False),
                                                ((2, 32, 14, 14, 640, 1, 1, 0), 8, False),
                                                ((3, 32, 14, 14, 960, 1, 1, 0), 2, False),
                                                ((1, 96, 14, 14, 576, 1, 1, 0), 9, False),
                                                ((3, 32, 7, 7, 960, 1, 1, 0), 4, False),
                                                ((1, 32, 16, 16, 480, 1, 1, 0), 6, False),
                                                ((1, 32, 24, 16, 960, 1, 2, 0), 4, False),
                                                (HEAVY_14, 2, True), (HEAVY_14, 7, True)])
def test_on_any_core_count_and_batch_the_packing_loops_have_fixed_extents(shape, cores, banded):
    # bands whose shares pack different numbers of rows gave the packing a loop whose extent varies by share
    # (64 -> 384 @14 on 4 cores: shares of 2, 3, 3 and 2 row pairs), which MetaSchedule's DisallowDynamicLoop
    # refuses: such a default could not seed a search. The rule keeps bands only where every share packs alike
    # (14 rows: two bands of 7 on 2 cores, seven of 2 on 7), whole images a core where there are several.
    import dataclasses

    cpu = dataclasses.replace(SPR2.cpu_spec(), cores=cores)
    func, choice = default_schedule(direct_conv_func(*shape), cpu)
    sch = s_tir.Schedule(func)
    packing = sch.get_loops(sch.get_sblock("bf16_nhwc_input"))
    assert all(isinstance(sch.get(loop).extent, tvm.tirx.IntImm) for loop in packing), func.script()
    assert ("rows outermost" in choice.steps[0]) == banded, choice


# a 1x1 over a map of one padded row (conv_rows: tf2onnx's MobileNetV2 at 160x160), weights-heavy (4 calls
# of 28 pixels along the row, 12 panels) and input-heavy (25 calls of 16 pixels, one panel pair)
ONE_ROW, ONE_ROW_LIGHT = (1, 64, 1, 112, 384, 1, 1, 0), (1, 192, 1, 400, 32, 1, 1, 0)
SPR8 = parse_target("cpu:sapphirerapids", cores=8)


def test_a_weights_heavy_1x1_over_one_row_runs_a_band_of_pixels_a_core_packing_them_in_one_parallel_loop():
    func, choice = default_schedule(direct_conv_func(*ONE_ROW), SPR2.cpu_spec())
    assert "pixels outermost (a band of the row a core)" in choice.steps[0], choice
    # 2 bands of 56 pixels (112 packed rows of K: each band packs its own), 2 calls x 12 panels a band,
    # a unit loop around each call (its sums a buffer of one call)
    assert _loops(func, "bf16_nhwc_input")[:2] == [(2, True), (56, False)], func.script()
    assert _loops(func, "conv2d_nhwc_bf16_o_update") == [(2, True), (24, False), (1, False)]
    assert _parallel_launches(tvm.compile(tvm.IRModule({"main": func}), target=SPR2.tvm())) == 1


def test_on_8_cores_a_row_of_4_calls_takes_no_bands_and_its_packing_runs_its_pixels_in_parallel():
    func, choice = default_schedule(direct_conv_func(*ONE_ROW), SPR8.cpu_spec())
    assert "outermost" not in choice.steps[0] and "pixels of its one row in parallel" in choice.steps[0], choice
    assert _loops(func, "bf16_nhwc_input")[0] == (112, True), func.script()
    assert _loops(func, "conv2d_nhwc_bf16_o_update") == [(48, True), (1, False)]
    assert _parallel_launches(tvm.compile(tvm.IRModule({"main": func}), target=SPR8.tvm())) == 2


@pytest.mark.parametrize("target", [SPR2, SPR8], ids=["2-cores", "8-cores"])
def test_an_input_heavy_1x1_over_one_row_packs_its_pixels_in_parallel_before_its_calls(target):
    func, choice = default_schedule(direct_conv_func(*ONE_ROW_LIGHT), target.cpu_spec())
    assert "pixels of its one row in parallel" in choice.steps[0] and "outermost" not in choice.steps[0], choice
    assert _loops(func, "bf16_nhwc_input")[0] == (400, True), func.script()
    assert _loops(func, "conv2d_nhwc_bf16_o_update") == [(25, True), (1, False)]


def test_without_the_switches_a_one_row_1x1_runs_its_panels_outermost_after_a_packing_of_one_task(monkeypatch):
    monkeypatch.setattr(bf16_amx_conv, "BANDS_ONE_ROW_1X1", False)
    monkeypatch.setattr(bf16_amx_conv, "PACK_ONE_ROW_BY_PIXELS", False)
    func, choice = default_schedule(direct_conv_func(*ONE_ROW), SPR2.cpu_spec())
    assert "outermost" not in choice.steps[0] and "rows in parallel" in choice.steps[0], choice
    assert _loops(func, "bf16_nhwc_input")[0] == (1, True), func.script()
    assert _loops(func, "conv2d_nhwc_bf16_o_update") == [(48, True), (1, False)]


def test_a_replayed_trace_of_a_one_row_band_builds_the_same_kernel():
    import tvm_ffi

    from explorer.schedule.trace import replay
    from explorer.workload.keys import owned_task_module

    func, choice = default_schedule(direct_conv_func(*ONE_ROW), SPR2.cpu_spec())
    replayed = replay(owned_task_module(direct_conv_func(*ONE_ROW)), choice.trace).mod["main"]
    assert tvm_ffi.structural_equal(replayed, func)


@NEEDS_AMX
@pytest.mark.parametrize("shape", [ONE_ROW, ONE_ROW_LIGHT], ids=["one-row-bands", "one-row-input-heavy"])
def test_1x1_over_one_row_matches_numpy_as_bf16_products_with_fp32_sums(shape):
    func, choice = default_schedule(direct_conv_func(*shape), parse_target("cpu", cores=2).cpu_spec())
    assert ("pixels outermost" in choice.steps[0]) == (shape == ONE_ROW), choice  # (2 cores: the bands)
    lib = tvm.compile(tvm.IRModule({"main": func}), target=parse_target("cpu").tvm())
    got, x, w = run_direct_conv(lib, shape)
    exact = reference_conv_nhwc(bf16_round(x), bf16_round(w), 1, 0)
    assert np.abs(got - exact).max() <= 1e-5 * np.abs(exact).max()


SPR4 = parse_target("cpu:sapphirerapids", cores=4)


def test_on_4_cores_a_row_of_4_calls_takes_no_bands_each_band_streaming_all_the_weights():
    """Measured on 2 cores only (BANDS_ONE_ROW_MAX_CORES): on 4, where the 4 calls would split evenly, panels
    stay outermost after a packing of the row's pixels in parallel."""
    func, choice = default_schedule(direct_conv_func(*ONE_ROW), SPR4.cpu_spec())
    assert "outermost" not in choice.steps[0] and "pixels of its one row in parallel" in choice.steps[0], choice


def _split_one_row():
    from explorer.passes.bf16_conv_split import pack_split_weights, split_conv_func

    n, c, h, w, oc = ONE_ROW[:5]
    packed = pack_split_weights(np.zeros((oc, c, 1, 1), np.float32))
    return split_conv_func((n, h, w, c), packed.shape, strides=(1, 1), padding=(0, 0), out_hw=(h, w)), pack_split_weights


def test_a_split_product_over_one_row_takes_bands_and_its_trace_replays():
    """tf2onnx's MobileNetV2 expansions are split products (bf16_conv_split): the same bands, the band's pixels
    packed in the band; the default's trace (the Schedule page's steps) rebuilds the same kernel."""
    import tvm_ffi

    from explorer.schedule.trace import replay
    from explorer.workload.keys import owned_task_module

    func, choice = default_schedule(_split_one_row()[0], SPR2.cpu_spec())
    assert "pixels outermost (a band of the row a core)" in choice.steps[0], choice
    assert "the pixels of a core's band rounded to bf16" in " ".join(choice.steps), choice
    assert tvm_ffi.structural_equal(replay(owned_task_module(_split_one_row()[0]), choice.trace).mod["main"], func)


@NEEDS_AMX
def test_a_split_product_over_one_row_in_bands_matches_numpy():
    func0, pack_split_weights = _split_one_row()
    func, _ = default_schedule(func0, parse_target("cpu", cores=2).cpu_spec())
    lib = tvm.compile(tvm.IRModule({"main": func}), target=parse_target("cpu").tvm())
    n, c, h, w, oc = ONE_ROW[:5]
    rng = np.random.default_rng(1)
    x, wt = rng.standard_normal((n, h, w, c)).astype("float32"), rng.standard_normal((oc, c, 1, 1)).astype("float32")
    out = tvm.runtime.tensor(np.zeros((n, h, w, oc), "float32"))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(pack_split_weights(wt)), out)
    exact = reference_conv_nhwc(bf16_round(x), wt, 1, 0)  # (the weights split in two bf16 parts: about 2^-16 off)
    assert np.abs(out.numpy() - exact).max() <= 1e-4 * np.abs(exact).max()
