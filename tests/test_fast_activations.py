"""FastActivations: sigmoid, SiLU, GELU, sine and cosine leave no libm call per element in the kernels (LLVM
cannot vectorize one), stay accurate, and a model with them exports and verifies.

Compile-only checks of the assembly for each target kind (x86 AVX2, AVX-512, aarch64): the decision
does not depend on the host."""

import math

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import te

from explorer.passes.fast_activations import fast_cos, fast_gelu, fast_gelu_tanh, fast_sigmoid, fast_silu, fast_sin
from explorer.passes.pipelines import INFERENCE_PASSES, INFERENCE_NCHW_PASSES
from explorer.schedule.defaults import default_schedule
from explorer.target import host_target, parse_target
from explorer.workload import load_workload

XS = np.linspace(-30, 30, 2048).astype("float32")
_ERF = np.vectorize(math.erf)
EXPECTED = {
    fast_sigmoid: 1 / (1 + np.exp(-XS.astype(np.float64))),
    fast_silu: XS / (1 + np.exp(-XS.astype(np.float64))),
    fast_gelu: 0.5 * XS * (1 + _ERF(XS / math.sqrt(2))),
    fast_gelu_tanh: 0.5 * XS * (1 + np.tanh(math.sqrt(2 / math.pi) * (XS + 0.044715 * XS.astype(np.float64) ** 3))),
    fast_sin: np.sin(XS.astype(np.float64)),
    fast_cos: np.cos(XS.astype(np.float64)),
}
LIBM = ("expf", "erff", "tanhf", "sinf", "cosf", "exp@", "erf@", "tanh@", "sin@", "cos@")


@pytest.mark.parametrize("fast", list(EXPECTED), ids=lambda f: f.__name__)
def test_each_polynomial_matches_the_function_to_a_few_ulp(fast):
    out = _run(fast, XS)
    expected = EXPECTED[fast]
    assert np.all(np.isfinite(out))
    assert np.max(np.abs(out - expected) / np.maximum(1.0, np.abs(expected))) < 1e-5


def _run(fast, xs: np.ndarray) -> np.ndarray:
    x = te.placeholder(xs.shape, "float32", name="x")
    lib = tvm.compile(tvm.IRModule({"main": te.create_prim_func([x, fast(x)])}), target=host_target().tvm())
    out = tvm.runtime.tensor(np.zeros_like(xs))
    lib["main"](tvm.runtime.tensor(xs), out)
    return out.numpy()


@pytest.mark.parametrize("fast, exact", [(fast_sin, np.sin), (fast_cos, np.cos)], ids=["sin", "cos"])
def test_sine_and_cosine_keep_float32_accuracy_over_large_arguments(fast, exact):
    """A NeRF encodes coordinates times 2**9 and more, rotary embeddings positions times frequencies:
    the reduction by pi/2 in three parts keeps the error at float32's rounding (libm's sinf: 6e-8)
    up to |x| = 1e6 (on this host, whose CPU fuses multiply-adds, as every x86 CPU since Haswell and
    every aarch64 one; 1e5 without); NaN and infinities give NaN, as sinf and cosf do."""
    xs = np.random.default_rng(0).uniform(-1e6, 1e6, 1 << 14).astype("float32")
    xs[:6] = [0.0, -0.0, math.pi / 4, -math.pi / 2, 1e-30, 3 * math.pi / 4]
    assert np.max(np.abs(_run(fast, xs) - exact(xs.astype(np.float64)))) < 2e-7
    assert np.isnan(_run(fast, np.array([np.nan, np.inf, -np.inf], "float32"))).all()


def _model(path):
    """conv -> x * sigmoid(x) (SiLU as exported) -> Gelu (opset 20) -> Sigmoid."""
    w = numpy_helper.from_array(np.random.default_rng(0).normal(0, 0.3, (16, 8, 1, 1)).astype("float32"), "w")
    nodes = [helper.make_node("Conv", ["input", "w"], ["c"]), helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("Mul", ["c", "s"], ["silu"]), helper.make_node("Gelu", ["silu"], ["g"]),
             helper.make_node("Sigmoid", ["g"], ["out"])]
    graph = helper.make_graph(nodes, "acts", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 8, 16, 16])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 16, 16, 16])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9), path)
    return str(path)


