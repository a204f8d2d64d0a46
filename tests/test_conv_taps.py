"""DropDeadConvTaps: the taps of a dilated convolution that only ever read padding are dropped,
and the model still computes the same outputs."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from explorer.passes.conv_taps import DropDeadConvTaps, live_taps, tap_bands
from explorer.workload import load_workload


def test_live_taps_along_one_axis():
    # DeepLabV3's ASPP on a 16x16 map: dilation 24 reaches only the centre tap, dilation 12 all three
    assert live_taps(16, 3, 1, 24, 24, 24) == (1, 1)
    assert live_taps(16, 3, 1, 12, 12, 12) is None
    assert live_taps(16, 3, 1, 1, 1, 1) is None  # an ordinary 3x3 conv
    assert live_taps(4, 5, 1, 3, 6, 6) == (1, 3)  # the outer taps fall outside a 4-pixel map


def test_output_bands_that_read_the_same_taps():
    # DeepLabV3's ASPP, dilation 12 on 16x16: the outer taps reach the input from four outputs each
    assert tap_bands(16, 3, 1, 12, 12, 12) == [(0, 4, 1, 2), (4, 12, 1, 1), (12, 16, 0, 1)]
    assert tap_bands(16, 3, 1, 1, 1, 1) == [(0, 1, 1, 2), (1, 15, 0, 2), (15, 16, 0, 1)]  # a plain 3x3
    assert tap_bands(4, 3, 1, 9, 9, 9) == [(0, 4, 1, 1)]  # one band: the tap dropping makes it a 1x1 conv
    assert tap_bands(4, 3, 1, 1, 20, 20) is None  # outputs that read only padding: no regions


def _relax_conv(cin, cout, size, dilation, groups=1):
    from tvm import relax

    x = relax.Var("x", relax.TensorType((1, cin, size, size), "float32"))
    w = np.random.default_rng(0).standard_normal((cout, cin // groups, 3, 3)).astype("float32")
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        bb.emit_func_output(bb.emit(relax.op.nn.conv2d(x, relax.const(w), padding=[dilation] * 4,
                                                       dilation=(dilation, dilation), groups=groups)))
    return bb.get()


def _run(mod, x):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.compile(relax.transform.LegalizeOps()(mod), target="llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


@pytest.mark.parametrize("cin, cout, size, dilation, groups, split", [
    (8, 16, 16, 12, 1, True),  # DeepLabV3's ASPP: 3x3 regions, a quarter of the multiply-adds
    (6, 6, 8, 4, 6, True),  # depthwise, 2x2 regions: 4/9 of them
    (8, 8, 16, 6, 1, False),  # most taps reach the input for most outputs: one convolution
])
def test_a_conv_whose_taps_mostly_read_padding_runs_by_regions_and_computes_the_same(cin, cout, size, dilation,
                                                                                      groups, split):
    from tvm import relax

    mod = _relax_conv(cin, cout, size, dilation, groups)
    out = DropDeadConvTaps(mod)
    convs = []
    relax.analysis.post_order_visit(out["main"], lambda e: convs.append(e) if isinstance(e, relax.Call)
                                    and getattr(e.op, "name", "") == "relax.nn.conv2d" else None)
    assert (len(convs) > 1) == split and not (split and out.same_as(mod))
    x = np.random.default_rng(1).standard_normal((1, cin, size, size)).astype("float32")
    np.testing.assert_allclose(_run(out, x), _run(mod, x), rtol=1e-5, atol=1e-5)


def _aspp(path, dilation):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, 0.3, (8, 6, 3, 3)).astype("float32"), "w")
    nodes = [helper.make_node("Conv", ["input", "w"], ["c"], dilations=[dilation, dilation],
                              pads=[dilation] * 4),
             helper.make_node("Relu", ["c"], ["out"])]
    graph = helper.make_graph(nodes, "aspp", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 6, 8, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8, 8, 8])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


def test_a_dilated_conv_on_a_small_map_becomes_a_1x1_conv(tmp_path):
    workload = load_workload(_aspp(tmp_path / "aspp.onnx", 12))
    conv = next(t for t in workload.tasks() if "conv2d" in t.name)
    assert conv.flops == 2 * 8 * 8 * 8 * 6 + 8 * 8 * 8  # one tap (and the relu), not nine
    kept = load_workload(_aspp(tmp_path / "aspp2.onnx", 2))  # dilation 2 on 8x8: every tap reads the input
    assert next(t for t in kept.tasks() if "conv2d" in t.name).flops == 2 * 8 * 8 * 8 * 6 * 9 + 8 * 8 * 8


@pytest.mark.heavy
def test_the_rewritten_conv_still_matches_onnx_runtime(tmp_path):
    from export import export_workload

    report = export_workload(load_workload(_aspp(tmp_path / "aspp.onnx", 12)), "cpu", tmp_path / "b", layers=False)
    assert report.ok and report.verified, report.verdict
