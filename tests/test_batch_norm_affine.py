"""BatchNormAsScaleShift: a pre-activation batch-norm (BN -> ReLU -> conv, as tf2onnx exports
ResNet v2) becomes one multiply-add per element fused with its ReLU, and the model still matches
ONNX Runtime."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from explorer.passes.batch_norm_affine import scale_shift
from explorer.passes.catalog import PASS_CATALOG
from explorer.workload import load_workload
from explorer.workload.reference import untuned_outputs


def _preact(path, channels=8, out_channels=16, size=8) -> str:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(1, 0.2, channels).astype("float32"), "gamma"),
             numpy_helper.from_array(rng.normal(0, 0.2, channels).astype("float32"), "beta"),
             numpy_helper.from_array(rng.normal(0, 0.5, channels).astype("float32"), "mean"),
             numpy_helper.from_array(rng.uniform(0.5, 2, channels).astype("float32"), "var"),
             numpy_helper.from_array(rng.normal(0, 0.3, (out_channels, channels, 3, 3)).astype("float32"), "w")]
    nodes = [helper.make_node("BatchNormalization", ["input", "gamma", "beta", "mean", "var"], ["bn"],
                              epsilon=1.001e-5),  # Keras's epsilon, as tf2onnx writes it
             helper.make_node("Relu", ["bn"], ["relu"]),
             helper.make_node("Conv", ["relu", "w"], ["out"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "preact", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, out_channels, size, size])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


def test_scale_and_shift_compute_the_batch_norm():
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (5, 3))
    gamma, beta, mean, var = rng.normal(1, 0.2, 3), rng.normal(0, 0.2, 3), rng.normal(0, 0.5, 3), rng.uniform(0.5, 2, 3)
    scale, shift = scale_shift(gamma, beta, mean, var, 1e-3)
    np.testing.assert_allclose(x * scale + shift, (x - mean) / np.sqrt(var + 1e-3) * gamma + beta, rtol=1e-12)


def test_a_preactivation_batch_norm_is_one_multiply_add_with_its_relu_and_matches_onnx_runtime(tmp_path):
    workload = load_workload(_preact(tmp_path / "preact.onnx"))
    fused = workload.fused_module()
    # the batch norm's one multiply-add and the relu, read through by the conv's padding copy (with the
    # transpose to NHWC: explorer.passes.layout_into_conv), not a kernel of their own
    bn_kernels = [gv.name_hint for gv, f in fused.functions_items() if "relu" in gv.name_hint]
    assert len(bn_kernels) == 1 and "multiply_add_relu" in bn_kernels[0] and "divide" not in bn_kernels[0], bn_kernels
    assert "conv2d" in bn_kernels[0], bn_kernels
    script = fused[bn_kernels[0]].script()
    assert "T.sqrt" not in script and " / " not in script and "T.Div" not in script  # no divide per element
    inputs = workload.sample_inputs()
    expected = workload.reference(inputs)
    got = untuned_outputs(fused, [inputs[name] for name in inputs])
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-5)


def test_the_pass_is_in_the_catalogue_for_relay_readers():
    summary = PASS_CATALOG["BatchNormAsScaleShift"].summary
    assert "SimplifyInference" in summary and "FoldScaleAxis" in summary