def _encoding(path):
    """NeRF's positional encoding: points times frequency bands, then sin and cos concatenated."""
    bands = numpy_helper.from_array((2.0 ** np.arange(10)).astype("float32").reshape(1, 1, 10), "bands")
    nodes = [helper.make_node("Unsqueeze", ["input", "axis"], ["p"]), helper.make_node("Mul", ["p", "bands"], ["x"]),
             helper.make_node("Sin", ["x"], ["s"]), helper.make_node("Cos", ["x"], ["c"]),
             helper.make_node("Concat", ["s", "c"], ["out"], axis=2)]
    axis = numpy_helper.from_array(np.array([2], "int64"), "axis")
    graph = helper.make_graph(nodes, "encoding", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [256, 3])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [256, 3, 20])], [bands, axis])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


def test_the_pipelines_rewrite_after_the_layout_conversion():
    for passes in (INFERENCE_PASSES, INFERENCE_NCHW_PASSES):
        assert passes.index("FastActivations") < passes.index("LegalizeOps")
    assert INFERENCE_PASSES.index("ConvertLayoutNHWC") < INFERENCE_PASSES.index("FastActivations")
    assert INFERENCE_PASSES.index("ConvertLayoutNHWC") < INFERENCE_PASSES.index("FastMathTransform")


def _asm(func: tvm.tirx.PrimFunc, target) -> str:
    """The kernel's assembly for ``target``, compiled only (a plain build: code_views' lowered view,
    script reparse and line map cost several times the build and add nothing to what is called)."""
    return tvm.compile(tvm.IRModule({"main": func}), target=target.tvm()).mod.inspect_source("asm")


# one target in make test, the other two (about 10 s each on 2 busy cores) in make test-slow
@pytest.mark.parametrize("spec", [pytest.param("cpu:x86-64-v3", marks=pytest.mark.slow), "cpu:x86-64-v4",
                                  pytest.param("aarch64:cortex-a76", marks=pytest.mark.slow)])
def test_the_model_kernels_call_no_libm_per_element(tmp_path, spec):
    """Each kernel of the model, default-scheduled for the target and compiled (not run): no call
    to expf/erff/tanhf in its assembly, and no transpose kernel around the activations."""
    target = parse_target(spec)
    workload = load_workload(_model(tmp_path / "acts.onnx"))
    mod = workload.fused_module()
    names = [gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert sum("transpose" in n for n in names) <= 2, names  # the input's and the output's only
    assert any("conv2d" in n and "gelu" in n for n in names), names  # the activations joined the conv
    for gv, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        scheduled, _ = default_schedule(func, target.cpu_spec())
        asm = _asm(scheduled, target)
        calls = [ln for ln in asm.splitlines() if any(f in ln for f in LIBM) and ("call" in ln or "bl\t" in ln
                                                                                     or "bl " in ln or "jmp" in ln)]
        assert not calls, (gv.name_hint, calls[:3])


@pytest.mark.parametrize("spec", ["cpu:x86-64-v4", pytest.param("aarch64:cortex-a76", marks=pytest.mark.slow)])
def test_a_positional_encoding_calls_no_sinf_or_cosf(tmp_path, spec):
    target = parse_target(spec)
    mod = load_workload(_encoding(tmp_path / "enc.onnx")).fused_module()
    kernels = [(gv.name_hint, f) for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert any("sin" in name for name, _ in kernels), [name for name, _ in kernels]
    for name, func in kernels:
        asm = _asm(default_schedule(func, target.cpu_spec())[0], target)
        assert not [ln for ln in asm.splitlines() if any(f in ln for f in LIBM)], name


@pytest.mark.heavy
@pytest.mark.parametrize("model", [_model, _encoding])
def test_a_model_with_the_activations_exports_and_verifies(tmp_path, model):
    from export import export_workload

    report = export_workload(load_workload(model(tmp_path / "m.onnx")), "cpu", tmp_path / "bundle", layers=False)
    assert report.ok and report.verified, report.verdict


def test_hard_swish_and_hard_sigmoid_join_their_convolution_without_transposes(tmp_path):
    """ONNX HardSwish/HardSigmoid import as R.clip, which ConvertLayout has no rule for: each got
    two transposes and kept its convolution from fusing (MobileNetV3, GhostNet, LCNet). As
    maximum/minimum they convert and fuse."""
    w = numpy_helper.from_array(np.random.default_rng(1).normal(0, 0.3, (16, 8, 3, 3)).astype("float32"), "w")
    w2 = numpy_helper.from_array(np.random.default_rng(2).normal(0, 0.3, (16, 16, 1, 1)).astype("float32"), "w2")
    nodes = [helper.make_node("Conv", ["input", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("HardSwish", ["c"], ["h"]),
             helper.make_node("Conv", ["h", "w2"], ["c2"]), helper.make_node("HardSigmoid", ["c2"], ["out"])]
    graph = helper.make_graph(nodes, "hard", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 8, 16, 16])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 16, 16, 16])], [w, w2])
    path = tmp_path / "hard.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    tasks = [t.name.split("/")[-1] for t in load_workload(str(path)).tasks()]
    assert sum("transpose" in t for t in tasks) == 2, tasks  # the input's and the output's only
    convs = [t for t in tasks if "conv2d" in t]
    assert len(convs) == 2 and all("maximum" in t and "minimum" in t for t in convs), tasks


