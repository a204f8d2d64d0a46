"""bf16 convolutions: the implicit-GEMM kernel of :mod:`explorer.passes.bf16_conv` on the same
AVX512-BF16 / AMX-BF16 micro-kernels as the weight products. Compile-only per target (any host);
the numeric runs only where the CPU flags list the instructions."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tvm

from explorer.passes.bf16_conv import MIN_REDUCTION, bf16_convs, conv2d_bf16, pack_conv_weights, row_panels, why_fp32
from explorer.passes.bf16_dense import bf16_round
from explorer.schedule.defaults import default_schedule
from explorer.target import parse_target
from explorer.target.host import host_cpu
from tests.bf16_products import CONV_SHAPES, check_conv_bf16, conv_bf16_func, run_conv_bf16
from tests.cpu_marks import NEEDS_AMX, NEEDS_BF16

def _built(spec: str, shape, isa: str | None = None):
    target = parse_target(spec)
    cpu = target.cpu_spec() if isa is None else dataclasses.replace(target.cpu_spec(), bf16_dot=isa)
    func, choice = default_schedule(conv_bf16_func(*shape), cpu)
    return tvm.compile(tvm.IRModule({"main": func}), target=target.tvm()), choice


def _asm(lib) -> str:
    return lib.mod.inspect_source("asm")


def test_weights_pack_in_tap_then_channel_pair_order_padded_to_amx_tiles():
    w = np.arange(24 * 3 * 2 * 2, dtype=np.float32).reshape(24, 3, 2, 2)
    packed = pack_conv_weights(w)
    assert packed.shape == (32, 32) and packed.dtype == np.uint16  # 24 -> 32 channels; 2x2 taps x 4 -> 16 -> 32 K
    widened = (packed.astype(np.uint32) << 16).view(np.float32)
    assert widened[5, 4 * 1 + 2] == bf16_round(w[5, 2, 0, 1:2])[0]  # tap (0, 1), channel 2
    assert widened[5, 3] == 0 and widened[24:].max() == 0 and widened[:, 16:].max() == 0  # padding is zero


def test_rows_are_padded_to_whole_panels_only_where_that_costs_at_most_a_seventh():
    assert row_panels(56) and row_panels(112) and row_panels(14) and not row_panels(7) and not row_panels(10)


@pytest.mark.parametrize("spec, isa, instruction", [("cpu:znver4", None, "vdpbf16ps"),
                                                    ("cpu:sapphirerapids", "avx512bf16", "vdpbf16ps")])
def test_avx512_bf16_targets_get_vdpbf16ps_in_the_conv_kernel(spec, isa, instruction):
    lib, choice = _built(spec, CONV_SHAPES[0], isa)
    assert choice.rule == "full" and "vdpbf16ps" in choice.steps[0] and "bf16_im2col" in choice.steps[0], choice
    assert instruction in _asm(lib) and "tdpbf16ps" not in _asm(lib)


def test_sapphirerapids_conv_runs_on_amx_tiles_and_asks_linux_for_tile_state():
    lib, choice = _built("cpu:sapphirerapids", CONV_SHAPES[0])
    assert "AMX" in choice.steps[0], choice
    asm = _asm(lib)
    assert "tdpbf16ps" in asm and "tileloadd" in asm and "ldtilecfg" in asm
    assert "syscall" in asm and "$158" in asm and "$4131" in asm  # arch_prctl(ARCH_REQ_XCOMP_PERM, ...)


def test_avx2_target_keeps_no_bf16_kernel_and_says_why():
    func, choice = default_schedule(conv_bf16_func(*CONV_SHAPES[0]), parse_target("cpu:x86-64-v3").cpu_spec())
    assert "no dot-product intrinsic" in " ".join(choice.steps) and "AVX512-BF16" in " ".join(choice.steps)


def test_long_reductions_become_bf16_kernels_short_ones_and_depthwise_ones_stay_fp32():
    from tvm import relax
    from tvm.script import relax as R

    rng = np.random.default_rng(0)
    short = relax.const(rng.standard_normal((64, 8, 3, 3)).astype("float32"))  # K = 72: fp32
    long = relax.const(rng.standard_normal((16, 64, 3, 3)).astype("float32"))  # K = 576 >= MIN_REDUCTION: bf16
    dw = relax.const(rng.standard_normal((16, 1, 3, 3)).astype("float32"))

    @R.function
    def main(x: R.Tensor((1, 8, 6, 6), "float32")):
        with R.dataflow():
            y = R.nn.conv2d(x, short, padding=[1, 1, 1, 1])
            z = R.nn.conv2d(y, long, padding=[1, 1, 1, 1])
            d = R.nn.conv2d(z, dw, padding=[1, 1, 1, 1], groups=16)
            R.output(d)
        return d

    mod, converted, kept = bf16_convs(tvm.IRModule({"main": main}))
    text = mod.script()
    assert converted == 1 and "conv2d_bf16" in text and text.count("R.nn.conv2d(") == 2  # the short and depthwise
    assert kept == (f"8x3x3 -> 64: reduction K = 72 < {MIN_REDUCTION}, too short for bf16 to pay",)
    assert why_fp32((16, 64, 3, 3)) is None and why_fp32((960, 160, 1, 1)) is not None


def test_a_model_whose_reductions_are_all_short_keeps_its_module_and_the_precision_says_why():
    from tvm import relax
    from tvm.script import relax as R

    from explorer.precision import for_precision
    from explorer.workload.loaded import Workload

    w = relax.const(np.ones((16, 8, 1, 1), "float32"))

    @R.function
    def main(x: R.Tensor((1, 8, 4, 4), "float32")):
        with R.dataflow():
            y = R.nn.conv2d(x, w)
            R.output(y)
        return y

    mod = tvm.IRModule({"main": main})
    workload = Workload("tiny", "model", "tiny", mod, (("x", (1, 8, 4, 4), "float32"),),
                        (("y", (1, 16, 4, 4), "float32"),))
    built, precision = for_precision(workload, parse_target("cpu:sapphirerapids"), "bf16")
    assert built.mod.script() == mod.script() and precision.converted == 0
    assert any("1 convolution(s) with a reduction" in line and "8x1x1 -> 16" in line for line in precision.kept_fp32)


@NEEDS_BF16
@pytest.mark.parametrize("shape", CONV_SHAPES)
def test_vdpbf16ps_conv_matches_numpy_at_the_bf16_tolerance(shape):
    lib, _ = _built("cpu", shape, "avx512bf16")
    check_conv_bf16(*run_conv_bf16(lib, shape), shape)


@NEEDS_AMX
@pytest.mark.parametrize("shape", CONV_SHAPES)
def test_amx_conv_matches_numpy_at_the_bf16_tolerance(shape):
    lib, choice = _built("cpu", shape, "amx")
    assert "AMX" in choice.steps[0] or shape[4] % 16, choice
    check_conv_bf16(*run_conv_bf16(lib, shape), shape)


def _conv_onnx(path) -> str:
    """One 3x3 64 -> 64 convolution (K = 576: long enough for bf16 on either kernel) and a ReLU."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).normal(0, 0.06, (64, 64, 3, 3)).astype("float32"), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 8, 8])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


