"""Small int8 convolutions of quantized CNNs (1x1 and 3x3, 16-64 channels, 8x8-32x32 pixels) and the
kernel that quantizes, transposes and pads their float image: the default schedules' decisions
and instructions per x86 target (compile only), and the whole model against ONNX Runtime here."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import tvm
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from tvm import te

from app.cli import cli
from explorer.passes.qdq_int8 import conv2d_nhwc_int8
from explorer.schedule import int8_dot
from explorer.schedule.defaults import CpuSpec, default_schedule
from explorer.target import parse_target
from tests.quantized_models import amx_int8_cnn, ort_quantize

# target, its int8 dot-product instruction set, the instruction in the kernel's assembly
TARGETS = [("cpu:sapphirerapids", "vnni", "vpdpbusd"),  # AVX512-VNNI and AMX-INT8: the AVX-512 one
           ("cpu:icelake-server", "vnni", "vpdpbusd"),  # AVX512-VNNI without AMX
           ("cpu:znver3", "avx2", "vpmaddubsw")]  # AVX2: pairs in int16 (7-bit weights)
SHAPES = [(1, 16, 64, 32), (3, 32, 32, 8), (1, 64, 16, 16)]  # kernel size, in and out channels, output side


def _cpu(spec: str) -> CpuSpec:
    t = parse_target(spec)
    return CpuSpec.of(vector_width=t.vector_width, features=t.features, arch=t.arch, cores=2)


def _requantized_conv(kernel: int, cin: int, cout: int, side: int, stride: int = 1) -> tvm.tirx.PrimFunc:
    """A conv2d_nhwc_int8 kernel as the QDQ pass writes it, with the epilogue a quantized model
    fuses into it: the zero point's sums taken off, scaled per channel, rounded back to uint8."""
    x = te.placeholder((1, (side - 1) * stride + kernel, (side - 1) * stride + kernel, cin), "uint8", name="X")
    w = te.placeholder((cout // 16, kernel, kernel, cin // 4, 16, 4), "int8", name="W")
    zero = te.placeholder((cout,), "int32", name="zero_sums")
    scale = te.placeholder((cout,), "float32", name="scale")
    acc = conv2d_nhwc_int8(x, w, stride, stride, side, side, 63)
    out = te.compute(acc.shape, lambda n, h, ww, o: te.max(te.min(te.round(
        (acc[n, h, ww, o] - zero[o]).astype("float32") * scale[o]), 255.0), 0.0).astype("uint8"), name="requantized")
    return te.create_prim_func([x, w, zero, scale, out])


@pytest.mark.parametrize("spec, isa, instruction", TARGETS, ids=[t[0] for t in TARGETS])
@pytest.mark.parametrize("kernel, cin, cout, side", SHAPES, ids=["1x1-16-64-32px", "3x3-32-32-8px", "1x1-64-16-16px"])
def test_a_small_int8_conv_is_one_parallel_loop_around_the_dot_product(spec, isa, instruction, kernel, cin, cout, side):
    """The tile's int32 sums requantized while in cache, in the tile's own parallel iteration: one
    parallel loop, no int32 buffer of the whole output (it was a second parallel pass over
    ``side^2 x cout`` int32s: a 32x32x64 1x1 convolution's 0.028 ms -> 0.018 ms). AMX-INT8's
    ``tdpbusd`` is not used: its tiles need 64 input channels a step, 16-channel layers would be a
    quarter full."""
    scheduled, choice = default_schedule(_requantized_conv(kernel, cin, cout, side), _cpu(spec))
    assert choice.rule == "full", choice
    assert f"{int8_dot.NAME_PREFIX}{isa}_" in choice.steps[0] and "epilogue per tile" in choice.steps[0], choice.steps
    assert len(choice.steps) == 1, choice.steps  # nothing left for the general rules
    assert scheduled.script().count("T.parallel(") == 1
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target=parse_target(spec).tvm())
    asm = (lib.mod.imports[0] if lib.mod.imports else lib.mod).inspect_source("asm")
    assert instruction in asm and "tdpbusd" not in asm


@pytest.mark.parametrize("spec, isa, instruction", TARGETS, ids=[t[0] for t in TARGETS])
def test_a_strided_stem_unrolls_pixels_around_the_one_row_call(spec, isa, instruction):
    """A stride-2 3x3 stem (4 padded image channels -> 16): one-row calls, 4 output pixels
    unrolled around them: 4 independent sums per tap instead of one chain of 9."""
    scheduled, choice = default_schedule(_requantized_conv(3, 4, 16, 16, stride=2), _cpu(spec))
    assert f"{int8_dot.NAME_PREFIX}{isa}_1x" in choice.steps[0] and "4 pixels unrolled" in choice.steps[0], choice
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target=parse_target(spec).tvm())
    asm = (lib.mod.imports[0] if lib.mod.imports else lib.mod).inspect_source("asm")
    assert asm.count(instruction) >= 4


