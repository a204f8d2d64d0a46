"""Requantization as ONNX Runtime's fused operators compute it (explorer.passes.qdq_requantize): the
int8 kernels' outputs multiplied, not divided, the residual sum of two quantized tensors and the max
pool in uint8, checked against ONNX Runtime on a small residual CNN quantized by its own quantizer."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

from explorer.models import import_onnx
from explorer.models.qdq import output_steps
from explorer.passes.qdq_int8 import QDQToInt8Kernels
from explorer.passes.qdq_requantize import requantize
from tests.onnx_cases import ort_run, random_feeds, tvm_run
from tests.quantized_models import ort_quantize


def _residual_cnn() -> onnx.ModelProto:
    """conv+bias -> relu -> max pool -> (conv -> relu -> conv) + skip -> relu -> pool -> gemm; 1x3x16x16."""
    rng = np.random.default_rng(5)

    def weight(name, *shape, std=0.2):
        return numpy_helper.from_array(rng.normal(0, std, shape).astype("float32"), name)

    inits = [weight("w0", 16, 3, 3, 3), weight("b0", 16, std=0.1), weight("w1", 16, 16, 3, 3, std=0.1),
             weight("b1", 16, std=0.1), weight("w2", 16, 16, 3, 3, std=0.1), weight("b2", 16, std=0.1),
             weight("wf", 10, 16), weight("bf", 10, std=0.1)]
    conv = dict(pads=[1, 1, 1, 1])
    nodes = [helper.make_node("Conv", ["input", "w0", "b0"], ["c0"], **conv), helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("MaxPool", ["r0"], ["p0"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p0", "w1", "b1"], ["c1"], **conv), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], **conv), helper.make_node("Add", ["c2", "p0"], ["s"]),
             helper.make_node("Relu", ["s"], ["r2"]), helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]), helper.make_node("Gemm", ["f", "wf", "bf"], ["out"], transB=1)]
    graph = helper.make_graph(nodes, "residual_cnn", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                                     [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _calls(mod: tvm.IRModule, name: str) -> list[relax.Call]:
    from explorer.ir.relax_walk import iter_bindings

    op = tvm.ir.Op.get(name)
    return [b.value for b in iter_bindings(mod["main"]) if isinstance(b.value, relax.Call) and b.value.op.same_as(op)]


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    return ort_quantize(_residual_cnn(), tmp_path_factory.mktemp("requantize"))


def test_kernel_outputs_residual_sums_and_the_pool_are_requantized_without_a_division(quantized):
    rewritten = QDQToInt8Kernels(import_onnx(quantized).mod)
    scales = [float(q.args[1].value.numpy()) for q in _calls(rewritten, "relax.quantize")]
    # the image's quantize divides (ONNX Runtime's QuantizeLinear does); the 3 convs, the residual sum
    # and the gemm are multiplied into scale-1 quantizes
    assert scales.count(1.0) == 5 and len(scales) - scales.count(1.0) <= 3
    pools = _calls(rewritten, "relax.nn.max_pool2d")
    assert len(pools) == 1 and pools[0].args[0].ty.dtype in ("int8", "uint8")  # the max pool reads the bytes


def test_the_requantized_model_matches_onnx_runtime(quantized):
    loaded = import_onnx(quantized)
    step = next(iter(output_steps(quantized).values()))
    rewritten = SimpleNamespace(mod=QDQToInt8Kernels(loaded.mod), info=loaded.info)
    for seed in (1, 2, 3):
        feeds = random_feeds(quantized, seed)
        got, want = tvm_run(rewritten, feeds)[0], ort_run(quantized, feeds)[0]
        # ONNX Runtime's own arithmetic (int32 bias, one multiplier a channel): every output the same
        assert np.array_equal(got, want), (np.abs(got - want).max() / step, np.mean(got != want))


def test_a_bias_that_is_no_whole_number_of_steps_keeps_the_division():
    """A float bias (not ONNX Runtime's int32 one) cannot join the integer sums: left as it was."""
    bb = relax.BlockBuilder()
    acc = relax.Var("acc", relax.TensorType((1, 4, 4, 16), "int32"))
    with bb.function("main", [acc]):
        with bb.dataflow():
            y = bb.emit(relax.op.subtract(acc, relax.const(np.arange(16, dtype="int32"))))
            y = bb.emit(relax.op.multiply(relax.op.astype(y, "float32"), relax.const(np.full(16, 0.01, "float32"))))
            y = bb.emit(relax.op.add(y, relax.const(np.full(16, 0.003, "float32"))))  # 0.3 of a step
            out = bb.emit_output(relax.op.quantize(y, relax.const(0.05, "float32"), relax.const(0, "uint8"),
                                                   axis=-1, out_dtype="uint8"))
        bb.emit_func_output(out)
    mod = bb.get()
    assert requantize(mod).same_as(mod)
