"""``ExpandIntoDepthwise``: an inverted-residual block's 1x1 expansion computed inside the strided
depthwise conv that reads it (one kernel, by bands of output rows); outputs as ONNX Runtime's and
as the two kernels', and the default rule builds for other CPUs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

from explorer.models import import_onnx
from explorer.passes.catalog import make_pass
from explorer.passes.expand_depthwise import DEFAULT_L2_BYTES, expand_into_depthwise, min_map_bytes
from explorer.passes.pass_target import pass_cpu_target
from explorer.passes.pipelines import INFERENCE_PASSES
from explorer.schedule.defaults.apply import apply_default_schedules
from explorer.schedule.defaults.depthwise import ROW_TILES, first_divisor
from explorer.schedule.defaults.expand_depthwise import BandTiles, band_tiles
from explorer.target import host_target, parse_target
from tests.onnx_cases import ort_run

INPUTS, EXPANDED, SIDE = 8, 32, 28
_PASS = "ExpandIntoDepthwise"


def _block(stride: int, *, side: int = SIDE, expanded: int = EXPANDED, pad: int = 1,
           expansion_outputs: int | None = None) -> onnx.ModelProto:
    """x -> 1x1 conv (bias) -> ReLU6 -> 3x3 depthwise conv (``stride``, ``pad``, bias) -> ReLU6 -> 1x1
    projection; ``expansion_outputs`` 1: the 1x1 conv has one output channel, its bias ``expanded``."""
    rng = np.random.default_rng(0)
    outputs = expansion_outputs or expanded
    bias_shape = (expanded,) if outputs == expanded else (expanded, 1, 1)
    inits = [numpy_helper.from_array(rng.normal(0, 0.4, shape).astype("float32"), name) for name, shape in
             (("we", (outputs, INPUTS, 1, 1)), ("be", bias_shape), ("wd", (expanded, 1, 3, 3)),
              ("bd", (expanded,)), ("wp", (INPUTS, expanded, 1, 1)))]
    inits += [numpy_helper.from_array(np.array(v, "float32"), n) for n, v in (("lo", 0.0), ("hi", 6.0))]
    expansion = ([helper.make_node("Conv", ["x", "we", "be"], ["e"])] if outputs == expanded else
                 [helper.make_node("Conv", ["x", "we"], ["e0"]), helper.make_node("Add", ["e0", "be"], ["e"])])
    nodes = [*expansion, helper.make_node("Clip", ["e", "lo", "hi"], ["ea"]),
             helper.make_node("Conv", ["ea", "wd", "bd"], ["d"], group=expanded, pads=[pad] * 4,
                              strides=[stride, stride]),
             helper.make_node("Clip", ["d", "lo", "hi"], ["da"]),
             helper.make_node("Conv", ["da", "wp"], ["y"])]
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, INPUTS, side, side])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="")


def _through_pipeline(model: onnx.ModelProto, spec: str) -> tvm.IRModule:
    """``model`` through every pass of the inference pipeline as a build for ``spec`` runs them."""
    mod = import_onnx(model).mod
    with parse_target(spec).tvm():
        for name in INFERENCE_PASSES:
            mod = make_pass(name)(mod)
    return mod


def _fused(model: onnx.ModelProto, rewrite: bool) -> tvm.IRModule:
    """The block through the inference pipeline, the expansion rewritten whatever its size (``rewrite``)
    or not at all."""
    mod = import_onnx(model).mod
    at = INFERENCE_PASSES.index(_PASS)
    with tvm.target.Target({"kind": "llvm"}):
        for name in INFERENCE_PASSES[:at]:
            mod = make_pass(name)(mod)
        if rewrite:
            mod = expand_into_depthwise(mod, min_bytes=0)
        for name in INFERENCE_PASSES[at + 1:]:
            mod = make_pass(name)(mod)
    return mod


def _kernels(mod: tvm.IRModule) -> list[str]:
    return [gv.name_hint for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]


def _run(mod: tvm.IRModule, x: np.ndarray) -> np.ndarray:
    target = host_target()
    scheduled, _ = apply_default_schedules(mod, target.cpu_spec())
    vm = relax.VirtualMachine(tvm.compile(scheduled, target=target.tvm()), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


@pytest.fixture(scope="module")
def strided() -> onnx.ModelProto:
    return _block(2)


def test_the_expansion_and_its_depthwise_conv_become_one_kernel_with_both_epilogues(strided):
    mod = _fused(strided, rewrite=True)
    names = _kernels(mod)
    fused = [n for n in names if "expand_depthwise" in n]
    assert len(fused) == 1 and "maximum" in fused[0] and "minimum" in fused[0], names  # the depthwise ReLU6 fused in
    before = _kernels(_fused(strided, rewrite=False))
    assert len(names) == len(before) - 1, (names, before)
    script = mod[fused[0]].script()
    assert f"T.int64({SIDE + 2}), T.int64({SIDE + 2}), T.int64({EXPANDED})" in script  # the map, padded
    assert "T.min(T.max(" in script  # the expansion's ReLU6 inside the kernel


def test_the_pipeline_leaves_a_map_smaller_than_the_l2_and_a_stride_1_conv_alone(strided):
    assert not any("expand_depthwise" in n for n in _kernels(_fused(strided, rewrite=False)))
    with tvm.target.Target({"kind": "llvm"}):
        mod = import_onnx(_block(1)).mod
        for name in INFERENCE_PASSES[:INFERENCE_PASSES.index(_PASS)]:
            mod = make_pass(name)(mod)
        assert expand_into_depthwise(mod, min_bytes=0).same_as(mod)  # stride 1: not rewritten


def test_the_fused_kernel_computes_what_onnx_runtime_and_the_two_kernels_do(strided):
    x = np.random.default_rng(1).uniform(-1, 2, (1, INPUTS, SIDE, SIDE)).astype("float32")
    want = ort_run(strided, {"x": x})[0]
    fused, pair = _run(_fused(strided, rewrite=True), x), _run(_fused(strided, rewrite=False), x)
    np.testing.assert_allclose(fused, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fused, pair, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("spec", ["host", "cpu:znver3", "cpu:sapphirerapids"])
def test_the_default_rule_schedules_the_kernel_by_bands_and_it_builds(strided, spec):
    target = host_target() if spec == "host" else parse_target(spec)
    mod = _fused(strided, rewrite=True)
    name = next(n for n in _kernels(mod) if "expand_depthwise" in n)
    scheduled, choices = apply_default_schedules(mod, target.cpu_spec())
    assert choices[name].rule == "full" and "bands of 7 output rows (15 expanded rows)" in choices[name].steps[0], choices[name]
    tiles = band_tiles(SIDE // 2, EXPANDED, target.cpu_spec().lanes("float32"))  # what the pass asked
    assert f"depthwise tile {tiles.pixels}x{tiles.channels}" in choices[name].steps[0], choices[name]
    tvm.compile(scheduled, target=target.tvm())  # compiles for that CPU (nothing runs)


def test_the_real_pipeline_rewrites_a_map_larger_than_the_l2_and_leaves_a_small_one():
    """For another CPU (cpu:znver3: the default 2 MiB, 8 lanes): 48 channels at 112 x 112 (2.4 MB) fused,
    the 28 x 28 block (100 KB) not."""
    with parse_target("cpu:znver3").tvm():
        seen = pass_cpu_target()  # what the pass reads
        assert min_map_bytes(seen) == DEFAULT_L2_BYTES and seen.cpu_spec().lanes("float32") == 8
    assert any("expand_depthwise" in n for n in _kernels(_through_pipeline(_block(2, side=112, expanded=48), "cpu:znver3")))
    assert not any("expand_depthwise" in n for n in _kernels(_through_pipeline(_block(2), "cpu:znver3")))


@pytest.mark.parametrize("case", ["broadcast expansion", "13-wide output", "channels no whole vectors"])
def test_no_rewrite_where_the_shapes_differ_or_the_bands_schedule_cannot_take_the_kernel(case):
    """A 1-channel expansion broadcast to 32 by its bias (the kernel's map would have 1 channel); output
    rows no depthwise tile divides (pad 0: 13 wide); 32 channels on 64 lanes (no whole vector: on a real
    CPU, channels padded to the vector by PadConvOutputChannels leave a slice that the match stops at)."""
    model = {"broadcast expansion": lambda: _block(2, expansion_outputs=1),
             "13-wide output": lambda: _block(2, pad=0),
             "channels no whole vectors": lambda: _block(2)}[case]()
    mod = import_onnx(model).mod
    with tvm.target.Target({"kind": "llvm"}):
        for name in INFERENCE_PASSES[:INFERENCE_PASSES.index(_PASS)]:
            mod = make_pass(name)(mod)
        lanes = 64 if case == "channels no whole vectors" else 16
        assert expand_into_depthwise(mod, min_bytes=0, lanes=lanes).same_as(mod)
        if case == "channels no whole vectors":  # the same block on 8 lanes is rewritten: the lanes alone refused it
            assert not expand_into_depthwise(mod, min_bytes=0, lanes=8).same_as(mod)


def test_the_band_tiles_are_the_first_row_tile_dividing_the_row_and_whole_vectors_of_channels():
    """One answer for the pass (rewrite or not) and the schedule (which tiles): none where no row tile
    divides the row or the channels are no whole vectors; two vectors of channels where they divide."""
    assert first_divisor(56, ROW_TILES) == 7 and first_divisor(48, ROW_TILES) == 8 and first_divisor(13, ROW_TILES) is None
    assert band_tiles(56, 96, 16) == BandTiles(7, 32) and band_tiles(56, 48, 16) == BandTiles(7, 16)
    assert band_tiles(24, 48, 8) == BandTiles(8, 16)
    assert band_tiles(13, 96, 16) is None and band_tiles(56, 40, 16) is None