@pytest.mark.parametrize("spec, in_bf16, instruction", [("cpu:sapphirerapids", True, "tdpbf16ps"),
                                                        ("cpu:znver4", False, None), ("cpu:cooperlake", False, None)])
def test_convolutions_run_in_bf16_only_where_the_targets_bf16_instructions_pay(tmp_path, spec, in_bf16, instruction):
    """Built for each target (compile-only): AMX tiles take the convolution; vdpbf16ps alone, at a
    rate not measured here (Zen 4, Cooper Lake), keeps it fp32 and the build's fp32 list says why."""
    from export.build import build
    from explorer.passes.bf16_conv import why_convs_fp32
    from explorer.workload import load_workload

    target = parse_target(spec)
    built = build(load_workload(_conv_onnx(tmp_path / "conv.onnx")), target, precision="bf16")
    asm = "".join(m.inspect_source("asm") for m in built.executable.mod.imports)
    why = why_convs_fp32(target)
    assert (why is None) == in_bf16 and (built.precision.converted == 1) == in_bf16
    if in_bf16:
        assert instruction in asm
    else:
        assert "was not measured here" in why and why in built.precision.kept_fp32
        assert "vdpbf16ps" not in asm and "tdpbf16ps" not in asm


def test_on_this_machine_the_measured_vdpbf16ps_rate_decides(tmp_path, monkeypatch):
    """This CPU seen without its tiles (SCHEDX_CPU_FLAGS): its calibration's vdpbf16ps figure against
    its FMA kernel's decides, half the rate keeps convolutions fp32, 1.5x and more computes them in bf16."""
    import importlib

    from explorer.measure.families import FamilyPeak
    from explorer.passes.bf16_conv import VECTOR_MIN_RATE, why_convs_fp32
    from explorer.target import host_target
    from explorer.target.environment import cpu_flags, hardware_fingerprint

    if "avx512_bf16" not in cpu_flags():
        pytest.skip("this CPU has no AVX512-BF16")
    cal_mod = importlib.import_module("explorer.measure.calibration")  # the package's `calibration` is the function
    monkeypatch.setenv("SCHEDX_CPU_FLAGS", " ".join(f for f in cpu_flags() if not f.startswith("amx")))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    target = host_target()

    def stored(bf16_gflops: float, ratio: float | None = None) -> None:
        vector = FamilyPeak("bf16", bf16_gflops, "bf16 AVX512-BF16 vdpbf16ps kernel, 12 accumulators",
                            "bf16 AVX512-BF16", bf16_gflops, isa="avx512bf16", fp32_ratio=ratio)
        int8 = FamilyPeak("int8", 900.0, "int8 VNNI vpdpbusd kernel, 12 accumulators", "int8 VNNI", 900.0, isa="vnni")
        cal_mod.save(cal_mod.Calibration(hardware_fingerprint(), 480.0, 20.0, "now", cal_mod.CALIBRATION_VERSION,
                                         fma_gflops=477.0, numpy_gflops=300.0, families=(vector, int8),
                                         cpu=host_cpu().llvm_cpu))

    stored(262.0)  # 0.55x: what this Intel CPU measured
    assert "measured at 0.55x the fp32 FMA rate on this machine" in why_convs_fp32(target)
    stored(477.0 * VECTOR_MIN_RATE)
    assert why_convs_fp32(target) is None
    stored(477.0 * VECTOR_MIN_RATE, ratio=0.52)  # the two kernels timed side by side outrank figures of other loads
    assert "measured at 0.52x" in why_convs_fp32(target)


def test_has_convs_finds_a_conv_in_any_function_and_nothing_else():
    from tvm import relax

    from explorer.passes.bf16_conv import has_convs

    def module(with_conv: bool) -> tvm.IRModule:
        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType((1, 8, 6, 6), "float32"))
        w = relax.Var("w", relax.TensorType((8, 8, 3, 3), "float32"))
        with bb.function("helper", [x, w]):
            y = bb.emit(relax.op.nn.conv2d(x, w) if with_conv else relax.op.add(x, x))
            bb.emit_func_output(y)
        z = relax.Var("z", relax.TensorType((4, 4), "float32"))
        with bb.function("main", [z]):
            bb.emit_func_output(bb.emit(relax.op.matmul(z, z)))
        return bb.get()

    assert has_convs(module(True))  # found in a function other than main
    assert not has_convs(module(False))  # a matmul, an add: no conv
