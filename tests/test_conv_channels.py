"""PadConvOutputChannels: a channels-last convolution whose output channels no vector divides
(detection heads: 75, 255, 546) computes whole vectors and slices the real channels off; its
default schedule then gets vector tiles on every vector width, and the model's outputs stay
ONNX Runtime's."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

from explorer.passes.conv_channels import padded_channels
from explorer.schedule.codegen import code_views
from explorer.schedule.defaults import default_schedule
from explorer.target import parse_target
from explorer.workload import load_workload

TILE = re.compile(r"register tile (\d+)x(\d+)")


def test_padded_channels_are_whole_vectors_without_much_waste():
    assert padded_channels(75) == 80  # YOLO: 3 x (5 + 20 classes)
    assert padded_channels(255) == 256
    assert padded_channels(546) == 560  # SSD: 6 anchors x 91 classes
    assert padded_channels(21) == 24  # to 32 would add half the work
    assert padded_channels(24) == 24 and padded_channels(64) == 64  # 8 divides them: left alone
    assert padded_channels(3) == 3 and padded_channels(7) == 7  # fewer than a vector
    assert padded_channels(1000) == 1008  # SqueezeNet's classes: 16 lanes (AVX-512) for 0.8% more work
    assert padded_channels(136) == 136 and padded_channels(200) == 200  # 16 would add 6% / 4%: AVX2 loses


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


def _conv_task(path):
    return next(t for t in load_workload(path).tasks() if "conv" in t.name)


def test_a_head_computes_whole_vectors_and_slices_the_real_channels(tmp_path):
    task = _conv_task(_head(tmp_path / "head.onnx"))
    assert "strided_slice" in task.name, task.name
    script = task.mod["main"].script()
    assert "T.int64(80)" in script and "T.int64(75)" in script
    bare = _conv_task(_head(tmp_path / "wide.onnx", channels=64))  # 8 divides it: left alone
    assert "strided_slice" not in bare.name, bare.name


@pytest.mark.parametrize("spec", ["cpu:x86-64-v3", "cpu:x86-64-v4", "aarch64:cortex-a76"])
@pytest.mark.parametrize("conv1d,channels,kernel", [(False, 75, 3), (True, 75, 3), (False, 1000, 1)])
def test_the_padded_head_gets_vector_tiles_on_every_width(tmp_path, spec, conv1d, channels, kernel):
    """75 channels (a YOLO head), and 1000 (SqueezeNet's classifier: 8-lane tiles on AVX-512 before)."""
    target = parse_target(spec)
    cpu = target.cpu_spec()
    task = _conv_task(_head(tmp_path / "head.onnx", channels=channels, kernel=kernel, conv1d=conv1d))
    func, choice = default_schedule(task.mod["main"], cpu)
    tile = TILE.search(choice.steps[0])
    assert tile and int(tile.group(2)) % cpu.lanes("float32") == 0, choice.steps  # was 20x1: scalar
    if spec.startswith("cpu"):  # compiled, not run: multiply-adds on the width's registers
        asm = code_views(tvm.IRModule({"main": func}), target).asm
        register = "zmm" if "v4" in spec else "ymm"
        assert re.search(rf"vfmadd\w+\s+.*%{register}", asm), asm[:2000]


@pytest.mark.heavy
@pytest.mark.parametrize("channels,kernel,conv1d", [(75, 1, False), (21, 3, False), (75, 3, True)])
def test_padded_heads_still_match_onnx_runtime(tmp_path, channels, kernel, conv1d):
    from export import export_workload

    workload = load_workload(_head(tmp_path / "head.onnx", channels, kernel, conv1d))
    report = export_workload(workload, "cpu", tmp_path / "b", layers=False)
    assert report.ok and report.verified, report.verdict
