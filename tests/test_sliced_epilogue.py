"""A convolution padded to whole vectors (``passes/conv_channels.py``: 75 channels computed as 80,
MobileNetV2's 24 as 32 on AVX-512) keeps its real channels with a ``strided_slice`` that its
epilogue reads: the default schedule computes that epilogue tile by tile from the tile's
accumulator (``tile_loops.slices_per_tile``), not in a second pass over the padded output, and the
numbers stay the unscheduled kernel's."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

from explorer.passes.pipelines import TASK_PIPELINE, get_pipeline
from explorer.schedule.codegen import code_views
from explorer.schedule.defaults import default_schedule
from explorer.target import parse_target
from explorer.workload import load_workload
from explorer.workload.task import module_tasks

PER_TILE = "epilogue(s) on a slice of it per tile"


def _projection(path, channels: int, side: int = 16) -> str:
    """A 1x1 conv (+ bias) to ``channels`` outputs over a side x side map of 32 channels, NCHW as exported."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.2, (channels, 32, 1, 1)).astype("float32"), "w"),
             numpy_helper.from_array(rng.normal(0, 0.2, (channels,)).astype("float32"), "b")]
    graph = helper.make_graph([helper.make_node("Conv", ["input", "w", "b"], ["out"])], "projection",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 32, side, side])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, channels, side, side])],
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


def _conv_task(path: str, spec: str):
    target = parse_target(spec).tvm()
    with tvm.transform.PassContext(opt_level=3), target:
        fused = get_pipeline(TASK_PIPELINE).build(target)(load_workload(path).mod)
    return next(t for t in module_tasks(fused) if "conv" in t.name)


def test_a_sliced_epilogue_runs_per_tile_and_computes_the_same_numbers(tmp_path):
    spec = "cpu"  # this machine: built and run (75 channels are padded on every vector width)
    task = _conv_task(_projection(tmp_path / "head.onnx", 75), spec)
    assert "strided_slice" in task.name, task.name
    target = parse_target(spec, cores=1)
    func, choice = default_schedule(task.mod["main"], target.cpu_spec())
    assert any(PER_TILE in step for step in choice.steps), choice.steps
    script = func.script()
    assert script.count("T.parallel(") == 1, script  # one pass: no second loop over the padded output
    args = [np.random.default_rng(1).random([int(d) for d in b.shape]).astype(b.dtype) for b in func.params]
    outputs = []
    for kernel in (func, task.mod["main"]):
        lib = tvm.compile(tvm.IRModule({"main": kernel.with_attr("global_symbol", "main")}), target=target.tvm())
        tensors = [tvm.runtime.tensor(a) for a in args]
        lib["main"](*tensors)
        outputs.append(tensors[-1].numpy())
    np.testing.assert_allclose(outputs[0], outputs[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spec,channels,register", [("cpu:sapphirerapids", 24, "zmm"), ("cpu:znver3", 75, "ymm")])
def test_the_slice_runs_per_tile_on_avx512_and_avx2(tmp_path, spec, channels, register):
    """Compiled for each CPU, not run: MobileNetV2's 24-channel projection computes 32 channels in
    16-lane multiply-adds on AVX-512 (AVX2 has three whole 8-lane vectors: nothing to slice), a
    75-channel head 80 in 8-lane ones on AVX2; the real channels are written as the tile's epilogue."""
    target = parse_target(spec)
    task = _conv_task(_projection(tmp_path / "project.onnx", channels), spec)
    func, choice = default_schedule(task.mod["main"], target.cpu_spec())
    assert any(PER_TILE in step for step in choice.steps), choice.steps
    assert func.script().count("T.parallel(") == 1
    assert re.search(rf"vfmadd\w+\s+.*%{register}", code_views(tvm.IRModule({"main": func}), target).asm)


def test_a_one_row_tile_keeps_its_slice_in_a_pass_of_its_own(tmp_path):
    """A matrix-vector product (a 1x1 map: a squeeze-excite layer's or a classifier's) has one-row
    tiles; per tile its slice ran 2.9x slower than in a pass of its own (MobileNetV3's SE layers)."""
    spec = "cpu:sapphirerapids"
    task = _conv_task(_projection(tmp_path / "se.onnx", 75, side=1), spec)
    _, choice = default_schedule(task.mod["main"], parse_target(spec).cpu_spec())
    assert "register tile 1x" in choice.steps[0] and not any(PER_TILE in step for step in choice.steps), choice.steps
