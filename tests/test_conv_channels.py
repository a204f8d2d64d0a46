"""PadConvOutputChannels: a channels-last convolution whose output channels no vector of the target
divides (detection heads: 75, 255, 546; on AVX-512 also 24, 40, 1000) computes whole vectors and
slices the real channels off; its default schedule then gets vector tiles on every vector width,
and the model's outputs stay ONNX Runtime's."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

from explorer.passes.conv_channels import padded_channels
from explorer.passes.pipelines import TASK_PIPELINE, get_pipeline
from explorer.schedule.codegen import code_views
from explorer.schedule.defaults import default_schedule
from explorer.target import parse_target
from explorer.workload import load_workload
from explorer.workload.task import module_tasks

TILE = re.compile(r"register tile (\d+)x(\d+)")


def test_padded_channels_are_whole_vectors_without_much_waste():
    for lanes in (4, 8, 16):  # NEON, AVX2, AVX-512 float32
        assert padded_channels(75, lanes) == (76 if lanes == 4 else 80)  # YOLO: 3 x (5 + 20 classes)
        assert padded_channels(255, lanes) == 256
        assert padded_channels(64, lanes) == 64
        assert padded_channels(3, lanes) == 3 and padded_channels(7, lanes) == 7  # fewer than a vector
    assert padded_channels(546, 16) == 560 and padded_channels(546, 8) == 552  # SSD: 6 anchors x 91 classes
    assert padded_channels(21, 16) == 24  # to 32 would add half the work: 8 lanes at least
    # 8 divides them: AVX-512 pays a third more work for whole vectors, AVX2 has them already
    for channels, avx512 in ((24, 32), (40, 48), (136, 144), (1000, 1008)):
        assert padded_channels(channels, 16) == avx512 and padded_channels(channels, 8) == channels
    assert padded_channels(8, 16) == 8  # 16 would double it


def _head(path, channels=75, kernel=1, conv1d=False):
    """A detection head: conv (+ bias) then sigmoid, NCHW as exported."""
    rng = np.random.default_rng(0)
    shape = (channels, 32, kernel) if conv1d else (channels, 32, kernel, kernel)
    inits = [numpy_helper.from_array(rng.normal(0, 0.2, shape).astype("float32"), "w"),
             numpy_helper.from_array(rng.normal(0, 0.2, (channels,)).astype("float32"), "b")]
    pads = [kernel // 2] * (2 if conv1d else 4)
    nodes = [helper.make_node("Conv", ["input", "w", "b"], ["c"], pads=pads),
             helper.make_node("Sigmoid", ["c"], ["out"])]
    size = [1, 32, 40] if conv1d else [1, 32, 20, 20]
    out = [1, channels, 40] if conv1d else [1, channels, 20, 20]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("input", TensorProto.FLOAT, size)],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, out)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


def _conv_task(path, spec: str | None = None):
    """The convolution's task after the task pipeline, run for ``spec`` (None: this machine, as
    load_workload runs it)."""
    if spec is None:
        return next(t for t in load_workload(path).tasks() if "conv" in t.name)
    target = parse_target(spec).tvm()
    with tvm.transform.PassContext(opt_level=3), target:
        fused = get_pipeline(TASK_PIPELINE).build(target)(load_workload(path).mod)
    return next(t for t in module_tasks(fused) if "conv" in t.name)


def test_a_head_computes_whole_vectors_and_slices_the_real_channels(tmp_path):
    task = _conv_task(_head(tmp_path / "head.onnx"))  # 75: no vector width divides it
    assert "strided_slice" in task.name, task.name
    script = task.mod["main"].script()
    whole = padded_channels(75, parse_target("cpu").cpu_spec().lanes("float32"))  # 80 on AVX2 and AVX-512
    assert f"T.int64({whole})" in script and "T.int64(75)" in script
    bare = _conv_task(_head(tmp_path / "wide.onnx", channels=64))  # 16 divides it: left alone
    assert "strided_slice" not in bare.name, bare.name


@pytest.mark.parametrize("spec,lanes", [("cpu:znver3", 8), ("cpu:znver4", 16), ("cpu:sapphirerapids", 16)])
def test_a_24_channel_projection_is_padded_where_the_vectors_are_wider(tmp_path, spec, lanes):
    """MobileNetV2's 24-channel 1x1 projection: AVX-512 computes 32 channels in whole 16-lane
    vectors (1.5-1.7x faster than 8-lane tiles), AVX2 keeps 24 (three whole 8-lane vectors).
    Compiled for each CPU, not run."""
    target = parse_target(spec)
    task = _conv_task(_head(tmp_path / "project.onnx", channels=24), spec)
    assert ("strided_slice" in task.name) == (lanes == 16), task.name
    weights = re.search(r"T\.int64\(1\), T\.int64\(32\), T\.int64\((\d+)\)\)", task.mod["main"].script())
    assert weights and int(weights.group(1)) == (32 if lanes == 16 else 24)  # 1x1x32 -> C weights
    func, choice = default_schedule(task.mod["main"], target.cpu_spec())
    tile = TILE.search(choice.steps[0])
    assert tile and int(tile.group(2)) % lanes == 0, choice.steps
    asm = code_views(tvm.IRModule({"main": func}), target).asm
    assert re.search(rf"vfmadd\w+\s+.*%{'zmm' if lanes == 16 else 'ymm'}", asm), asm[:2000]


@pytest.mark.parametrize("spec", ["cpu:x86-64-v3", "cpu:x86-64-v4", "aarch64:cortex-a76"])
@pytest.mark.parametrize("conv1d,channels,kernel", [(False, 75, 3), (True, 75, 3), (False, 1000, 1)])
def test_the_padded_head_gets_vector_tiles_on_every_width(tmp_path, spec, conv1d, channels, kernel):
    """75 channels (a YOLO head), and 1000 (SqueezeNet's classifier: 8-lane tiles on AVX-512 before)."""
    target = parse_target(spec)
    cpu = target.cpu_spec()
    task = _conv_task(_head(tmp_path / "head.onnx", channels=channels, kernel=kernel, conv1d=conv1d), spec)
    func, choice = default_schedule(task.mod["main"], cpu)
    tile = TILE.search(choice.steps[0])
    assert tile and int(tile.group(2)) % cpu.lanes("float32") == 0, choice.steps  # was 20x1: scalar
    if spec.startswith("cpu"):  # compiled, not run: multiply-adds on the width's registers
        asm = code_views(tvm.IRModule({"main": func}), target).asm
        register = "zmm" if "v4" in spec else "ymm"
        assert re.search(rf"vfmadd\w+\s+.*%{register}", asm), asm[:2000]


@pytest.mark.heavy
@pytest.mark.parametrize("channels,kernel,conv1d", [(75, 1, False), (21, 3, False), (75, 3, True), (24, 1, False)])
def test_padded_heads_still_match_onnx_runtime(tmp_path, channels, kernel, conv1d):
    from export import export_workload

    workload = load_workload(_head(tmp_path / "head.onnx", channels, kernel, conv1d))
    report = export_workload(workload, "cpu", tmp_path / "b", layers=False)
    assert report.ok and report.verified, report.verdict
