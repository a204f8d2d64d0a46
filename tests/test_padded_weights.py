"""A matrix-vector product by constant weights whose outputs no vector (nor half a vector) divides:
a 21841-class head (ImageNet-22k, a prime), GPT-2's 50257-word head for one token. It used to
run in scalars (2% of the peak, 7.1x ONNX Runtime); its outputs are now padded to whole vectors,
the weights padded and packed into panels by one copy the export computes at build time. 1000
classes keep their unpadded tiles (half vectors divide 1000). Checked for AVX2, AVX-512 and NEON
by building for them; the numbers against ONNX Runtime on the host."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from explorer.schedule.defaults import default_schedule
from explorer.target import parse_target
from explorer.ir.tir_walk import LAYOUT_REWRITE_PREPROC, blocks
from explorer.workload import load_workload
from tests.isa_asm import TARGETS, VECTOR_BITS, assert_vector_width, target_asm

PRIME = 1031  # outputs no power of two divides


def _head(path, k=64, n=PRIME, rows=1) -> str:
    w = numpy_helper.from_array(np.random.default_rng(0).normal(0, 0.1, (k, n)).astype("float32"), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "head",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


def _decision(path, cpu):
    tasks = [t for t in load_workload(path).tasks() if "matmul" in t.name]
    assert len(tasks) == 1, tasks
    return default_schedule(tasks[0].mod["main"], cpu)


@pytest.mark.parametrize("isa", sorted(TARGETS))
def test_a_head_no_vector_divides_runs_in_whole_vectors_over_padded_packed_weights(isa, tmp_path):
    target = parse_target(TARGETS[isa])
    cpu = target.cpu_spec()
    func, choice = _decision(_head(tmp_path / "h.onnx"), cpu)
    said = choice.steps[0]
    assert choice.rule == "full" and f"{PRIME} outputs padded to whole vectors" in said \
        and "weights packed in panels" in said, choice.steps
    width = int(said.split("register tile ")[1].split()[0].split("x")[1])
    assert width % cpu.lanes("float32") == 0, said
    # one copy, marked for the build, pads and packs the weight: no padded copy of its own per call
    copies = [b for b in blocks(func) if LAYOUT_REWRITE_PREPROC in b.annotations]
    assert len(copies) == 1 and copies[0].reads[0].source.same_as(func.params[1]), [b.name_hint for b in blocks(func)]
    assert not any(b.name_hint == "w_pad" or b.name_hint.endswith("B_pad") for b in blocks(func))
    assert_vector_width(target_asm(func, target), VECTOR_BITS[isa])


@pytest.mark.parametrize("isa", sorted(TARGETS))
def test_a_thousand_class_head_keeps_its_unpadded_tile(isa, tmp_path):
    _, choice = _decision(_head(tmp_path / "h.onnx", n=1000), parse_target(TARGETS[isa]).cpu_spec())
    assert "padded" not in choice.steps[0] and "weights packed in panels" in choice.steps[0], choice.steps


def test_padded_weights_of_several_rows_are_packed_too(tmp_path):
    _, choice = _decision(_head(tmp_path / "h.onnx", rows=8), parse_target(TARGETS["avx512"]).cpu_spec())
    assert "padded to whole vectors" in choice.steps[0] and "weights packed in panels" in choice.steps[0], choice.steps


@pytest.mark.heavy
@pytest.mark.parametrize("rows", [1, 8])
def test_a_padded_head_matches_onnx_runtime(rows, tmp_path):
    from export import export_workload

    workload = load_workload(_head(tmp_path / "h.onnx", k=320, rows=rows))
    report = export_workload(workload, "cpu", tmp_path / "bundle", layers=False)
    assert report.ok and report.verified, report.verdict
