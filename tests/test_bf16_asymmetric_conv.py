"""Asymmetric kernels (1x7, 7x1, 1x3, 3x1) and odd maps on the direct AMX-BF16 convolution
(:mod:`explorer.schedule.amx_bf16_conv`): the tile call's description drops a tap axis of extent 1 as
``blockize`` drops it from the block (:mod:`explorer.schedule.amx_conv_intrin`). One kept matched no
such kernel, and the default fell back to a scalar loop nest: Inception v3 at bf16 ran 2.2 s a run,
its 1x7 and 7x1 convolutions at ~2 GFLOPS. Compile-only for ``cpu:sapphirerapids`` on any host;
numeric runs only where the flags schedx reads list AMX-BF16."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm_ffi
from onnx import TensorProto, helper, numpy_helper

from explorer.passes.bf16_dense import bf16_round
from explorer.precision import BF16_TOLERANCE
from explorer.schedule.defaults import default_schedule
from explorer.schedule.trace import replay
from explorer.target import parse_target
from explorer.workload import load_workload
from explorer.workload.keys import owned_task_module
from tests.cpu_marks import HAS_AMX, NEEDS_AMX
from tests.direct_bf16_conv import built_direct_conv, direct_conv_func, reference_conv_nhwc, run_direct_conv

# n, c, h, w, oc, (kh, kw), stride, (pad rows, pad columns); the intrinsic's taps and walk: a 1x7 and a
# 7x1 on a 17x17 map (tiled across rows, 23 and 17 wide), a 1x3 along 28-pixel rows (tiles of 14), a
# weights-heavy 3x1 stride 2 onto 14-pixel rows (two whole rows a call), a 3x1 along rows (its column axis
# dropped), a few-channel 1x7 (a kernel row per tile row, its row axis dropped)
SHAPES = [((1, 32, 17, 17, 32, (1, 7), 1, (0, 3)), "t1x7_flat23"),
          ((1, 32, 17, 17, 32, (7, 1), 1, (3, 0)), "t7x1_flat17"),
          ((1, 32, 28, 28, 32, (1, 3), 1, (0, 1)), "t1x3_taps"),
          ((1, 64, 28, 28, 512, (3, 1), 2, (1, 0)), "t3x1_taps_y2"),
          ((1, 32, 28, 28, 32, (3, 1), 1, (1, 0)), "t3x1_taps"),
          ((1, 4, 28, 28, 32, (1, 7), 1, (0, 3)), "t1x7_rows")]
IDS = ["1x7-17", "7x1-17", "1x3-rows", "3x1-strided-two-rows", "3x1-taps", "1x7-few-channels"]


@pytest.mark.parametrize("shape, walk", SHAPES, ids=IDS)
def test_an_asymmetric_kernel_gets_the_amx_tile_call_not_a_scalar_fallback(shape, walk):
    lib, choice = built_direct_conv("cpu:sapphirerapids", shape)
    assert choice.rule == "full" and not choice.fallback_reason, choice
    assert "direct NHWC, no im2col" in choice.steps[0] and f"_{walk}" in choice.steps[0], choice.steps[0]
    asm = lib.mod.inspect_source("asm")
    assert "tdpbf16ps" in asm and "tileloadd" in asm


@NEEDS_AMX
@pytest.mark.parametrize("shape, walk", SHAPES, ids=IDS)
def test_an_asymmetric_amx_kernel_matches_numpy_at_the_bf16_tolerance(shape, walk):
    lib, choice = built_direct_conv("cpu", shape)
    assert f"_{walk}" in choice.steps[0], choice
    got, x, w = run_direct_conv(lib, shape)
    s, p = shape[6], shape[7]
    exact = reference_conv_nhwc(bf16_round(x), bf16_round(w), s, p)
    assert np.abs(got - exact).max() <= 1e-5 * np.abs(exact).max()  # bf16 products, fp32 sums
    ref = reference_conv_nhwc(x, w, s, p)
    assert np.abs(got - ref).max() <= BF16_TOLERANCE * np.abs(ref).max()


def _inception_block() -> onnx.ModelProto:
    """Inception v3's shapes in small: a 3x3 stride-2 convolution without padding from a 35x35 map
    onto 17x17 (rows no tile divides), then a 1x7 and a 7x1 on the 17x17 map, each with a ReLU."""
    rng = np.random.default_rng(7)

    def weight(name, *shape):
        return numpy_helper.from_array(rng.normal(0, (2 / np.prod(shape[1:])) ** 0.5, shape).astype("float32"), name)

    node = helper.make_node
    nodes = [node("Conv", ["x", "w0"], ["a"], kernel_shape=[3, 3], strides=[2, 2]), node("Relu", ["a"], ["ar"]),
             node("Conv", ["ar", "w1"], ["b"], kernel_shape=[1, 7], pads=[0, 3, 0, 3]), node("Relu", ["b"], ["br"]),
             node("Conv", ["br", "w2"], ["c"], kernel_shape=[7, 1], pads=[3, 0, 3, 0]), node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "inception_block",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 35, 35])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 17, 17])],
                              [weight("w0", 32, 32, 3, 3), weight("w1", 32, 32, 1, 7), weight("w2", 32, 32, 7, 1)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture
def block_path(tmp_path):
    path = tmp_path / "inception_block.onnx"
    onnx.save(_inception_block(), path)
    return str(path)


def test_a_bf16_build_runs_every_inception_shaped_conv_on_amx_tiles_with_no_fallback(block_path):
    from export.build import build

    built = build(load_workload(block_path), parse_target("cpu:sapphirerapids"), precision="bf16")
    assert built.precision.converted == 3, built.precision.kept_fp32  # all three direct, none kept fp32
    assert not [w for w in built.warnings if "fall" in w.lower()], built.warnings
    text = built.lowered.script()
    # each convolution's tiles one call (the tensorized block), no scalar block left, no im2col
    assert text.count('T.sblock("conv2d_nhwc_bf16_o_update")') == 3, text
    assert 'T.sblock("conv2d_nhwc_bf16")' not in text and "bf16_im2col" not in text
    assert text.count('T.call_extern("int32", "schedx_amx_bf16_conv_tile_') == 3
    asm = "".join(m.inspect_source("asm") for m in built.executable.mod.imports)
    assert "tdpbf16ps" in asm


@pytest.mark.skipif(not HAS_AMX, reason="this CPU has no AMX-BF16 (amx_bf16 not in its flags): the bundle cannot "
                                        "run here")
def test_an_inception_shaped_bf16_bundle_verifies_against_onnx_runtime(block_path, tmp_path):
    from export.flow import export_workload

    report = export_workload(block_path, "cpu", tmp_path / "bundle", precision="bf16", layers=False)
    assert report.verified, report.verdict
    assert report.manifest["precision"]["converted_products"] == 3


def test_a_replayed_trace_of_a_1x7_kernel_builds_the_kernel_its_default_built():
    shape = SHAPES[0][0]
    func, choice = default_schedule(direct_conv_func(*shape), parse_target("cpu:sapphirerapids").cpu_spec())
    replayed = replay(owned_task_module(direct_conv_func(*shape)), choice.trace).mod["main"]
    assert tvm_ffi.structural_equal(replayed, func)  # (a step the Schedule page re-applies)
