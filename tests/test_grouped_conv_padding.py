"""Grouped convolutions (ResNeSt's split attention, ResNeXt, RegNet, wav2vec2's positional conv)
and their padding. A grouped NHWC conv reads its input channel ``ff // w * c + rc``: one element
across a tile of output channels, as an ordinary NHWC conv, but the padding used to be inlined
into it (the read "used" the vector axis). Inlined, the border tests took registers the tile had
counted for accumulators: ResNeSt's 14x32 tiles (31 of 32 AVX-512 registers) kept their
accumulators in memory, 2.4x slower. Now a short grouped reduction keeps the padding inlined with a
tile that leaves two registers for it, and a long one (1024 multiply-adds per output and more)
reads a padded copy. Each decision is checked for AVX2, AVX-512 and NEON by building for them;
the numbers against ONNX Runtime on the host."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from explorer.schedule.defaults import default_schedule
from explorer.schedule.defaults.inline import GROUPED_PAD_MIN_REDUCTION
from explorer.schedule.defaults.tile_cost import L1_BYTES, cycles_per_fma
from explorer.target import parse_target
from explorer.workload import load_workload
from tests.isa_asm import TARGETS, VECTOR_BITS, assert_vector_width, target_asm

# (input channels, output channels, size, groups): multiply-adds per output = in / groups * 9
SHORT = (64, 64, 28, 2)  # groups of 32: Winograd leaves it direct; 32 * 9 = 288
LONG = (512, 512, 7, 2)  # its last: 256 * 9 = 2304


def _grouped_model(path, cin, cout, size, groups) -> str:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, 0.1, (cout, cin // groups, 3, 3)).astype("float32"), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4, group=groups),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "grouped", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                               [1, cin, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


def _conv_task(tmp_path, shape):
    workload = load_workload(_grouped_model(tmp_path / "g.onnx", *shape))
    convs = [t for t in workload.tasks() if "conv" in t.name]
    assert len(convs) == 1, [t.name for t in workload.tasks()]
    return convs[0]


def _tile(said: str) -> tuple[int, int]:
    rows, width = said.split("register tile ")[1].split()[0].split("x")
    return int(rows), int(width)


@pytest.mark.parametrize("isa", sorted(TARGETS))
def test_a_short_grouped_reduction_tests_its_border_inline_with_registers_to_spare(isa, tmp_path):
    target = parse_target(TARGETS[isa])
    cpu = target.cpu_spec()
    assert SHORT[0] // SHORT[3] * 9 < GROUPED_PAD_MIN_REDUCTION
    func, choice = default_schedule(_conv_task(tmp_path, SHORT).mod["main"], cpu)
    assert choice.rule == "full" and not any("pad_temp" in s for s in choice.steps), choice.steps
    rows, width = _tile(choice.steps[0])
    vectors = -(-width // cpu.lanes("float32"))
    # accumulators, the weight vectors, the broadcast row and two for the border test
    assert rows * vectors + vectors + 1 + 2 <= cpu.registers, (choice.steps[0], cpu.registers)
    assert "if_then_else" in func.script()
    assert_vector_width(target_asm(func, target), VECTOR_BITS[isa])


@pytest.mark.parametrize("isa", sorted(TARGETS))
def test_a_long_grouped_reduction_reads_a_padded_copy(isa, tmp_path):
    target = parse_target(TARGETS[isa])
    assert LONG[0] // LONG[3] * 9 >= GROUPED_PAD_MIN_REDUCTION
    func, choice = default_schedule(_conv_task(tmp_path, LONG).mod["main"], target.cpu_spec())
    assert choice.rule == "full" and any("(pad_temp)" in s for s in choice.steps), choice.steps
    assert_vector_width(target_asm(func, target), VECTOR_BITS[isa])


def test_a_two_row_tile_streaming_its_weights_from_l2_costs_more_than_the_fma_bound():
    """L2 delivers about 3/4 of a vector a cycle under FMA load: a 2-row tile whose column of
    weights left L1 (one vector per two multiply-adds) no longer ties with a 7-row one (ResNeSt's
    last conv: 2x128 ran 11.0 ms, 7x32 8.2)."""
    column = 4 * L1_BYTES
    assert cycles_per_fma(2, 8, column) > cycles_per_fma(7, 2, column) == 0.5


@pytest.mark.heavy
def test_grouped_convs_match_onnx_runtime(tmp_path):
    from export import export_workload

    for shape in (SHORT, LONG):
        folder = tmp_path / f"g{shape[0]}"
        folder.mkdir()
        workload = load_workload(_grouped_model(folder / "g.onnx", *shape))
        report = export_workload(workload, "cpu", folder / "bundle", layers=False)
        assert report.ok and report.verified, report.verdict
