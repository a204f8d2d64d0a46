"""A convolution (depthwise, or a direct bf16 one) hands its only reader, a direct bf16 convolution (or,
with ``SHARED_BITS`` on, its readers that are direct bf16 convolutions and adds), its output already
rounded to bf16 (:mod:`explorer.passes.bf16_conv_bits`): the graph and the fused kernels for an AMX CPU
and for one with AVX512-BF16 alone (built for each, on any host), and on a host with bf16 instructions
the same numbers as the consumer rounding it itself."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

from explorer.passes import bf16_conv
from explorer.passes.bf16_conv_bits import BITS_NAME, POOL_NAME, WIDEN_NAME
from explorer.passes.bf16_conv_nhwc import INPUT_NAME
from explorer.target import parse_target
from explorer.workload import load_workload
from tests.cpu_marks import HAS_AMX, HAS_BF16

# the direct kernel on AMX tiles, and on vdpbf16ps vectors alone (Zen 4/5): the producer rounds for both
TARGETS = ["cpu:sapphirerapids", "cpu:znver5"]


def _block(hidden: int = 192, project: int = 64, *, residual: bool = False) -> onnx.ModelProto:
    """MobileNetV2's inverted residual at 14x14: 1x1 32 -> ``hidden`` (fp32: K 32), depthwise 3x3 +
    bias + relu6, 1x1 ``hidden`` -> ``project`` (bf16: K >= 128); ``residual``: the depthwise
    output also added to the block's output (a second reader; ``project`` == ``hidden``)."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.normal(0, 0.2, (hidden, 32, 1, 1)).astype("float32"), "we"),
             numpy_helper.from_array(rng.normal(0, 0.3, (hidden, 1, 3, 3)).astype("float32"), "wd"),
             numpy_helper.from_array(rng.normal(0, 0.1, hidden).astype("float32"), "bd"),
             numpy_helper.from_array(rng.normal(0, 0.1, (project, hidden, 1, 1)).astype("float32"), "wp"),
             numpy_helper.from_array(np.float32(0), "lo"), numpy_helper.from_array(np.float32(6), "hi")]
    nodes = [helper.make_node("Conv", ["x", "we"], ["e"]), helper.make_node("Clip", ["e", "lo", "hi"], ["er"]),
             helper.make_node("Conv", ["er", "wd", "bd"], ["d"], group=hidden, pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["d", "lo", "hi"], ["dr"]), helper.make_node("Conv", ["dr", "wp"], ["p"])]
    out = "p"
    if residual:
        nodes.append(helper.make_node("Add", ["p", "dr"], ["y"]))
        out = "y"
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 14, 14])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, project, 14, 14])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _basic_block(channels: int = 64, size: int = 14) -> onnx.ModelProto:
    """ResNet's basic block: 3x3 conv + bias + relu, 3x3 conv + bias, the block's input added, relu
    (both convolutions direct bf16 kernels on AMX: K = 9 x ``channels``)."""
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array(rng.normal(0, 0.05, (channels, channels, 3, 3)).astype("float32"), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.1, channels).astype("float32"), "b1"),
             numpy_helper.from_array(rng.normal(0, 0.05, (channels, channels, 3, 3)).astype("float32"), "w2"),
             numpy_helper.from_array(rng.normal(0, 0.1, channels).astype("float32"), "b2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "x"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    shape = [1, channels, size, size]
    graph = helper.make_graph(nodes, "basic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _path(tmp_path, model: onnx.ModelProto) -> str:
    path = tmp_path / "block.onnx"
    onnx.save(model, path)
    return str(path)


def _output_dtype(script: str) -> str:
    """The dtype of a kernel's last parameter, its output (the script's signature line)."""
    return re.findall(r'"(uint16|float32)"', script.split("\n")[4])[-1]


def _kernels(path: str, target: str = TARGETS[0]) -> dict[str, str]:
    """The fused kernels of the model at ``path`` built at bf16 for ``target`` (compile only, on any host: the
    Zen 5 as one whose ``vdpbf16ps`` was measured to pay, which only that machine can measure)."""
    from explorer.precision import for_precision

    with pytest.MonkeyPatch.context() as mp:
        if target != TARGETS[0]:
            mp.setattr(bf16_conv, "vdpbf16ps_pays", lambda _target: True)
        workload, _ = for_precision(load_workload(path), parse_target(target), "bf16")
        return {gv.name_hint: f.script() for gv, f in workload.fused_module().functions_items()
                if isinstance(f, tvm.tirx.PrimFunc)}


@pytest.mark.parametrize("target", TARGETS)
def test_the_depthwise_kernel_writes_bf16_bits_and_the_projection_reads_them_without_a_packing_pass(tmp_path, target):
    kernels = _kernels(_path(tmp_path, _block()), target)
    depthwise = [n for n in kernels if BITS_NAME in n]
    project = [n for n in kernels if "conv2d_nhwc_bf16" in n]
    assert len(depthwise) == 1 and "group_conv2d" in kernels[depthwise[0]], sorted(kernels)
    assert '"uint16"' in kernels[depthwise[0]].split("\n")[4]  # its output: the bits (2 bytes a value)
    assert len(project) == 1 and INPUT_NAME not in kernels[project[0]]  # 192 channels, whole tile rows: read as is


@pytest.mark.parametrize("target", TARGETS)
def test_a_projection_whose_channels_need_padding_keeps_a_packing_pass_that_only_pads(tmp_path, target):
    kernels = _kernels(_path(tmp_path, _block(hidden=144, project=32)), target)  # 144 channels padded to 160
    assert any(BITS_NAME in n for n in kernels), sorted(kernels)
    project = next(s for n, s in kernels.items() if "conv2d_nhwc_bf16" in n)
    if target == "cpu:znver5":  # vectors pad the channels to pairs only: 144 channels of bits are read as they are
        assert INPUT_NAME not in project
        return
    packing = project.split(f'T.sblock("{INPUT_NAME}")')[1].split("T.sblock(")[0]
    assert "T.if_then_else" in packing and "reinterpret" not in packing  # zeros past 144 channels, no rounding


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shared", [True, False], ids=["shared_bits", "fp32"])
def test_a_depthwise_output_with_a_second_reader(tmp_path, monkeypatch, target, shared):
    """Read by the projection and by an add too: with :data:`explorer.passes.bf16_conv_bits.SHARED_BITS` on,
    written as bits, the add widening them; off (the default), fp32, the projection rounding it itself."""
    from explorer.passes import bf16_conv_bits

    monkeypatch.setattr(bf16_conv_bits, "SHARED_BITS", shared)
    kernels = _kernels(_path(tmp_path, _block(project=192, residual=True)), target)
    assert any(BITS_NAME in n for n in kernels) == shared, sorted(kernels)
    assert any(WIDEN_NAME in n for n in kernels) == shared, sorted(kernels)
    project = next(s for n, s in kernels.items() if "conv2d_nhwc_bf16" in n)
    assert (INPUT_NAME in project) != shared  # fp32: the projection rounds its input itself


@pytest.mark.parametrize("target", TARGETS)
def test_a_direct_kernel_read_only_by_the_next_one_writes_bits_after_its_bias_and_relu(tmp_path, target):
    kernels = _kernels(_path(tmp_path, _basic_block()), target)
    convs = {n: s for n, s in kernels.items() if "conv2d_nhwc_bf16" in n}
    first = [n for n in convs if BITS_NAME in n]
    assert len(convs) == 2 and len(first) == 1 and "relu" in first[0], sorted(kernels)  # fused: no kernel of its own
    assert not any(n.startswith(BITS_NAME) for n in kernels), sorted(kernels)
    assert _output_dtype(convs[first[0]]) == "uint16"  # conv1 + bias + relu writes the bits
    second = next(s for n, s in convs.items() if n != first[0])
    packing = second.split(f'T.sblock("{INPUT_NAME}")')[1].split("T.sblock(")[0]
    assert "T.if_then_else" in packing and "reinterpret" not in packing  # conv2 pads the bits, no rounding
    own = convs[first[0]].split(f'T.sblock("{INPUT_NAME}")')[1].split("T.sblock(")[0]
    assert "reinterpret" in own  # the block's input (read by the residual add too) rounded by conv1 itself


@pytest.mark.parametrize("model", [_block, _basic_block], ids=["depthwise", "direct"])
def test_rounding_in_the_producer_gives_the_numbers_of_rounding_in_the_consumer(tmp_path, monkeypatch, model):
    outputs = _outputs_on_and_off(tmp_path, monkeypatch, model(), bf16_conv, "PRODUCER_ROUNDS", BITS_NAME)
    assert np.array_equal(outputs[True], outputs[False])


def _skip_unless_the_host_runs_direct_bf16_convs() -> None:
    """Skip (saying why) on a host whose bf16 builds keep convolutions off the direct kernel: no AMX, and no
    AVX512-BF16 whose measured ``vdpbf16ps`` rate pays (a Zen 4, a Cooper Lake, a CPU without bf16)."""
    from explorer.target import host_target

    if HAS_AMX:
        return
    if not HAS_BF16:
        pytest.skip("this CPU has neither AMX-BF16 nor AVX512-BF16: a bf16 bundle cannot run here")
    if not bf16_conv.vdpbf16ps_pays(host_target()):
        pytest.skip(f"this machine's measured vdpbf16ps rate is under {bf16_conv.VECTOR_MIN_RATE}x its fp32 FMAs': "
                    "its bf16 builds keep convolutions fp32, so nothing here reads bits")


def _outputs_on_and_off(tmp_path, monkeypatch, model: onnx.ModelProto, module, switch: str, marker: str) -> dict:
    """The model's bf16 bundle output with ``module.switch`` True and False (each bundle verified; the one with
    it on has a kernel named with ``marker``: the bits are there to compare)."""
    from export.flow import export_workload
    from export.runner.running import run_bundle

    _skip_unless_the_host_runs_direct_bf16_convs()
    path = _path(tmp_path, model)
    outputs = {}
    for on in (True, False):
        monkeypatch.setattr(module, switch, on)
        report = export_workload(path, "cpu", tmp_path / f"b{on}", precision="bf16", layers=False)
        assert report.verified, report.verdict
        funcs = [f for o in report.built.outcomes for f in o.task.funcs]
        assert any(marker in f for f in funcs) == on, (on, funcs)
        outputs[on] = run_bundle(tmp_path / f"b{on}")[1][0]
    return outputs


@pytest.mark.parametrize("flat", [False, True], ids=["rows", "flat"])
def test_a_padded_kernel_reading_bits_pads_them_without_rounding(flat):
    from tvm import te

    from explorer.passes.bf16_conv_nhwc import conv2d_nhwc_bf16, conv2d_nhwc_bf16_flat, pack_nhwc_weights

    x = te.placeholder((1, 7, 7, 32), "uint16", "x")
    w = te.placeholder(pack_nhwc_weights(np.zeros((32, 32, 3, 3), np.float32), 32).shape, "uint16", "w")
    y = (conv2d_nhwc_bf16_flat(x, w, padding=(1, 1), out_hw=(7, 7)) if flat
         else conv2d_nhwc_bf16(x, w, padding=(1, 1), out_hw=(7, 7)))
    text = te.create_prim_func([x, w, y]).script()
    packing = text.split(f'T.sblock("{INPUT_NAME}")')[1].split("T.sblock(")[0]
    assert "T.if_then_else" in packing and "reinterpret" not in packing  # the border's zeros, the bits as they are


def _stem(size: int = 32, *, after: str = "residual") -> onnx.ModelProto:
    """ResNet's stem in small: 7x7 stride-2 conv 3 -> 64 + bias + relu, 3x3 stride-2 max pool, then
    ``after`` it: "residual" a 3x3 conv + bias with the pool's output added and relu (ResNet); "conv" the
    3x3 conv + bias alone; "fp32_conv" a 1x1 64 -> 16 conv (K 64: kept fp32); "" nothing (the pool's
    output is the model's)."""
    rng = np.random.default_rng(11)
    inits = [numpy_helper.from_array(rng.normal(0, 0.1, (64, 3, 7, 7)).astype("float32"), "ws"),
             numpy_helper.from_array(rng.normal(0, 0.1, 64).astype("float32"), "bs"),
             numpy_helper.from_array(rng.normal(0, 0.05, (64, 64, 3, 3)).astype("float32"), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.1, 64).astype("float32"), "b1"),
             numpy_helper.from_array(rng.normal(0, 0.1, (16, 64, 1, 1)).astype("float32"), "w2")]
    nodes = [helper.make_node("Conv", ["x", "ws", "bs"], ["s"], strides=[2, 2], pads=[3, 3, 3, 3]),
             helper.make_node("Relu", ["s"], ["sr"]),
             helper.make_node("MaxPool", ["sr"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])]
    out, channels, name = size // 4, 64, "y"
    if after == "residual":
        nodes += [helper.make_node("Conv", ["p", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
                  helper.make_node("Add", ["c", "p"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    elif after == "conv":
        nodes += [helper.make_node("Conv", ["p", "w1", "b1"], ["y"], pads=[1, 1, 1, 1])]
    elif after == "fp32_conv":
        nodes, channels = nodes + [helper.make_node("Conv", ["p", "w2"], ["y"])], 16
    else:
        name = "p"
    graph = helper.make_graph(nodes, "stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, channels, out, out])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("target", TARGETS)
def test_a_max_pool_read_by_a_convolution_reads_its_producers_bits(tmp_path, monkeypatch, target):
    from explorer.passes import bf16_conv_bits

    kernels = _kernels(_path(tmp_path, _stem()), target)
    stem = [n for n in kernels if "conv2d_nhwc_bf16" in n and BITS_NAME in n]
    pool = [n for n in kernels if POOL_NAME in n]
    assert len(stem) == 1 and len(pool) == 1 and "relu" in stem[0], sorted(kernels)  # the rounding fused: no kernel
    assert _output_dtype(kernels[stem[0]]) == "uint16"  # conv + bias + relu writes the bits
    head = kernels[pool[0]].split("\n")[4]  # the pool reads the bits, writes fp32
    assert head.index('"uint16"') < head.index('"float32"'), head
    monkeypatch.setattr(bf16_conv_bits, "POOL_READS_BITS", False)  # as before: both fp32
    before = _kernels(_path(tmp_path, _stem()), target)
    assert not any(BITS_NAME in n or POOL_NAME in n for n in before), sorted(before)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("after", ["", "fp32_conv"], ids=["model_output", "fp32_conv"])
def test_a_max_pool_no_bf16_convolution_reads_keeps_its_fp32_input(tmp_path, after, target):
    """The pool's output a model output (it would move by half a bf16 step), or read by a convolution
    kept fp32 (K 64: nothing rounds the pool's values there): the pool and its producer stay fp32."""
    kernels = _kernels(_path(tmp_path, _stem(after=after)), target)
    assert not any(BITS_NAME in n or POOL_NAME in n for n in kernels), sorted(kernels)


def test_the_pool_of_bits_is_the_max_pool_of_their_values():
    from tvm import te

    from explorer.passes.bf16_conv_bits import _max_pool_bits

    bits = te.placeholder((1, 9, 9, 16), "uint16", "bits")
    lib = tvm.compile(te.create_prim_func([bits, _max_pool_bits(bits, [3, 3], [2, 2], [1, 1], [1, 1, 1, 1])]), target="llvm")
    values = np.random.default_rng(2).standard_normal((1, 9, 9, 16)).astype("float32")
    b = (values.view(np.uint32) >> 16).astype(np.uint16)  # (truncated: any bf16 values)
    wide = (b.astype(np.uint32) << 16).view(np.float32)
    padded = np.pad(wide, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=-np.inf)
    expected = np.max([padded[:, i:i + 9:2, j:j + 9:2] for i in range(3) for j in range(3)], axis=0)
    out = tvm.runtime.tensor(np.zeros((1, 5, 5, 16), "float32"))
    lib(tvm.runtime.tensor(b), out)
    assert np.array_equal(out.numpy(), expected)


def test_a_stem_whose_pool_reads_bits_verifies_and_moves_the_output_by_rounding_alone(tmp_path, monkeypatch):
    from explorer.passes import bf16_conv_bits

    outputs = _outputs_on_and_off(tmp_path, monkeypatch, _stem(), bf16_conv_bits, "POOL_READS_BITS", POOL_NAME)
    # the residual adds the pool's values rounded to bf16: at most half a bf16 step (2^-9) of them
    assert np.abs(outputs[True] - outputs[False]).max() <= 2 ** -8 * np.abs(outputs[False]).max()



def test_a_pool_of_bits_read_by_a_bf16_convolution_alone_gives_the_same_numbers(tmp_path, monkeypatch):
    """The maximum of rounded values is the rounded maximum: with no residual add the output is the same."""
    from explorer.passes import bf16_conv_bits

    outputs = _outputs_on_and_off(tmp_path, monkeypatch, _stem(after="conv"), bf16_conv_bits, "POOL_READS_BITS",
                                  POOL_NAME)
    assert np.array_equal(outputs[True], outputs[False])


@pytest.mark.parametrize("model", [_basic_block, lambda: _block(hidden=144, project=32)], ids=["padded", "as_is"])
def test_a_vector_kernel_reading_bits_is_scheduled_and_compiles_to_vdpbf16ps(tmp_path, model):
    """Compile only, for the Zen 5 (any host): the direct kernel whose input is its producer's bits, padded by a
    packing block that only pads (3x3) or read as it is (1x1, channels in pairs), takes the vector rule."""
    from explorer.precision import for_precision
    from explorer.schedule.defaults import default_schedule

    target = parse_target(TARGETS[1])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bf16_conv, "vdpbf16ps_pays", lambda _target: True)
        workload, _ = for_precision(load_workload(_path(tmp_path, model())), target, "bf16")
        funcs = {gv.name_hint: f for gv, f in workload.fused_module().functions_items()
                 if isinstance(f, tvm.tirx.PrimFunc) and "conv2d_nhwc_bf16" in gv.name_hint}
    readers = {n: f for n, f in funcs.items() if str(f.params[0].dtype) == "uint16"}  # its input: the bits
    assert len(readers) == 1, sorted(funcs)
    (func,) = readers.values()
    scheduled, choice = default_schedule(func, target.cpu_spec())
    packing = [part for step in choice.steps for part in step.split("; ") if part.startswith(INPUT_NAME)]
    assert bool(packing) == (model is _basic_block), choice.steps  # 3x3: a packing block that pads; 1x1: none
    assert all("padded" in part and "rounded" not in part for part in packing), choice.steps  # the bits: padded only
    asm = tvm.compile(tvm.IRModule({"main": scheduled}), target=target.tvm()).mod.inspect_source("asm")
    assert "vdpbf16ps" in asm


def _two_blocks(channels: int = 64, size: int = 14, *, tail: str = "") -> onnx.ModelProto:
    """A 3x3 convolution + relu (a stem), then two of ResNet's basic blocks in a row: each block's input is read by
    its first convolution and by its residual add; ``tail``: "output" the first block's output is an output of the
    model too, "fp32_conv" a 1x1 convolution kept fp32 (K 64) reads it as well (the second output)."""
    rng = np.random.default_rng(9)
    inits = [numpy_helper.from_array(rng.normal(0, 0.05, (channels, channels, 3, 3)).astype("float32"), "ws")]
    nodes = [helper.make_node("Conv", ["x", "ws"], ["stem"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["stem"], ["h"])]
    x = "h"
    for b in range(2):
        names = [f"w{b}1", f"b{b}1", f"w{b}2", f"b{b}2"]
        inits += [numpy_helper.from_array(rng.normal(0, 0.05, (channels, channels, 3, 3)).astype("float32"), names[0]),
                  numpy_helper.from_array(rng.normal(0, 0.1, channels).astype("float32"), names[1]),
                  numpy_helper.from_array(rng.normal(0, 0.05, (channels, channels, 3, 3)).astype("float32"), names[2]),
                  numpy_helper.from_array(rng.normal(0, 0.1, channels).astype("float32"), names[3])]
        nodes += [helper.make_node("Conv", [x, names[0], names[1]], [f"c{b}1"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{b}1"], [f"r{b}1"]),
                  helper.make_node("Conv", [f"r{b}1", names[2], names[3]], [f"c{b}2"], pads=[1, 1, 1, 1]),
                  helper.make_node("Add", [f"c{b}2", x], [f"s{b}"]), helper.make_node("Relu", [f"s{b}"], [f"y{b}"])]
        x = f"y{b}"
    shape = [1, channels, size, size]
    outputs = [helper.make_tensor_value_info("y1", TensorProto.FLOAT, shape)]
    if tail == "output":
        outputs.append(helper.make_tensor_value_info("y0", TensorProto.FLOAT, shape))
    elif tail == "fp32_conv":
        inits.append(numpy_helper.from_array(rng.normal(0, 0.1, (16, channels, 1, 1)).astype("float32"), "wd"))
        nodes.append(helper.make_node("Conv", ["y0", "wd"], ["d"]))
        outputs.append(helper.make_tensor_value_info("d", TensorProto.FLOAT, [1, 16, size, size]))
    graph = helper.make_graph(nodes, "blocks", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)], outputs,
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("target", TARGETS)
def test_a_block_output_read_by_a_convolution_and_a_residual_add_is_written_as_bits(tmp_path, monkeypatch, target):
    """ResNet's block output (:data:`SHARED_BITS` on): the next block's first convolution reads the bits as its
    producer's (it only pads them), its residual add widens them in the second convolution's epilogue; nothing
    writes it in fp32."""
    from explorer.passes import bf16_conv_bits

    monkeypatch.setattr(bf16_conv_bits, "SHARED_BITS", True)
    kernels = _kernels(_path(tmp_path, _two_blocks()), target)
    convs = {n: s for n, s in kernels.items() if "conv2d_nhwc_bf16" in n}
    calls = [line for line in _main(tmp_path, target) if "R.call_tir(" in line]
    assert len(calls) == 5 + 1 and all("conv2d_nhwc_bf16" in c for c in calls[:5]), calls  # (then the transpose)
    # the stem, both first convolutions and the first block's last write bits; the last block's writes fp32
    assert [c.endswith('dtype="uint16"))') for c in calls[:5]] == [True] * 4 + [False], calls
    widening = [n for n in convs if WIDEN_NAME in n]
    assert len(widening) == 2, sorted(kernels)  # each block's last convolution widens its residual in its epilogue
    assert not any(n.startswith((BITS_NAME, WIDEN_NAME)) for n in kernels), sorted(kernels)  # fused: no kernel alone
    for name in widening:  # its input, its packed weights and its residual as bits
        head = convs[name].split("\n")[4]
        assert head.count('"uint16"') >= 3 + (_output_dtype(convs[name]) == "uint16"), head


def _main(tmp_path, target: str) -> list[str]:
    """The lines of the fused model's ``main`` (compile only, as :func:`_kernels` builds it)."""
    from explorer.precision import for_precision

    with pytest.MonkeyPatch.context() as mp:
        if target != TARGETS[0]:
            mp.setattr(bf16_conv, "vdpbf16ps_pays", lambda _target: True)
        workload, _ = for_precision(load_workload(str(tmp_path / "block.onnx")), parse_target(target), "bf16")
        return [line.strip() for line in workload.fused_module()["main"].script().splitlines()]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("tail", ["output", "fp32_conv"])
def test_a_block_output_with_another_reader_stays_fp32(tmp_path, monkeypatch, target, tail):
    """A block output that is an output of the model too (its values would move by the rounding), or that a
    convolution kept fp32 reads (it would need the fp32 values): written in fp32 even with :data:`SHARED_BITS` on."""
    from explorer.passes import bf16_conv_bits

    monkeypatch.setattr(bf16_conv_bits, "SHARED_BITS", True)
    _path(tmp_path, _two_blocks(tail=tail))
    calls = [line for line in _main(tmp_path, target) if "R.call_tir(" in line and "conv2d_nhwc_bf16" in line]
    assert len(calls) == 5 and calls[2].endswith('dtype="float32"))'), calls  # the first block's output: fp32
    assert calls[0].endswith('dtype="uint16"))'), calls  # (the stem's output, the first block's input: bits)


def test_block_outputs_as_bits_move_the_output_by_the_rounding_alone(tmp_path, monkeypatch):
    from explorer.passes import bf16_conv_bits

    outputs = _outputs_on_and_off(tmp_path, monkeypatch, _two_blocks(), bf16_conv_bits, "SHARED_BITS", WIDEN_NAME)
    # the residual add reads the block's output rounded to bf16: at most half a bf16 step (2^-9) of each value,
    # carried through one more block
    assert 0 < np.abs(outputs[True] - outputs[False]).max() <= 2 ** -6 * np.abs(outputs[False]).max()