def test_the_requantized_tile_computes_exactly_on_this_cpu():
    cpu = _cpu("cpu")
    if not cpu.int8_dot:
        pytest.skip("this CPU has no int8 dot-product instructions schedx knows")
    kernel, cin, cout, side = 3, 16, 32, 8
    scheduled, choice = default_schedule(_requantized_conv(kernel, cin, cout, side), cpu)
    assert "epilogue per tile" in choice.steps[0], choice.steps
    rng = np.random.default_rng(0)
    xs = rng.integers(0, 256, (1, side + 2, side + 2, cin)).astype("uint8")
    ws = rng.integers(-63, 64, (cout // 16, kernel, kernel, cin // 4, 16, 4)).astype("int8")
    zero = rng.integers(-2000, 2000, cout).astype("int32")
    scale = rng.uniform(0.001, 0.01, cout).astype("float32")
    plain = ws.transpose(0, 4, 1, 2, 3, 5).reshape(cout, kernel, kernel, cin).astype(np.int64)
    acc = sum(np.einsum("nhwc,oc->nhwo", xs[:, a:a + side, b:b + side].astype(np.int64), plain[:, a, b])
              for a in range(kernel) for b in range(kernel))
    ref = np.clip(np.round((acc - zero).astype("float32") * scale), 0, 255).astype("uint8")
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target=parse_target("cpu").tvm())
    args = [tvm.runtime.tensor(a) for a in (xs, ws, zero, scale, np.zeros(ref.shape, "uint8"))]
    lib(*args)
    assert np.array_equal(args[-1].numpy(), ref)


def _image_quantize_pad(side: int) -> tvm.tirx.PrimFunc:
    """A float NCHW image quantized to uint8, transposed to NHWC and padded to 4 channels and a
    one-pixel border: the kernel in front of a quantized CNN's int8 stem."""
    image = te.placeholder((1, 3, side, side), "float32", name="image")
    q = te.compute(image.shape, lambda n, c, h, w: te.max(te.min(
        te.round(image[n, c, h, w] / 0.03) + 124.0, 255.0), 0.0).astype("uint8"), name="quantized")
    t = te.compute((1, side, side, 3), lambda n, h, w, c: q[n, c, h, w], name="T_transpose")
    padded = te.compute((1, side + 2, side + 2, 4), lambda n, h, w, c: tvm.tirx.if_then_else(
        tvm.tirx.all(h >= 1, h <= side, w >= 1, w <= side, c < 3), t[n, h - 1, w - 1, c], tvm.tirx.const(124, "uint8")),
        name="PadInput")
    return te.create_prim_func([image, padded])


@pytest.mark.parametrize("spec", [t[0] for t in TARGETS])
def test_the_image_is_quantized_along_its_rows_in_vectors(spec):
    """NCHW rows read as float vectors, the 4 channels unrolled around them (was a scalar loop
    nest: the quantization's division one value at a time)."""
    scheduled, choice = default_schedule(_image_quantize_pad(64), _cpu(spec))
    assert choice.steps == ("transpose: rows of 66 read as one vector, 4 channels unrolled (PadInput)",), choice
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target=parse_target(spec).tvm())
    asm = (lib.mod.imports[0] if lib.mod.imports else lib.mod).inspect_source("asm")
    assert "vdivps" in asm and ("vroundps" in asm or "vrndscaleps" in asm)


def test_a_quantized_image_is_padded_to_whole_vector_rows_and_quantized_along_them(tmp_path):
    """A 7x7 stride-2 stem on a 3x30x30 image: its padded rows of 36 columns widened to 48 (columns
    the stem never reads), so the kernel that quantizes, transposes and pads the image reads them as
    whole float vectors (ResNet's 230 columns were read value by value: 0.25 of its 2.3 ms)."""
    from explorer.models import load_model
    from explorer.workload.model_kernels import model_kernels

    path = tmp_path / "stem7.onnx"
    onnx.save(ort_quantize(amx_int8_cnn(stem=7, stride=2, side=30), tmp_path), path)
    with tvm.target.Target({"kind": "llvm", "mcpu": "sapphirerapids"}):  # (the rewrite wants int8 dot products)
        kernels = model_kernels(load_model(str(path), None))
    image = next(k for k in kernels if "quantize" in k.name and "transpose" in k.name)
    assert [b.shape for b in image.outputs] == [(1, 36, 48, 4)]
    _, choice = default_schedule(image.func, _cpu("cpu:sapphirerapids"))
    assert choice.steps == ("transpose: rows of 48 read as vectors of 16, 4 channels unrolled (PadInput)",), choice


