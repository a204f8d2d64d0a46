"""Kernels whose output has no channels to vectorize: a one-channel convolution (a vocoder's last
layer, a mask or depth head) and a matrix-vector product by one column (a regression head,
``Linear(K, 1)``). Their pixels (rows) are the vector axis; NHWC's padded copy reads them ``C``
floats apart, and a ``[K, 1]`` weight looked strided along ``K``: both ran at 2-3% of the peak on
scalar code. The padded copy is now written with the pixels innermost, tile by tile, and a
trailing dimension of extent 1 changes no stride (the reduction runs in vector partial sums). A
convolution to fewer channels than a vector's lanes (an RGB image's 3: a style-transfer net's last
9x9 conv) has its pixels vectorized too, the channels being the tile's rows,
and the accumulator is laid out with the pixels innermost (7% -> 56% of the peak). Each decision
is checked for AVX2, AVX-512 and NEON by building for them; the numbers against ONNX Runtime on
the host."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from explorer.schedule.defaults import default_schedule
from explorer.target import parse_target
from explorer.workload import load_kernel
from tests.isa_asm import TARGETS, VECTOR_BITS, assert_vector_width, target_asm

MASK_HEAD = "conv2d_nhwc:N=1,C=32,H=64,W=64,K=1,R=3,S=3,stride=1,pad=1"
REGRESSION_HEAD = "matmul:M=64,N=1,K=256"
RGB_HEAD = "conv2d_nhwc:N=1,C=32,H=40,W=64,K=3,R=9,S=9,stride=1,pad=4"


@pytest.mark.parametrize("isa", sorted(TARGETS))
def test_a_one_channel_convolution_tiles_its_pixels_from_a_copy_laid_out_for_them(isa):
    target = parse_target(TARGETS[isa])
    cpu = target.cpu_spec()
    func, choice = default_schedule(load_kernel(MASK_HEAD).func, cpu)
    said = choice.steps[0]
    assert choice.rule == "full" and "copied with the vector axis innermost" in said, choice.steps
    tile = said.split("register tile ")[1].split()[0]
    assert int(tile.split("x")[1]) >= cpu.lanes("float32"), said
    assert "T.vectorized" in func.script()
    assert_vector_width(target_asm(func, target), VECTOR_BITS[isa])


@pytest.mark.parametrize("isa", sorted(TARGETS))
def test_a_convolution_to_three_channels_vectorizes_its_pixels_with_the_channels_as_rows(isa):
    target = parse_target(TARGETS[isa])
    cpu = target.cpu_spec()
    func, choice = default_schedule(load_kernel(RGB_HEAD).func, cpu)
    said = choice.steps[0]
    assert choice.rule == "full" and said.startswith("register tile 3x"), choice.steps
    assert "copied with the vector axis innermost" in said, said
    assert int(said.split("register tile 3x")[1].split()[0]) % cpu.lanes("float32") == 0, said
    asm = target_asm(func, target)
    assert_vector_width(asm, VECTOR_BITS[isa])
    if isa != "neon":  # accumulators in registers: no lane-by-lane assembly around the multiply-adds
        assert asm.count("vinsertps") < 40, asm.count("vinsertps")


@pytest.mark.parametrize("isa", sorted(TARGETS))
def test_a_convolution_to_four_channels_keeps_them_as_its_vector(isa):
    """4 channels make a tile's vector (16x4 on AVX-512 ran 3x faster than pixels from a copy)."""
    cpu = parse_target(TARGETS[isa]).cpu_spec()
    _, choice = default_schedule(load_kernel(RGB_HEAD.replace("K=3", "K=4")).func, cpu)
    said = choice.steps[0]
    assert choice.rule == "full" and said.split()[2].endswith("x4") and "copied" not in said, said


@pytest.mark.heavy
def test_a_convolution_to_three_channels_computes_right_here():
    import tvm

    from explorer.measure import measure
    from explorer.target import host_target

    kernel = load_kernel(RGB_HEAD)
    func, _ = default_schedule(kernel.func, host_target().cpu_spec())
    result = measure(kernel, tvm.IRModule({"main": func}), repeat=1, min_repeat_s=0.0)
    assert result.status == "ok", result.error


