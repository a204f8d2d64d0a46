"""``GateIntoConvWeights``: a squeeze-and-excitation gate scales the weights of the 1x1 convolution
after it instead of the whole map; the outputs stay ONNX Runtime's, and a map too small to repay it
keeps its product."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

from explorer.measure.cache_sizes import cache_units, level_bytes, level_count
from explorer.models import import_onnx
from explorer.passes.catalog import make_pass
from explorer.passes import gate_weights
from explorer.passes.gate_weights import GateIntoConvWeights
from explorer.passes.pipelines import INFERENCE_PASSES
from tests.onnx_cases import ort_run

CHANNELS, SQUEEZED = 16, 4


def _se_block(side: int, outputs: int) -> onnx.ModelProto:
    """x -> 3x3 conv -> m; m -> (global pool, 1x1 conv, relu, 1x1 conv, sigmoid) gate; m * gate -> 1x1 conv
    to ``outputs`` (the map comes from a convolution, as in a network: it is NHWC by then)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.4, shape).astype("float32"), name) for name, shape in
             (("w0", (CHANNELS, CHANNELS, 3, 3)), ("w1", (SQUEEZED, CHANNELS, 1, 1)), ("w2", (CHANNELS, SQUEEZED, 1, 1)), ("wp", (outputs, CHANNELS, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["m"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["m"], ["pooled"]),
             helper.make_node("Conv", ["pooled", "w1"], ["squeezed"]),
             helper.make_node("Relu", ["squeezed"], ["relu"]),
             helper.make_node("Conv", ["relu", "w2"], ["excited"]),
             helper.make_node("Sigmoid", ["excited"], ["gate"]),
             helper.make_node("Mul", ["m", "gate"], ["gated"]),
             helper.make_node("Conv", ["gated", "wp"], ["y"])]
    graph = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, CHANNELS, side, side])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="")


def _before_the_pass(model: onnx.ModelProto) -> tvm.IRModule:
    """The model's Relax module through the inference pipeline up to where the pass runs."""
    mod = import_onnx(model).mod
    with tvm.target.Target({"kind": "llvm"}):
        for name in INFERENCE_PASSES[:INFERENCE_PASSES.index("GateIntoConvWeights")]:
            mod = make_pass(name)(mod)
    return mod


def _run(mod: tvm.IRModule, x: np.ndarray) -> np.ndarray:
    vm = relax.VirtualMachine(tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"})), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def _map_products(mod: tvm.IRModule, side: int) -> int:
    """How many multiplies produce a whole ``side x side`` map."""
    return sum("R.multiply(" in line and f"(1, {side}, {side}, {CHANNELS})" in line for line in mod.script().splitlines())


def _side_beyond_the_l2() -> int:
    """The side (a multiple of 8) of the smallest square map of CHANNELS the pass takes for one beyond
    this machine's L2 (128 with 2 MiB of L2: 1 MB)."""
    side = 8
    while side * side * CHANNELS < gate_weights.min_map_elements():
        side += 8
    return side


@pytest.mark.parametrize("side, outputs, min_map, folded", [
    (None, 8, None, True),   # beyond the L2 (128x128x16 with 2 MiB of it)
    (16, 8, None, False),    # 16x16x16: the L2 holds it between kernels
    (4, 16, 1, False),       # more weight columns than pixels (whatever the map's size)
], ids=["gate-into-weights", "map-in-l2-keeps-its-product", "few-pixels-keep-their-product"])
def test_the_gate_scales_the_weights_where_the_map_is_larger_and_outputs_stay_the_same(side, outputs, min_map, folded,
                                                                                       monkeypatch):
    if min_map is not None:
        monkeypatch.setattr(gate_weights, "min_map_elements", lambda: min_map)
    side = side or _side_beyond_the_l2()
    model = _se_block(side, outputs)
    before = _before_the_pass(model)
    after = GateIntoConvWeights(before)
    assert _map_products(before, side) == 1
    assert _map_products(after, side) == (0 if folded else 1)  # the pass's own output: no dead product left
    assert after.same_as(before) != folded  # nothing rewritten: the module itself comes back
    x = np.random.default_rng(1).standard_normal((1, CHANNELS, side, side)).astype("float32")
    expected = ort_run(model, {"x": x})[0]
    np.testing.assert_allclose(_run(after, x), expected, rtol=1e-4, atol=1e-4)


def test_the_threshold_is_half_this_machines_l2_and_the_measured_one_for_another_cpu():
    units = cache_units()
    l2_count = level_count(2, units)
    here = level_bytes(2, units) // l2_count // 8 if l2_count else gate_weights.MIN_MAP_ELEMENTS
    assert gate_weights.min_map_elements() == here  # no target: this machine
    with tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "neoverse-v1"}):
        assert gate_weights.min_map_elements() == gate_weights.MIN_MAP_ELEMENTS