def test_the_image_kernel_computes_exactly_on_this_cpu():
    side = 32  # rows of whole vectors (split into vectors of the CPU's lanes)
    scheduled, choice = default_schedule(_image_quantize_pad(side), _cpu("cpu"))
    assert "transpose: rows of" in choice.steps[0], choice.steps
    rng = np.random.default_rng(0)
    image = rng.standard_normal((1, 3, side, side)).astype("float32")
    q = np.clip(np.round(image / np.float32(0.03)) + 124, 0, 255).astype("uint8")
    ref = np.full((1, side + 2, side + 2, 4), 124, "uint8")
    ref[0, 1:-1, 1:-1, :3] = q[0].transpose(1, 2, 0)
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target=parse_target("cpu").tvm())
    out = tvm.runtime.tensor(np.zeros(ref.shape, "uint8"))
    lib(tvm.runtime.tensor(image), out)
    assert np.array_equal(out.numpy(), ref)


def test_a_transpose_of_three_channels_in_whole_vectors_computes_exactly_on_this_cpu():
    """No padding: rows of 32 cut into the CPU's vectors, the channels unrolled inside each (a
    rounding: worth vectors; a plain copy keeps the loop nest)."""
    image = te.placeholder((1, 3, 32, 32), "float32", name="image")
    copy = te.compute((1, 32, 32, 3), lambda n, h, w, c: image[n, c, h, w], name="T_transpose")
    _, choice = default_schedule(te.create_prim_func([image, copy]), _cpu("cpu"))
    assert choice.steps == ("parallel transpose (T_transpose)",), choice.steps
    out = te.compute((1, 32, 32, 3), lambda n, h, w, c: te.round(image[n, c, h, w] * 2.0), name="T_transpose")
    scheduled, choice = default_schedule(te.create_prim_func([image, out]), _cpu("cpu"))
    assert "transpose: rows of 32 read as vectors of" in choice.steps[0], choice.steps
    data = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target=parse_target("cpu").tvm())
    got = tvm.runtime.tensor(np.zeros((1, 32, 32, 3), "float32"))
    lib(tvm.runtime.tensor(data), got)
    assert np.array_equal(got.numpy(), np.round(data.transpose(0, 2, 3, 1) * 2))


def _small_cnn() -> onnx.ModelProto:
    """3x3 stem 3 -> 24 on a 32x32 image, 1x1 24 -> 64, 3x3 64 -> 32 with a 1x1 residual branch (24
    output channels: padded to whole panels of 16 in the int8 kernel, then sliced)."""
    rng = np.random.default_rng(0)

    def weight(name, o, i, k):
        return numpy_helper.from_array(rng.normal(0, (2 / (i * k * k)) ** 0.5, (o, i, k, k)).astype("float32"), name)

    inits = [weight("w1", 24, 3, 3), weight("w2", 64, 24, 1), weight("w3", 32, 64, 3), weight("w4", 32, 24, 1)]
    inits += [numpy_helper.from_array(rng.normal(0, 0.1, n).astype("float32"), f"b{k}")
              for k, n in ((1, 24), (2, 64), (3, 32), (4, 32))]
    nodes = [helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["r1", "w4", "b4"], ["c4"]),
             helper.make_node("Add", ["c3", "c4"], ["out"])]
    graph = helper.make_graph(nodes, "small_int8_cnn",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 32, 32, 32])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("fmt", ["QOperator", "QDQ"])
def test_a_small_quantized_cnn_exports_verified_against_onnx_runtime(tmp_path, fmt):
    """ONNX Runtime's static quantizer in both formats; the default schedules (no records), the
    export's fresh-process verification at the int8 tolerance (a few output quantization steps)."""
    path = tmp_path / f"small-{fmt}.onnx"
    onnx.save(ort_quantize(_small_cnn(), tmp_path, fmt=fmt), path)
    result = CliRunner().invoke(cli, ["export", str(path), "--no-db", "-o", str(tmp_path / "bundle"), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{"):])
    assert report["ok"] and report["verification"]["fresh_process"]["ok"], report["verification"]
    if _cpu("cpu").int8_dot:
        assert any("conv2d_nhwc_int8" in t["name"] for t in report["tasks"]), [t["name"] for t in report["tasks"]]
