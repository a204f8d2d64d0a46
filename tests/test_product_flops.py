"""A kernel whose FLOP count is mostly element-wise work beside its products (an activation's fast_exp
fused into a convolution) is not read against the FMA peak: it raised the fp32 peak on the Zen 5
(efficientnet_b0's 1x1 convolution with a SiLU at 536 "GFLOPS" against the FMA kernel's 472.7, its
products at 188), and now raises nothing, lifts no roof and has its % peak left blank above 100."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

from explorer.measure import peak_check
from explorer.measure.memory_roof import MemoryRoof
from explorer.workload import load_workload
from explorer.workload.product_flops import PRODUCT_SHARE, product_share
from export.profile import TaskCost, checked_rows


def conv_silu_onnx(tmp_path) -> str:
    """efficientnet_b0's 1x1 expansion with its SiLU (x * sigmoid(x)): 16 -> 96 channels at 28x28."""
    w = numpy_helper.from_array(np.random.default_rng(0).normal(0, 0.1, (96, 16, 1, 1)).astype("float32"), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("Mul", ["c", "s"], ["y"])]
    graph = helper.make_graph(nodes, "silu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 28, 28])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 96, 28, 28])], [w])
    path = tmp_path / "conv_silu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


def test_a_convolution_with_a_silu_counts_mostly_element_wise_work_and_resnets_count_products(tmp_path):
    conv = next(t for t in load_workload(conv_silu_onnx(tmp_path)).tasks() if "conv2d" in t.name)
    assert product_share(conv.mod) < 0.5 < PRODUCT_SHARE  # 2 x 16 a value for the products, ~85 for the sigmoid
    shares = {t.name.split("/")[-1]: product_share(t.mod) for t in load_workload("resnet18").tasks()}
    assert all(s >= PRODUCT_SHARE for name, s in shares.items() if "conv2d" in name or "winograd_batch" in name)
    # (a Winograd output transform is element-wise: its sums are written out, no reduction)
    assert all(s == 0.0 for name, s in shares.items() if name.startswith("fused_winograd_output"))
    assert all(shares[name] == 0.0 for name in ("max_pool2d", "mean"))  # reductions that do not multiply
    matmul = load_workload("matmul:M=64,N=64,K=64").tasks()[0].mod
    assert product_share(matmul) == 1.0
    assert product_share(tvm.IRModule({"other_name": matmul["main"]})) == 1.0  # any name


def test_a_recurrent_layer_written_whole_counts_as_it_is():
    """Its loops are inside one block (no iteration variables): nothing tells its products apart, so its
    count is taken as it is (1.0), never as element-wise work."""
    from explorer.schedule.defaults.recurrence import cpu_recurrence
    from explorer.schedule.defaults.recurrence_spec import RecurrenceSpec

    func = cpu_recurrence(RecurrenceSpec("LSTM", 4, 1, 64))
    assert product_share(tvm.IRModule({"main": func})) == 1.0


def test_a_profile_row_of_element_wise_work_above_the_peak_raises_nothing_and_reads_blank(monkeypatch):
    def no_check(*args, **kwargs):
        raise AssertionError("a kernel of element-wise work was checked against the FMA peak")

    monkeypatch.setattr(peak_check, "within_peak", no_check)
    silu = TaskCost("e/fused_conv2d10_sigmoid7_multiply7", ("silu",), 61_867_008, 2_000_000, product_share=0.35)
    conv = TaskCost("e/fused_conv2d45", ("conv",), 40_140_800, 3_000_000)
    calls = {"silu": {"seconds": 61_867_008 / 536e9, "calls": 1}, "conv": {"seconds": 40_140_800 / 300e9, "calls": 1}}
    memory = MemoryRoof.of(34.7, l2_gbps=405.7, l2_bytes=2**21, l3_gbps=228.4, l3_bytes=2**25)  # its roof: the peak
    checked = checked_rows([silu, conv], calls, 0.0, peak_gflops=472.7, memory=memory)
    by = {k.task: k for k in checked.rows.kernels}
    assert checked.peak_gflops == 472.7 and checked.rows.roofline_peak_gflops == 472.7  # neither raised nor lifted
    silu_row = by[silu.name]
    assert silu_row.gflops == pytest.approx(536.0)  # as counted: at its compute limit, no % figure
    assert silu_row.percent_of_peak is None and silu_row.percent_of_roofline is None and silu_row.headroom_s == 0
    assert by[conv.name].percent_of_peak == pytest.approx(100 * 300 / 472.7)
    assert checked.unsure == 0 and any("fused_conv2d10_sigmoid7_multiply7" in n and "element-wise" in n
                                       for n in checked.peak_notes)


def test_the_profile_reads_a_tasks_share_from_its_module(tmp_path):
    from export.profile import task_cost

    conv = next(t for t in load_workload(conv_silu_onnx(tmp_path)).tasks() if "conv2d" in t.name)
    assert task_cost(conv).product_share == product_share(conv.mod) < PRODUCT_SHARE


def test_a_measured_kernel_of_element_wise_work_above_the_peak_raises_nothing():
    check = peak_check.within_peak(536.0, "e/silu", 472.7, products=False)
    assert check.peak_gflops == 472.7 and not check.trusted and check.percent(536.0) is None
    assert "element-wise" in check.note


def test_the_leaderboards_roofline_marks_a_record_of_element_wise_work(tmp_path):
    """A search of the conv+SiLU kernel stores its workload flagged (``beside_products``): the roofline
    draws its point as largely element-wise work, whose place above the FMA ceiling is no figure of
    the FMA units; a matmul's point counts multiply-adds."""
    from search.records import task_workload
    from store import Record
    from store.plots import BESIDE_PRODUCTS, PRODUCTS, roofline

    conv = next(t for t in load_workload(conv_silu_onnx(tmp_path)).tasks() if "conv2d" in t.name)
    matmul = load_workload("matmul:M=64,N=64,K=64").tasks()[0]
    workloads = {w.key: w for w in (task_workload(conv, source="search"), task_workload(matmul, source="search"))}
    assert [w.shapes.get("beside_products") for w in workloads.values()] == [True, None]
    records = [Record(workload_key=key, target='{"kind": "llvm"}', hardware="h", source="search", status="ok",
                      steps=[], trace=None, latencies=[1e-4], median_s=1e-4, gflops=w.flops / 1e-4 / 1e9, environment={},
                      id=i)
               for i, (key, w) in enumerate(workloads.items())]
    points = roofline(records, workloads, peak_gflops=40.0, peak_gbps=20.0)["points"]
    assert [p["counted"] for p in points] == [BESIDE_PRODUCTS, PRODUCTS]
