"""bf16 convolutions read straight from the NHWC input on AMX-BF16 tiles (no im2col):
:mod:`explorer.passes.bf16_conv_nhwc` and :mod:`explorer.schedule.amx_bf16_conv`. Compile-only per
target (any host): AMX CPUs get the direct kernel, AVX512-BF16 ones keep the im2col path; numeric
against numpy at the bf16 tolerance only where the flags schedx reads list AMX-BF16."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

from explorer.passes.bf16_conv import MIN_REDUCTION_DIRECT, why_fp32
from explorer.passes.bf16_conv_nhwc import nhwc_channels, pack_nhwc_weights
from explorer.passes.bf16_dense import bf16_round
from explorer.precision import BF16_TOLERANCE
from explorer.schedule.defaults import default_schedule
from explorer.target import parse_target
from explorer.workload import load_workload
from tests.direct_bf16_conv import built_direct_conv, direct_conv_func, reference_conv_nhwc, run_direct_conv
from tests.cpu_marks import HAS_AMX, HAS_BF16, NEEDS_AMX

# n, c, h, w, oc, kernel, stride, pad: padded 3x3 (28-pixel rows: two tiles of 14), strided 3x3, a
# strided 1x1, the stem (3 channels, 7x7 stride 2: a kernel row of 7 x 4 values one tile row), 24
# channels padded to 32, 40 output channels (8-pixel rows: tiled across rows), a 7x7 map (across
# rows, 9 wide), a batch of 2 unpadded 5x5 maps, 56-pixel rows of 64 channels (2 x 2 grids a call), a
# batch of 8 14x14 maps across rows (7 grids of 32 pixels a call), weights 1.28x the input with
# 28-pixel output rows (under WEIGHTS_HEAVY: input first, a row a call), weights 2.7x the input with
# 14-pixel output rows (two rows a call), a 1x1 whose input
# outgrows L2 (144 channels padded to 160, 24 outputs: packed a chunk of calls at a time), a
# weights-heavy strided 3x3 onto a 7x7 map (all 7 rows a call: 3 pairs and a row, layer4.0's form),
# a 7x7 map of 256 outputs (8 panels: the epilogue per panel at 2 cores, layer4's form)
SHAPES = [(1, 32, 28, 28, 32, 3, 1, 1), (1, 32, 14, 14, 32, 3, 2, 1), (1, 64, 28, 28, 128, 1, 2, 0),
          (1, 3, 32, 32, 64, 7, 2, 3), (2, 24, 8, 8, 40, 3, 1, 1), (1, 64, 7, 7, 64, 3, 1, 1),
          (2, 32, 5, 5, 32, 3, 1, 0), (1, 32, 56, 56, 64, 3, 1, 1), (8, 32, 14, 14, 16, 3, 1, 1),
          (1, 32, 28, 28, 128, 3, 1, 1), (1, 32, 28, 28, 256, 3, 2, 1), (1, 144, 56, 56, 24, 1, 1, 0),
          (2, 32, 14, 14, 128, 3, 2, 1), (1, 64, 7, 7, 256, 3, 1, 1)]
IDS = ["padded", "strided", "1x1", "stem", "padded-channels", "7x7-map", "batch-unpadded", "grouped", "grouped-flat",
       "two-rows", "two-rows-strided", "packed-per-chunk", "seven-rows-strided",
       "panels-7x7-map"]


def test_weights_pack_into_tile_panels_of_16_channels_by_pairs():
    w = np.arange(20 * 3 * 7 * 7, dtype=np.float32).reshape(20, 3, 7, 7)
    packed = pack_nhwc_weights(w, 4)
    assert packed.shape == (2, 7, 7, 2, 16, 2) and packed.dtype == np.uint16  # 20 -> 32 outputs, 3 -> 4 inputs
    widened = (packed.astype(np.uint32) << 16).view(np.float32)
    assert widened[1, 2, 5, 0, 3, 1] == bf16_round(w[19:20, 1, 2, 5])[0]  # output 16 + 3, input 1, tap (2, 5)
    assert widened[:, :, :, 1, :, 1].max() == 0 and widened[1, :, :, :, 4:].max() == 0  # padding is zero


def test_channels_pad_to_whole_tile_rows_where_cheap_else_to_pairs_where_a_kernel_row_fits():
    assert nhwc_channels(64, 3) == 64 and nhwc_channels(24, 3) == 32 and nhwc_channels(3, 7) == 4
    assert nhwc_channels(16, 3) is None  # 16 -> 32 doubles the work, 3 x 16 overflows a tile row: im2col
    assert why_fp32((64, 3, 7, 7), direct=True) is None and why_fp32((64, 3, 7, 7)) is not None  # the stem
    assert why_fp32((64, 16, 1, 1), direct=True) == (
        f"16x1x1 -> 64: reduction K = 16 < {MIN_REDUCTION_DIRECT}, too short for bf16 to pay")


@pytest.mark.parametrize("shape", [SHAPES[0], SHAPES[2], SHAPES[3], SHAPES[5]], ids=["3x3", "1x1-stride2", "stem",
                                                                                 "7x7-map"])
def test_sapphirerapids_convolution_reads_its_tiles_from_the_nhwc_input_and_asks_for_tile_state(shape):
    lib, choice = built_direct_conv("cpu:sapphirerapids", shape)
    step = choice.steps[0]
    assert choice.rule == "full" and "direct NHWC, no im2col" in step, choice
    assert "tdpbf16ps" in step and f"stride {shape[6]}" in step
    assert ("kernel rows of 7x4 values" in step) == (shape[1] == 3)
    assert ("pixels across rows" in step) == (shape[2] == 7)  # 28-pixel rows: along them, in two tiles of 14
    assert ("2 x 2 tiles of 16 rows" in step and "across rows 9 wide" in step) == (shape[2] == 7)
    asm = lib.mod.inspect_source("asm")
    assert "tdpbf16ps" in asm and "tileloadd" in asm and "ldtilecfg" in asm
    assert "tilerelease" in asm  # the tile state released: no configuration left for another library
    assert "syscall" in asm and "$158" in asm and "$4131" in asm  # arch_prctl(ARCH_REQ_XCOMP_PERM, ...)


def test_sapphirerapids_grid_calls_load_their_tile_config_once_and_start_from_tilezero_not_a_memset():
    from explorer.schedule.defaults.bf16_amx_conv import MIN_CALLS_PER_CORE

    target = parse_target("cpu:sapphirerapids")
    func, choice = default_schedule(direct_conv_func(*SHAPES[7]), target.cpu_spec())
    step = choice.steps[0]
    # 56 rows of 56 pixels x 64 channels (the input outweighs the weights): a call a row, 4 grids of a
    # column of 4 C tiles (56 pixels x 16 channels), each B tile feeding 4 products
    assert "4 x 1 tiles of 14 rows" in step and "1 x 4 grids a call, one ldtilecfg" in step and "_g1x4" in step, choice
    assert 56 >= MIN_CALLS_PER_CORE * target.cpu_spec().cores
    assert "conv2d_nhwc_bf16_init" not in func.script()  # the call's tilezero is the init: no zeroed sums
    asm = tvm.compile(tvm.IRModule({"main": func}), target=target.tvm()).mod.inspect_source("asm")
    assert asm.count("ldtilecfg") == 1 and "tdpbf16ps" in asm
    _, flat = built_direct_conv("cpu:sapphirerapids", SHAPES[8])  # 224 pixels an image across rows, 8 images
    assert "7 x 1 grids a call" in flat.steps[0] and "across rows 16 wide" in flat.steps[0], flat


@pytest.mark.parametrize("shape", [SHAPES[0], SHAPES[5], SHAPES[10], SHAPES[12]],
                         ids=["3x3", "7x7-map", "two-rows", "seven-rows"])
def test_a_replayed_trace_builds_the_kernel_the_default_schedule_built_with_no_zeroing_of_the_sums(shape):
    import tvm_ffi

    from explorer.schedule.trace import replay
    from explorer.workload.keys import owned_task_module

    target = parse_target("cpu:sapphirerapids")
    func, choice = default_schedule(direct_conv_func(*shape), target.cpu_spec())
    replayed = replay(owned_task_module(direct_conv_func(*shape)), choice.trace).mod["main"]
    assert tvm_ffi.structural_equal(replayed, func)  # the init's removal is a trace step, not a state edit
    ll = tvm.compile(tvm.IRModule({"main": replayed}), target=target.tvm()).mod.inspect_source("ll")
    calls = [f for f in ll.split("\ndefine ") if "@__tvm_parallel_lambda" in f.split("\n")[0]
             and "@schedx_amx_bf16_conv_tile" in f]  # the parallel loop of the tile calls
    assert len(calls) == 1 and "memset" not in calls[0]


def test_weights_heavy_convolutions_with_one_tile_a_row_take_two_whole_output_rows_a_call():
    lib, choice = built_direct_conv("cpu:sapphirerapids", SHAPES[10])  # 14-pixel rows: one tile of 14 each
    step = choice.steps[0]
    assert "2 x 2 tiles of 14 rows" in step and "2 output rows a call" in step and "_y2_u" in step, choice
    assert "grids a call" not in step
    asm = lib.mod.inspect_source("asm")
    assert "tdpbf16ps" in asm and "tilerelease" in asm
    _, wide = built_direct_conv("cpu:sapphirerapids", SHAPES[9])  # 28-pixel rows: two tiles, one row a call, 2 x 2
    assert "2 x 2 tiles of 14 rows" in wide.steps[0] and "output rows a call" not in wide.steps[0], wide


def test_a_weights_heavy_kernel_across_rows_runs_its_epilogue_per_panel_in_the_calls_parallel_loop():
    from explorer.schedule.defaults.bf16_amx_conv import MIN_CALLS_PER_CORE

    cpu = replace(parse_target("cpu:sapphirerapids").cpu_spec(), cores=2)
    func, choice = default_schedule(direct_conv_func(*SHAPES[13]), cpu)  # a 7x7 map, 8 panels of 32 outputs
    assert "across rows 9 wide" in choice.steps[0] and "epilogue per panel" in choice.steps[0], choice
    calls = func.script().split("T.parallel(")[-1]  # the last parallel loop: the panels' calls (packing first)
    assert "schedx_amx_bf16_conv_tile" in calls and 'sblock("conv2d_nhwc_bf16_rows")' in calls
    assert 8 >= MIN_CALLS_PER_CORE * cpu.cores
    _, few = default_schedule(direct_conv_func(*SHAPES[5]), cpu)  # 2 panels for 2 cores: every call in parallel instead
    assert "epilogue per panel" not in few.steps[0], few


def test_a_weights_heavy_kernel_across_rows_packs_all_of_its_input_in_each_cores_share_of_the_panels():
    target = parse_target("cpu:sapphirerapids")
    two = replace(target.cpu_spec(), cores=2)
    func, choice = default_schedule(direct_conv_func(*SHAPES[13]), two)  # a 7x7 map, 8 panels: 4 a core
    assert "epilogue per panel" in choice.steps[0] and "padded in that chunk" in choice.steps[0], choice
    assert func.script().count("T.parallel(") == 1  # no parallel packing before the calls
    ll = tvm.compile(tvm.IRModule({"main": func}), target=target.tvm()).mod.inspect_source("ll")
    lambdas = [f for f in ll.split("\ndefine ") if "@__tvm_parallel_lambda" in f.split("\n")[0]]
    assert len(lambdas) == 1 and "@schedx_amx_bf16_conv_tile" in lambdas[0] and "lshr <" in lambdas[0]
    _, one = default_schedule(direct_conv_func(*SHAPES[13]), replace(two, cores=1))  # one core: packed once
    _, strided = default_schedule(direct_conv_func(*SHAPES[10]), two)  # weights-heavy, not across rows
    assert "rows in parallel" in one.steps[0] and "rows in parallel" in strided.steps[0], (one, strided)


def test_weights_heavy_strided_convolutions_onto_seven_rows_take_all_seven_a_call_in_pairs_and_a_row():
    lib, choice = built_direct_conv("cpu:sapphirerapids", SHAPES[12])  # 7x7 outputs, 2 images: 3 pairs and a row
    step = choice.steps[0]
    assert "2 x 2 tiles of 7 rows" in step and "7 output rows a call" in step and "_y7_u" in step, choice
    asm = lib.mod.inspect_source("asm")  # one configuration for the 7 rows, released once
    assert asm.count("ldtilecfg") == 1 and asm.count("tilerelease") == 1 and "tdpbf16ps" in asm


def test_a_1x1_kernel_whose_input_outgrows_l2_packs_it_in_chunks_of_its_parallel_calls():
    import tvm_ffi

    from explorer.schedule.trace import replay
    from explorer.workload.keys import owned_task_module

    target = parse_target("cpu:sapphirerapids")
    func, choice = default_schedule(direct_conv_func(*SHAPES[11]), target.cpu_spec())
    assert "padded in that chunk" in choice.steps[0] and "rows in parallel" not in choice.steps[0], choice
    replayed = replay(owned_task_module(direct_conv_func(*SHAPES[11])), choice.trace).mod["main"]
    assert tvm_ffi.structural_equal(replayed, func)
    ll = tvm.compile(tvm.IRModule({"main": func}), target=target.tvm()).mod.inspect_source("ll")
    lambdas = [f for f in ll.split("\ndefine ") if "@__tvm_parallel_lambda" in f.split("\n")[0]]
    calls = [f for f in lambdas if "@schedx_amx_bf16_conv_tile" in f]
    assert len(calls) == 1 and "lshr <" in calls[0]  # the rounding to bf16 (vectorized) in the parallel loop of calls
    _, small = built_direct_conv("cpu:sapphirerapids", (1, 192, 28, 28, 32, 1, 1, 0))  # 0.9 MB: packed once
    _, spatial = built_direct_conv("cpu:sapphirerapids", SHAPES[7])  # 3x3: rows read by three calls, packed once
    assert "rows in parallel" in small.steps[0] and "rows in parallel" in spatial.steps[0]


def test_weights_heavy_convolutions_keep_one_grid_a_call():
    # 590 KB of weights, 25 KB of input
    _, choice = built_direct_conv("cpu:sapphirerapids", (1, 128, 7, 7, 256, 3, 1, 1))
    assert "grids a call" not in choice.steps[0] and "direct NHWC" in choice.steps[0], choice


def test_a_trace_names_its_tile_intrinsics_well_enough_to_register_them_again():
    from tvm.s_tir import TensorIntrin

    from explorer.schedule.amx_bf16_conv import AmxBf16Conv
    from explorer.schedule.intrinsics import register_for_trace

    calls = [AmxBf16Conv(14, 2, 2, 64, 2, 3, 3), AmxBf16Conv(16, 1, 1, 4, 2, 7, 7, row_taps=True),
             AmxBf16Conv(16, 2, 2, 64, 1, 3, 3, flat=9), AmxBf16Conv(14, 2, 2, 64, 1, 3, 3, row_groups=2, col_groups=2),
             AmxBf16Conv(16, 1, 2, 4, 2, 7, 7, row_taps=True, col_groups=2),
             AmxBf16Conv(7, 2, 2, 64, 2, 3, 3, update=True, out_rows=7)]
    register_for_trace(" ".join(call.name for call in calls))  # what a replay does with a trace's text
    for call in calls:
        desc = TensorIntrin.get(call.name).desc
        assert call.function in TensorIntrin.get(call.name).impl.script() and desc is not None


def test_a_cpu_without_amx_gets_the_vector_tile_for_the_direct_kernel():
    """The direct kernel on a CPU with AVX512-BF16 alone: its vdpbf16ps tile (tests/test_bf16_vector_conv.py),
    no tile instruction."""
    lib, choice = built_direct_conv("cpu:znver4", SHAPES[0])
    assert "vdpbf16ps, direct NHWC" in " ".join(choice.steps) and not choice.fallback_reason, choice
    asm = lib.mod.inspect_source("asm")
    assert "tdpbf16ps" not in asm and "vdpbf16ps" in asm


@NEEDS_AMX
@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_direct_amx_conv_matches_numpy_at_the_bf16_tolerance(shape):
    lib, choice = built_direct_conv("cpu", shape)
    assert "direct NHWC" in choice.steps[0], choice
    got, x, w = run_direct_conv(lib, shape)
    s, p = shape[6], shape[7]
    exact = reference_conv_nhwc(bf16_round(x), bf16_round(w), s, p)
    assert np.abs(got - exact).max() <= 1e-5 * np.abs(exact).max()  # bf16 products, fp32 sums
    ref = reference_conv_nhwc(x, w, s, p)
    assert np.abs(got - ref).max() <= BF16_TOLERANCE * np.abs(ref).max()  # the bf16 tolerance against fp32


def _cnn() -> onnx.ModelProto:
    """A stem (3 -> 32, 7x7 stride 2), a 3x3 block with a residual add, a 1x1 stride-2 conv (K = 64:
    too short for either kernel), a 3x3 64 -> 64 (K = 576: the one long enough for the im2col path)."""
    rng = np.random.default_rng(5)

    def weight(name, *shape):
        return numpy_helper.from_array(rng.normal(0, (2 / np.prod(shape[1:])) ** 0.5, shape).astype("float32"), name)

    inits = [weight("w0", 32, 3, 7, 7), weight("w1", 32, 32, 3, 3), weight("w2", 64, 32, 3, 3),
             weight("w3", 64, 64, 1, 1), weight("w4", 64, 64, 3, 3), numpy_helper.from_array(rng.normal(0, 0.1, 32).astype("float32"), "b1")]
    conv = helper.make_node
    nodes = [conv("Conv", ["x", "w0"], ["a"], kernel_shape=[7, 7], strides=[2, 2], pads=[3, 3, 3, 3]),
             conv("Relu", ["a"], ["ar"]),
             conv("Conv", ["ar", "w1", "b1"], ["b"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             conv("Add", ["b", "ar"], ["c"]), conv("Relu", ["c"], ["cr"]),
             conv("Conv", ["cr", "w2"], ["d"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]), conv("Relu", ["d"], ["dr"]),
             conv("Conv", ["dr", "w3"], ["e"], kernel_shape=[1, 1], strides=[2, 2]),
             conv("Conv", ["e", "w4"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture
def cnn_path(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(_cnn(), path)
    return str(path)


@pytest.mark.parametrize("spec, direct", [("cpu:sapphirerapids", True), ("cpu:znver4", False)])
def test_amx_models_run_every_conv_direct_in_nhwc_and_avx512_bf16_ones_keep_them_fp32(cnn_path, spec, direct):
    from export.build import build

    built = build(load_workload(cnn_path), parse_target(spec), precision="bf16")
    text = built.lowered.script()
    short = [k for k in built.precision.kept_fp32 if "reduction C_in" in k]
    if direct:  # every convolution but the 1x1 of K = 64, the stem too
        assert built.precision.converted == 4 and "bf16_im2col" not in text
        assert short == [f"1 convolution(s) with a reduction C_in*kh*kw < {MIN_REDUCTION_DIRECT}, too short for "
                         "bf16 to pay: 64x1x1 -> 64"]
    else:  # vdpbf16ps alone, its rate not measured here: every convolution fp32 (bf16_conv.why_convs_fp32)
        assert built.precision.converted == 0 and not short and "bf16_im2col" not in text
        assert any(k.startswith("convolutions: the target's bf16 instruction is vdpbf16ps")
                   for k in built.precision.kept_fp32)
    assert ("conv2d_nhwc_bf16" in text) == direct
    if direct:  # the NHWC activations flow from one convolution to the next: one transpose in, one out
        assert text.count("T.sblock(\"T_transpose\")") <= 2, text.count("T.sblock(\"T_transpose\")")
    asm = "".join(m.inspect_source("asm") for m in built.executable.mod.imports)
    assert ("tdpbf16ps" in asm) == direct and "vdpbf16ps" not in asm


@pytest.mark.skipif(not HAS_AMX, reason="this CPU has no AMX-BF16 (amx_bf16 not in its flags): the bundle cannot "
                                        "run here")
def test_direct_bf16_bundle_verifies_against_onnx_runtime_at_the_stated_tolerance(cnn_path, tmp_path):
    from export.flow import export_workload

    report = export_workload(cnn_path, "cpu", tmp_path / "bundle", precision="bf16", layers=False)
    assert report.verified, report.verdict
    assert report.manifest["tolerance"] == BF16_TOLERANCE and report.manifest["precision"]["converted_products"] == 4


@pytest.mark.slow
@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16 (avx512_bf16 not in its flags): the bundle "
                                         "cannot run here")
def test_resnet18_bf16_bundle_verifies_with_its_convolutions_direct_where_amx_tiles_are(tmp_path):
    from export.flow import export_workload

    report = export_workload("resnet18", "cpu", tmp_path / "r18", precision="bf16", layers=False)
    assert report.verified, report.verdict
    kept = [k for k in report.manifest["precision"]["kept_fp32"] if "reduction C_in" in k]
    if HAS_AMX:  # the stem (K = 147) too; only layer2's 1x1 downsample (K = 64) falls short
        assert kept == [f"1 convolution(s) with a reduction C_in*kh*kw < {MIN_REDUCTION_DIRECT}, too short for bf16 "
                        "to pay: 64x1x1 -> 128"], kept