def _powers(path):
    """|x| ** 3 + |x| ** 2 + |x| ** 0.5 + |x| ** 0.75 + (|x| + 1) ** -0.5 + (|x| + 1) ** 1.25 (GPT-2's GELU
    cubes, LayerNorm exports square, LRN's 0.75, a reciprocal square root): each a powf call per
    element unless rewritten."""
    values = {"three": 3.0, "two": 2.0, "half": 0.5, "lrn": 0.75, "rsqrt": -0.5, "five_quarters": 1.25, "one": 1.0}
    consts = [numpy_helper.from_array(np.array(v, "float32"), n) for n, v in values.items()]
    nodes = [helper.make_node("Abs", ["input"], ["a"]), helper.make_node("Add", ["a", "one"], ["b"])]
    for base, exponent in (("a", "three"), ("a", "two"), ("a", "half"), ("a", "lrn"), ("b", "rsqrt"),
                           ("b", "five_quarters")):
        nodes.append(helper.make_node("Pow", [base, exponent], [f"p_{exponent}"]))
    nodes.append(helper.make_node("Sum", [n.output[0] for n in nodes[2:]], ["out"]))
    graph = helper.make_graph(nodes, "powers", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [4, 64])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [4, 64])], consts)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


def _lrn(path):
    """Local response normalization as AlexNet, GoogLeNet and ZFNet use it: ``x / (1 + a/n sum x^2) ** 0.75``."""
    nodes = [helper.make_node("LRN", ["input"], ["out"], alpha=1e-4, beta=0.75, bias=1.0, size=5)]
    graph = helper.make_graph(nodes, "lrn", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 16, 8, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 16, 8, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


@pytest.mark.parametrize("spec", ["cpu:x86-64-v3", "aarch64:cortex-a76"])
@pytest.mark.parametrize("model", [_powers, _lrn])
def test_constant_powers_call_no_powf(tmp_path, spec, model):
    target = parse_target(spec)
    mod = load_workload(model(tmp_path / "model.onnx")).fused_module()
    for gv, func in mod.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc):
            asm = _asm(default_schedule(func, target.cpu_spec())[0], target)
            assert "powf" not in asm, gv.name_hint


@pytest.mark.heavy
@pytest.mark.parametrize("model", [_powers, _lrn])
def test_the_powers_still_match_onnx_runtime(tmp_path, model):
    from export import export_workload

    report = export_workload(load_workload(model(tmp_path / "model.onnx")), "cpu", tmp_path / "b", layers=False)
    assert report.ok and report.verified, report.verdict