@pytest.mark.parametrize("isa", sorted(TARGETS))
def test_a_product_by_one_column_sums_in_vector_partial_results(isa):
    target = parse_target(TARGETS[isa])
    cpu = target.cpu_spec()
    func, choice = default_schedule(load_kernel(REGRESSION_HEAD).func, cpu)
    assert f"{cpu.lanes('float32')} partial results in a vector" in " ".join(choice.steps), choice.steps
    assert_vector_width(target_asm(func, target), VECTOR_BITS[isa])


def _heads_model(path) -> str:
    """A one-channel 3x3 mask head (+ sigmoid) and a one-channel 1-D conv (+ tanh, a vocoder's
    last layer) side by side, NCHW / NCW as exported, odd sizes (tails of tiles)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.2, s).astype("float32"), n)
             for n, s in (("w2", (1, 12, 3, 3)), ("b2", (1,)), ("w1", (1, 16, 7)), ("b1", (1,)))]
    nodes = [helper.make_node("Conv", ["image", "w2", "b2"], ["c2"], pads=[1] * 4),
             helper.make_node("Sigmoid", ["c2"], ["mask"]),
             helper.make_node("Conv", ["features", "w1", "b1"], ["c1"], pads=[3, 3]),
             helper.make_node("Tanh", ["c1"], ["wave"])]
    graph = helper.make_graph(
        nodes, "heads", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 12, 37, 45]),
                         helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, 16, 1000])],
        [helper.make_tensor_value_info("mask", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("wave", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


@pytest.mark.heavy
def test_one_channel_heads_match_onnx_runtime(tmp_path):
    from explorer.target import host_target
    from explorer.workload import load_workload
    from export import export_workload

    workload = load_workload(_heads_model(tmp_path / "heads.onnx"))
    convs = [t for t in workload.tasks() if "conv" in t.name]
    assert len(convs) == 2, [t.name for t in workload.tasks()]
    for task in convs:
        _, choice = default_schedule(task.mod["main"], host_target().cpu_spec())
        assert "copied with the vector axis innermost" in choice.steps[0], (task.name, choice.steps)
    report = export_workload(workload, "cpu", tmp_path / "b", layers=False)
    assert report.ok and report.verified, report.verdict


NERF_RGB = "matmul:M=4096,N=3,K=128"  # a NeRF MLP's colour head: 4096 samples to 3 channels


@pytest.mark.parametrize("isa", sorted(TARGETS))
def test_a_product_to_three_columns_copies_its_input_once_straight_into_panels(isa):
    """Rows as the vector axis read the input across its rows: the copy laid out for them was
    then packed into panels, a second copy per call (the first one a serial transpose: 2.3 ms of
    a NeRF's 6.3). The two are one copy now, parallel and vectorized."""
    from explorer.ir.tir_walk import blocks

    target = parse_target(TARGETS[isa])
    cpu = target.cpu_spec()
    func, choice = default_schedule(load_kernel(NERF_RGB).func, cpu)
    said = choice.steps[0]
    assert choice.rule == "full" and "packed in panels" in said, said
    names = [b.name_hint for b in blocks(func)]
    readers = [b for b in blocks(func) if any(r.source.same_as(func.params[0]) for r in b.reads)]
    assert len(readers) == 1 and readers[0].name_hint.endswith("_global_global"), names  # the panels' copy
    assert sum(n.startswith("A_global") for n in names) == 1, names  # and no copy before it
    assert_vector_width(target_asm(func, target), VECTOR_BITS[isa])


@pytest.mark.heavy
def test_a_product_to_three_columns_computes_right_here():
    import tvm

    from explorer.measure import measure
    from explorer.target import host_target

    kernel = load_kernel(NERF_RGB)
    func, _ = default_schedule(kernel.func, host_target().cpu_spec())
    result = measure(kernel, tvm.IRModule({"main": func}), repeat=1, min_repeat_s=0.0)
    assert result.status == "ok", result.error
