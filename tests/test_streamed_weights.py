"""A matrix-vector product by constant weights (a classifier's hidden layers at batch 1: AlexNet's
9216x4096, VGG's, ZFNet's; a decoder's projections for one token) reads every weight once per
call. Its panels are packed at build time and each single-row tile reads its panel front to back;
the tile reads at most ``STREAM_STEP_BYTES`` a step: on AVX-512 the widest tile (1x256, a
kilobyte a step) ran 2.7x slower than 1x64 on the same packed panels. Checked for AVX2, AVX-512
and NEON by building for them; the numbers against ONNX Runtime on the host."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from explorer.schedule.defaults import default_schedule
from explorer.schedule.defaults.tile_choice import STREAM_STEP_BYTES
from explorer.target import parse_target
from explorer.workload import load_workload
from tests.isa_asm import TARGETS, VECTOR_BITS, assert_vector_width, target_asm


def _hidden_layer(path, k=2048, n=1024) -> str:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.02, (k, n)).astype("float32"), "w"),
             numpy_helper.from_array(rng.normal(0, 0.1, (n,)).astype("float32"), "b")]
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    graph = helper.make_graph(nodes, "hidden", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


@pytest.mark.parametrize("isa", sorted(TARGETS))
def test_a_matrix_vector_product_streams_its_packed_weights_a_few_lines_a_step(isa, tmp_path):
    target = parse_target(TARGETS[isa])
    cpu = target.cpu_spec()
    tasks = [t for t in load_workload(_hidden_layer(tmp_path / "h.onnx")).tasks() if "matmul" in t.name]
    assert len(tasks) == 1, tasks
    func, choice = default_schedule(tasks[0].mod["main"], cpu)
    said = choice.steps[0]
    assert choice.rule == "full" and "weights packed in panels" in said, choice.steps
    rows, width = (int(x) for x in said.split("register tile ")[1].split()[0].split("x"))
    assert rows == 1 and width % cpu.lanes("float32") == 0 and width * 4 <= STREAM_STEP_BYTES, said
    assert_vector_width(target_asm(func, target), VECTOR_BITS[isa])


@pytest.mark.heavy
def test_a_matrix_vector_product_matches_onnx_runtime(tmp_path):
    from export import export_workload

    workload = load_workload(_hidden_layer(tmp_path / "h.onnx", k=1000, n=768))
    report = export_workload(workload, "cpu", tmp_path / "bundle", layers=False)
    assert report.ok and report.verified, report.verdict
