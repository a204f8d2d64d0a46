"""An attention einsum ``bhid,bhjd->bhij`` (MaxViT's window attention, exported by ``torch.einsum``
as an ONNX ``Einsum`` and not as a transpose and a matmul) reads its key along ``d``, the
reduction, while its output's innermost axis ``j`` is the one a register tile vectorizes: ``k``
would be gathered ``d`` floats apart. It got a dot product per output (2% of the peak, 36% of
MaxViT-T's time); the kernel now copies ``k`` as ``[b, h, d, j]``, tile by tile, and runs register
tiles over ``j`` padded to whole vectors. Checked for AVX2, AVX-512 and NEON by building for them;
the values against ONNX Runtime on the host."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from explorer.schedule.defaults import default_schedule
from explorer.target import parse_target
from explorer.workload import load_workload
from tests.isa_asm import TARGETS, VECTOR_BITS, assert_vector_width, target_asm


def _window_attention(path) -> str:
    """Scores of 49-token windows (7x7), 2 heads of 32, 6 windows, plus a relative-position bias."""
    rng = np.random.default_rng(0)
    bias = numpy_helper.from_array(rng.normal(0, 1, (1, 2, 49, 49)).astype("float32"), "bias")
    nodes = [helper.make_node("Einsum", ["q", "k"], ["s"], equation="bhid,bhjd->bhij"),
             helper.make_node("Add", ["s", "bias"], ["scores"])]
    graph = helper.make_graph(
        nodes, "window_attention",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [6, 2, 49, 32]) for n in ("q", "k")],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [6, 2, 49, 49])], [bias])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


@pytest.fixture(scope="module")
def attention(tmp_path_factory):
    workload = load_workload(_window_attention(tmp_path_factory.mktemp("attention") / "attention.onnx"))
    (task,) = [t for t in workload.tasks() if "einsum" in t.name]
    return workload, task


@pytest.mark.parametrize("isa", sorted(TARGETS))
def test_an_attention_einsum_copies_its_key_for_the_vectors_and_tiles_the_scores(attention, isa):
    _, task = attention
    target = parse_target(TARGETS[isa])
    cpu = target.cpu_spec()
    func, choice = default_schedule(task.mod["main"], cpu)
    said = choice.steps[0]
    assert choice.rule == "full" and "copied with the vector axis innermost" in said, choice.steps
    tile = said.split("register tile ")[1].split()[0]
    assert int(tile.split("x")[1]) % cpu.lanes("float32") == 0, said  # whole vectors over the padded j
    assert_vector_width(target_asm(func, target), VECTOR_BITS[isa])


@pytest.mark.heavy
def test_an_attention_einsum_matches_onnx_runtime(attention, tmp_path):
    from export import export_workload

    workload, _ = attention
    report = export_workload(workload, "cpu", tmp_path / "bundle", layers=False)
    assert report.ok and report.verified, report.verdict
