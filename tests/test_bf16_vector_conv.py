"""The direct NHWC bf16 convolution on ``vdpbf16ps`` alone (AVX512-BF16 without AMX: Zen 4/5,
Cooper Lake): the routing of :func:`explorer.passes.bf16_conv.bf16_convs` with ``vectors``, the tile
:func:`explorer.schedule.defaults.bf16_vector_conv.vector_tile` picks, the kernel built for named CPUs
(compile only, any host), its numbers where the host has AVX512-BF16, a model exported at bf16 where the
host's measured vdpbf16ps rate pays, and its default reopened from a steps file in a fresh process."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
import tvm
import tvm_ffi
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import explorer.passes.bf16_conv as bf16_conv
from explorer.passes.bf16_conv import MIN_REDUCTION, MIN_REDUCTION_DIRECT, bf16_convs
from explorer.passes.bf16_conv_nhwc import vector_direct_fits
from explorer.passes.bf16_dense import bf16_round
from explorer.schedule.bf16_dot import PANEL, VECTOR_CONV_ROWS, Bf16Dot
from explorer.schedule.bf16_intrin import is_name, register_for_trace
from explorer.schedule.defaults import default_schedule
from explorer.schedule.defaults.analysis import NotApplicable
from explorer.schedule.defaults.bf16_vector_conv import SPARE_REGISTERS, vector_tile
from explorer.target import host_target, parse_target
from explorer.workload.loaded import Workload
from tests.cpu_marks import HAS_AMX, HAS_BF16, NEEDS_BF16
from tests.direct_bf16_conv import conv_out_size, reference_conv_nhwc

ROOT = Path(__file__).resolve().parents[1]
ZEN = ("cpu:znver5", "cpu:znver4")

# n, c, h, w, oc, kernel, stride, pad: ResNet's 3x3 at 56, its strided 3x3 onto 28, a strided 1x1 onto
# 14, 16 outputs (one panel), a 7x7 map (7-pixel rows), the 7x7 stride-2 stem (3 channels padded to 4)
CASES = {"3x3-s1": (1, 64, 56, 56, 64, 3, 1, 1), "3x3-s2": (1, 64, 56, 56, 128, 3, 2, 1),
         "1x1-s2": (1, 128, 28, 28, 256, 1, 2, 0), "one-panel": (1, 64, 28, 28, 16, 3, 1, 1),
         "7x7-map": (1, 512, 7, 7, 512, 3, 1, 1), "stem": (1, 3, 224, 224, 64, 7, 2, 3),
         "vit-patch": (1, 3, 224, 224, 32, 16, 16, 0)}
# the intrinsic of each one's default on 32 vector registers: pixels x output channels a tile
TILE_NAMES = {"3x3-s1": "14x32_w6", "3x3-s2": "14x32_w6_s2", "1x1-s2": "14x32_w6_s2", "one-panel": "14x16_w6",
              "7x7-map": "7x32_w6_pf2", "stem": "14x32_w6_s2", "vit-patch": "14x32_w6_s16"}
# the weights-heavy cases (output channels outermost): each call prefetches its next block's panels, 2 on
AHEAD = {CASES["7x7-map"]: 2}
# a tolerance of bf16 products with fp32 sums against the float64 sum of the same bf16-rounded values
# (measured here: 1.6e-7 to 1.4e-6 of max |ref|)
EXACT = 1e-5


def _ceil(v: int, m: int) -> int:
    return -(-v // m) * m


def conv_module(n, c, h, w, oc, k, s, p, *, dilation: int = 1, seed: int = 0) -> tuple[tvm.IRModule, np.ndarray]:
    """One NCHW convolution by constant OIHW weights as a Relax module, and its weights."""
    wt = np.random.default_rng(seed).standard_normal((oc, c, k, k)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((n, c, h, w), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.conv2d(x, relax.const(wt), strides=[s, s], padding=[p, p, p, p],
                                                  dilation=[dilation, dilation]))
        bb.emit_func_output(y)
    return bb.get(), wt


def _prim_funcs(mod: tvm.IRModule) -> dict[str, tvm.tirx.PrimFunc]:
    return {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}


def vector_conv_func(shape) -> tvm.tirx.PrimFunc:
    """The kernel ``bf16_convs(..., vectors=True)`` writes for the convolution ``shape`` (CASES' order)."""
    mod, converted, kept = bf16_convs(conv_module(*shape)[0], vectors=True)
    funcs = _prim_funcs(mod)
    assert converted == 1 and list(funcs) == ["conv2d_nhwc_bf16"], (converted, kept, list(funcs))
    return funcs["conv2d_nhwc_bf16"]


def _expected_step(shape, cpu) -> str:
    """The head of the default's step: the intrinsic named by the tile :func:`vector_tile` picks (and
    the prefetch of :data:`AHEAD`, where each of the ``cpu``'s cores has two blocks of output channels)."""
    n, c, h, w, oc, k, s, p = shape
    rows, panels = vector_tile(conv_out_size(w, k, s, p), _ceil(oc, PANEL), cpu)
    ahead = AHEAD.get(tuple(shape), 0) if _ceil(oc, PANEL) // PANEL // panels >= 2 * cpu.cores else 0
    name = Bf16Dot(rows, panels, weights_rank=6, stride=s, ahead=ahead).name
    return f"conv2d_nhwc_bf16: {name} (vdpbf16ps, direct NHWC, no im2col"


def _asm(func: tvm.tirx.PrimFunc, target) -> str:
    return tvm.compile(tvm.IRModule({"main": func}), target=target.tvm()).mod.inspect_source("asm")


# 1. Decisions (no host needed)

# (width, output channels) -> (rows, panels) on 32 vector registers (AVX-512) and on 16 (a Haswell's)
TILES_32 = {(56, 64): (14, 2), (28, 128): (14, 2), (14, 256): (14, 2), (112, 64): (14, 2), (7, 512): (7, 2),
            (7, 48): (7, 3), (8, 16): (8, 1), (16, 64): (16, 1), (6, 96): (6, 3), (2, 512): (2, 8)}
TILES_16 = {(56, 64): (14, 1), (28, 128): (14, 1), (7, 512): (7, 1), (16, 64): (8, 1), (6, 96): (6, 2),
            (4, 64): (4, 2), (2, 512): (2, 4)}


@pytest.mark.parametrize("spec, table", [("cpu:znver5", TILES_32), ("cpu:haswell", TILES_16)],
                         ids=["32-regs", "16-regs"])
def test_the_vector_tile_holds_the_most_sums_the_registers_allow_rows_dividing_the_width(spec, table):
    cpu = parse_target(spec).cpu_spec()
    assert cpu.registers == (32 if spec == "cpu:znver5" else 16)
    assert {key: vector_tile(*key, cpu) for key in table} == table
    for width in (w for w in range(2, 65) if vector_direct_fits(w, (1, 1))):  # the tile fits, none holds more sums
        for channels in (16, 48, 64, 96, 256, 512):
            rows, panels = vector_tile(width, channels, cpu)
            count = channels // PANEL
            assert rows in VECTOR_CONV_ROWS and width % rows == 0 and count % panels == 0
            assert rows * panels + panels + SPARE_REGISTERS <= cpu.registers
            best = max(r * p for r in VECTOR_CONV_ROWS if width % r == 0 for p in range(1, count + 1)
                       if count % p == 0 and r * p + p + SPARE_REGISTERS <= cpu.registers)
            assert rows * panels == best, (width, channels, rows, panels)


def test_ties_go_to_fewer_panels_and_widths_no_row_count_divides_have_no_tile():
    cpu = parse_target("cpu:znver5").cpu_spec()
    assert vector_tile(16, 64, cpu) == (16, 1)  # 16 x 1, 8 x 2, 4 x 4: 16 sums each, the fewest weight rows
    for width in (1, 17, 19, 23):  # one pixel, primes above the largest row count
        with pytest.raises(NotApplicable, match=f"no tile of 2-16 pixels divides output rows of {width}"):
            vector_tile(width, 64, cpu)


def test_the_direct_vector_kernel_fits_undilated_convolutions_whose_rows_a_tile_divides():
    assert vector_direct_fits(56, (1, 1)) and vector_direct_fits(7, (1, 1)) and vector_direct_fits(34, (1, 1))
    assert vector_direct_fits(2, (1, 1)) and vector_direct_fits(112, [1, 1])
    assert not vector_direct_fits(56, (2, 2)) and not vector_direct_fits(56, (1, 2))  # dilated
    assert not vector_direct_fits(1, (1, 1)) and not vector_direct_fits(17, (1, 1))  # no row count divides
    cpu = parse_target("cpu:znver5").cpu_spec()
    for width in range(1, 80):  # the pass routes a convolution direct exactly where the schedule has a tile
        try:
            vector_tile(width, 64, cpu)
            tiled = True
        except NotApplicable:
            tiled = False
        assert vector_direct_fits(width, (1, 1)) == tiled, width


def test_vectors_route_fitting_convolutions_direct_in_nhwc_and_the_rest_as_before():
    def routed(shape, **kw):
        mod, converted, kept = bf16_convs(conv_module(*shape, **kw)[0], vectors=True)
        return sorted(_prim_funcs(mod)), converted, kept

    assert routed(CASES["3x3-s1"]) == (["conv2d_nhwc_bf16"], 1, ())
    assert routed(CASES["stem"]) == (["conv2d_nhwc_bf16"], 1, ())  # K = 147: over the direct cut
    # K = 288: direct, where the im2col path would keep it fp32 (under its cut of 512)
    assert routed((1, 32, 28, 28, 64, 3, 1, 1)) == (["conv2d_nhwc_bf16"], 1, ())
    # dilated, and a 17-wide map: the im2col path at its own cut
    assert routed((1, 64, 28, 28, 64, 3, 1, 2), dilation=2) == (["conv2d_bf16"], 1, ())
    assert routed((1, 64, 17, 17, 64, 3, 1, 1)) == (["conv2d_bf16"], 1, ())
    assert routed((1, 32, 17, 17, 64, 3, 1, 1)) == (
        [], 0, (f"32x3x3 -> 64: reduction K = 288 < {MIN_REDUCTION}, too short for bf16 to pay",))
    # under the direct cut: fp32 with its reason, never a split product (K x C_out = 24576, AMX would split it)
    assert routed((1, 64, 14, 14, 384, 1, 1, 0)) == (
        [], 0, (f"64x1x1 -> 384: reduction K = 64 < {MIN_REDUCTION_DIRECT}, too short for bf16 to pay",))


def test_without_the_switch_every_convolution_takes_the_im2col_path(monkeypatch):
    monkeypatch.setattr(bf16_conv, "VECTOR_DIRECT_ENABLED", False)
    mod, converted, _ = bf16_convs(conv_module(*CASES["3x3-s1"])[0], vectors=True)
    assert converted == 1 and sorted(_prim_funcs(mod)) == ["conv2d_bf16"]


def test_the_direct_kernel_pads_input_channels_to_pairs_only():
    stem = vector_conv_func(CASES["stem"])  # 3 -> 4 channels (the AMX kernel pads them the same)
    assert [int(v) for v in stem.params[1].shape] == [4, 7, 7, 2, 16, 2]
    odd = vector_conv_func((1, 24, 14, 14, 32, 3, 1, 1))  # 24 channels: 12 pairs (AMX pads them to 32)
    assert [int(v) for v in odd.params[1].shape] == [2, 3, 3, 12, 16, 2]


# 2. Compile only, any x86 host

@pytest.mark.parametrize("spec", ZEN)
@pytest.mark.parametrize("case", list(CASES))
def test_zen_builds_the_vector_direct_tile_with_broadcast_pairs_and_no_amx(spec, case):
    target = parse_target(spec)
    cpu = replace(target.cpu_spec(), cores=2)  # (TILE_NAMES: two cores, as the prefetch's rule reads them)
    func, choice = default_schedule(vector_conv_func(CASES[case]), cpu)
    assert choice.rule == "full" and choice.fallback_reason == "", choice
    assert choice.steps[0].startswith(f"conv2d_nhwc_bf16: schedx_dot_bf16_avx512bf16_{TILE_NAMES[case]} (vdpbf16ps, "
                                      "direct NHWC, no im2col"), choice.steps
    assert choice.steps[0].startswith(_expected_step(CASES[case], cpu))
    asm = _asm(func, target)
    assert "vdpbf16ps" in asm and "tdpbf16ps" not in asm and "tileloadd" not in asm
    assert "vbroadcastss" in asm or re.search(r"vdpbf16ps\s[^\n]*\{1to16\}", asm)  # the input pair, broadcast


@pytest.mark.parametrize("shape", [v for k, v in CASES.items() if k != "vit-patch"],
                         ids=[k for k in CASES if k != "vit-patch"])  # (a 16-wide kernel row of 3 channels: no AMX fit)
def test_sapphirerapids_keeps_the_amx_tile_for_the_same_convolutions(shape):
    target = parse_target("cpu:sapphirerapids")
    mod, converted, _ = bf16_convs(conv_module(*shape)[0], amx=True)
    funcs = _prim_funcs(mod)
    assert converted == 1 and list(funcs) == ["conv2d_nhwc_bf16"], list(funcs)
    func, choice = default_schedule(funcs["conv2d_nhwc_bf16"], target.cpu_spec())
    assert choice.rule == "full" and not choice.fallback_reason and "tdpbf16ps" in choice.steps[0], choice
    assert "avx512bf16" not in choice.steps[0]
    assert "tdpbf16ps" in _asm(func, target)


def _zmm_stores(asm: str) -> int:
    return len(re.findall(r"vmov\w+\s+%zmm\d+, [^%\n]*\(", asm))


def test_weights_heavy_tiles_prefetch_the_next_blocks_panels_and_keep_their_sums_in_registers(monkeypatch):
    """ResNet's 3x3 512 -> 512 @7 (output channels outermost): each call asks for the same line of the next
    block's two panels with prefetcht1, and the tile's sums stay in registers across the reduction, as without
    the prefetch (LLVM's own llvm.prefetch, whose pointer argument alias analysis could not tell from the
    sums', had LICM store every sum after each vdpbf16ps: 3x slower). Lighter kernels prefetch nothing."""
    import explorer.schedule.defaults.bf16_vector_conv as vector_conv

    target = parse_target("cpu:znver5")
    cpu = replace(target.cpu_spec(), cores=2)
    func, choice = default_schedule(vector_conv_func(CASES["7x7-map"]), cpu)
    assert "_7x32_w6_pf2 " in choice.steps[0], choice.steps
    prefetched = _asm(func, target)
    # each prefetch's address is a weight load's (same registers) two panels on: 2 x 3 x 3 x 256 pairs x 64 bytes
    fetched = re.findall(r"leaq\s+(-?\d*)\((%\w+),(%\w+)\), (%\w+)\s*\n\s*#APP\s*\n\s*prefetcht1\s+\(\4\)", prefetched)
    loads = {(int(off or 0), base, index) for off, base, index in
             re.findall(r"vmov[au]ps\s+(-?\d*)\((%\w+),(%\w+)\), %zmm", prefetched)}
    assert len(fetched) >= 2 and all((int(off or 0) - 2 * 147456, base, index) in loads
                                     for off, base, index, _ in fetched), (fetched, loads)
    monkeypatch.setattr(vector_conv, "PREFETCH_NEXT_PANELS", False)
    plain_func, plain_choice = default_schedule(vector_conv_func(CASES["7x7-map"]), cpu)
    assert "_7x32_w6 " in plain_choice.steps[0], plain_choice.steps
    plain = _asm(plain_func, target)
    assert "prefetch" not in plain
    assert _zmm_stores(prefetched) == _zmm_stores(plain) > 0  # the epilogue's stores alone, in both
    assert "vdpbf16ps" in prefetched and "tdpbf16ps" not in prefetched
    monkeypatch.undo()
    light, light_choice = default_schedule(vector_conv_func(CASES["3x3-s1"]), cpu)
    assert "_pf" not in light_choice.steps[0] and "prefetch" not in _asm(light, target)


def test_a_kernel_prefetches_only_where_each_core_has_a_next_block_of_its_own():
    """16 blocks of 32 output channels (ResNet's layer4) on 2 or 8 cores: two or more a core; on 9 cores, or a
    weights-heavy kernel of one block (a 6x6 map of 64 -> 64), a core's block has no next one of its own."""
    from explorer.schedule.defaults.bf16_vector_conv import prefetches

    cpu = parse_target("cpu:znver5").cpu_spec()
    assert prefetches(16, replace(cpu, cores=2)) and prefetches(16, replace(cpu, cores=8))
    assert not prefetches(16, replace(cpu, cores=9)) and not prefetches(1, replace(cpu, cores=1))
    one_block, choice = default_schedule(vector_conv_func((1, 64, 6, 6, 64, 3, 1, 1)), replace(cpu, cores=2))
    assert "output channels outermost" in choice.steps[0] and "_pf" not in choice.steps[0], choice.steps
    many, choice = default_schedule(vector_conv_func(CASES["7x7-map"]), replace(cpu, cores=9))
    assert "output channels outermost" in choice.steps[0] and "_pf" not in choice.steps[0], choice.steps


@pytest.mark.parametrize("dot", [Bf16Dot(14, 2, 6), Bf16Dot(14, 2, 6, 2), Bf16Dot(14, 1, 6), Bf16Dot(7, 3, 6, 2),
                                 Bf16Dot(16, 1, 6), Bf16Dot(4, 4, 6), Bf16Dot(14, 2, 6, 16), Bf16Dot(2, 10, 6, 32),
                                 Bf16Dot(13, 3, 6, 11), Bf16Dot(7, 2, 6, ahead=2), Bf16Dot(7, 2, 6, 2, ahead=2)],
                         ids=lambda d: d.name)
def test_vector_conv_intrinsic_names_register_again_from_a_trace(dot):
    from tvm.s_tir import TensorIntrin

    assert is_name(dot.name)
    if TensorIntrin.get(dot.name, allow_missing=True) is not None:  # (a build in this process registered it)
        pytest.skip(f"{dot.name} is registered already in this process: the replay in a fresh one covers it")
    register_for_trace(f'["Tensorize", [], {{"intrin": "{dot.name}"}}]')  # a trace's text names it
    intrin = TensorIntrin.get(dot.name)
    assert intrin is not None and "schedx_dpbf16ps_512" in intrin.impl.script()
    assert ("schedx_prefetch_l2" in intrin.impl.script()) == bool(dot.ahead)
    a, b, c = (int(v) for v in intrin.desc.params[0].shape), intrin.desc.params[1].shape, intrin.desc.params[2].shape
    assert tuple(a) == ((dot.rows - 1) * dot.stride + 1, 2)  # every stride-th pixel of a row, one channel pair
    assert len(b) == 6 and tuple(int(v) for v in c) == (dot.rows, PANEL * dot.panels)  # a conv's packed weights
    assert not is_name(dot.name.replace("_w6", "_w3")) and not is_name(dot.name + "_s1")  # defaults not spelt out


@pytest.mark.parametrize("name", ["schedx_dot_bf16_avx512bf16_8x0_w6", "schedx_dot_bf16_avx512bf16_0x16_w6",
                                  "schedx_dot_bf16_avx512bf16_8x16_w2", "schedx_dot_bf16_avx512bf16_8x16_w6_s0",
                                  "schedx_dot_bf16_avx512bf16_8x24_w6", "schedx_dot_bf16_avx512bf16_8x16_w6_s02",
                                  "schedx_dot_bf16_avx512bf16_7x32_w6_pf0", "schedx_dot_bf16_avx512bf16_7x32_w6_pf02",
                                  "schedx_dot_bf16_avx512bf16_7x32_w6_pf2_s2"])
def test_names_no_call_has_are_refused(name):
    """A steps file may name only an intrinsic that exists: no rows, no panels, a weights rank under 3, a zero
    stride, lanes not whole panels, a stride or prefetch spelt with a leading zero, a prefetch of none or
    fields out of order is no name (R4 found the first four
    accepted, then registered as a bogus description)."""
    assert not is_name(name)


@pytest.mark.parametrize("key", [(2, 512), (20, 96), (5, 80)], ids=["2x2-map-512", "20-wide-96", "5x5-map-80"])
def test_every_tile_the_rule_picks_has_a_name_a_trace_can_register(key):
    """A tile of more than 4 panels (2-pixel rows of 512 channels: 10 panels) has a name a steps file and a
    trace's replay register (the pattern took 16-64 lanes only: such a default built, but did not replay)."""
    rows, panels = vector_tile(*key, parse_target("cpu:znver5").cpu_spec())
    assert is_name(Bf16Dot(rows, panels, weights_rank=6).name)


# 3. Numeric, where the host has AVX512-BF16

def _host_cpu():
    """This machine's CPU spec with vdpbf16ps as its bf16 instruction (an AMX CPU has it too)."""
    return replace(host_target().cpu_spec(), bf16_dot="avx512bf16")


@NEEDS_BF16
@pytest.mark.parametrize("shape", [*CASES.values(), (1, 64, 28, 28, 40, 3, 1, 1)], ids=[*CASES, "40-outputs"])
def test_the_rewritten_module_computes_the_bf16_convolution_with_fp32_sums(shape):
    """The whole module the pass writes (transposes, packed weights, the padded channels sliced off),
    its kernel under the vector default for this machine, against numpy's float64 sums of the same
    bf16-rounded input and weights."""
    n, c, h, w, oc, k, s, p = shape
    host = host_target()
    mod, wt = conv_module(*shape)
    mod, converted, _ = bf16_convs(mod, vectors=True)
    gv = mod.get_global_var("conv2d_nhwc_bf16")
    func, choice = default_schedule(mod[gv], _host_cpu())
    assert choice.steps[0].startswith(_expected_step(shape, _host_cpu())), choice.steps
    mod[gv] = func.without_attr("global_symbol").with_attr("tirx.is_scheduled", True)
    vm = relax.VirtualMachine(tvm.compile(mod, target=host.tvm()), tvm.cpu())
    x = np.random.default_rng(1).standard_normal((n, c, h, w)).astype("float32")
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    exact = reference_conv_nhwc(bf16_round(x).transpose(0, 2, 3, 1), bf16_round(wt), s, p).transpose(0, 3, 1, 2)
    assert got.shape == exact.shape
    assert np.abs(got - exact).max() <= EXACT * np.abs(exact).max()


def _residual_block(side: int = 28, channels: int = 64) -> tuple[tvm.IRModule, np.ndarray, np.ndarray]:
    """relu(conv3x3(x) + bias + x) on an NHWC input (transposed to NCHW and back in the graph, so that
    the transposes cancel and the residual reaches the kernel NHWC), its weights and bias."""
    rng = np.random.default_rng(2)
    wt = (0.1 * rng.standard_normal((channels, channels, 3, 3))).astype("float32")
    bias = rng.standard_normal(channels).astype("float32")
    bb = relax.BlockBuilder()
    xn = relax.Var("x", relax.TensorType((1, side, side, channels), "float32"))
    with bb.function("main", [xn]):
        with bb.dataflow():
            x = bb.emit(relax.op.permute_dims(xn, [0, 3, 1, 2]))
            y = bb.emit(relax.op.nn.conv2d(x, relax.const(wt), padding=[1, 1, 1, 1]))
            y = bb.emit(relax.op.add(y, relax.const(bias.reshape(1, channels, 1, 1))))
            y = bb.emit(relax.op.nn.relu(relax.op.add(y, x)))
            out = bb.emit_output(relax.op.permute_dims(y, [0, 2, 3, 1]))
        bb.emit_func_output(out)
    return bb.get(), wt, bias


@NEEDS_BF16
@pytest.mark.skipif(HAS_AMX, reason="an AMX CPU's default schedules tile the direct kernel on AMX (the vector tile "
                                    "is for CPUs without tiles): the build cannot pick it here")
def test_bias_residual_and_relu_run_per_tile_in_the_vector_kernel():
    from export.build import build

    mod, wt, bias = _residual_block()
    mod, converted, _ = bf16_convs(mod, vectors=True)
    workload = Workload("block", "model", "block", mod, (("x", (1, 28, 28, 64), "float32"),),
                        (("y", (1, 28, 28, 64), "float32"),))
    [task] = workload.tasks()  # one kernel: the transposes cancelled, the epilogue fused in
    assert "conv2d_nhwc_bf16_add_add1_relu" in task.name, task.name
    _, choice = default_schedule(task.mod["main"], host_target().cpu_spec())
    assert "avx512bf16_14x32_w6 (vdpbf16ps" in choice.steps[0] and "epilogue per tile" in choice.steps[0], choice
    built = build(workload, host_target())  # (the module is bf16 already: built as given)
    x = np.random.default_rng(3).standard_normal((1, 28, 28, 64)).astype("float32")
    vm = relax.VirtualMachine(built.executable, tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x), *[tvm.runtime.tensor(v) for v in built.param_values]).numpy()
    exact = np.maximum(reference_conv_nhwc(bf16_round(x), bf16_round(wt), 1, 1) + bias + x, 0)
    assert np.abs(got - exact).max() <= EXACT * np.abs(exact).max()


# 4. An ONNX model exported at bf16 on this machine

def _cnn() -> onnx.ModelProto:
    """64 channels at 28: a 3x3 with bias and a residual add, a strided 3x3 to 128, a 1x1 with a residual
    add (K = 576, 576, 128: each at or over the direct kernel's cut)."""
    rng = np.random.default_rng(5)

    def weight(name, *shape):
        return numpy_helper.from_array(rng.normal(0, (2 / np.prod(shape[1:])) ** 0.5, shape).astype("float32"), name)

    inits = [weight("w1", 64, 64, 3, 3), weight("w2", 128, 64, 3, 3), weight("w3", 128, 128, 1, 1),
             numpy_helper.from_array(rng.normal(0, 0.1, 64).astype("float32"), "b1")]
    node = helper.make_node
    nodes = [node("Conv", ["x", "w1", "b1"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             node("Add", ["a", "x"], ["r"]), node("Relu", ["r"], ["ar"]),
             node("Conv", ["ar", "w2"], ["b"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             node("Relu", ["b"], ["br"]), node("Conv", ["br", "w3"], ["c"], kernel_shape=[1, 1]),
             node("Add", ["c", "br"], ["y"])]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 28, 28])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128, 14, 14])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_bf16_export_runs_its_convolutions_on_the_vector_kernel_where_this_machines_rate_pays(tmp_path):
    from explorer.passes.bf16_conv import vdpbf16ps_pays
    from explorer.precision import BF16_TOLERANCE
    from export.flow import export_workload

    host = host_target()
    if not HAS_BF16 or HAS_AMX:
        pytest.skip("the vector kernel is for a CPU with AVX512-BF16 and no AMX tiles; this one "
                    + ("has AMX" if HAS_AMX else "has no AVX512-BF16"))
    if not vdpbf16ps_pays(host):
        pytest.skip(f"this machine's measured vdpbf16ps rate is under {bf16_conv.VECTOR_MIN_RATE}x its fp32 FMAs': "
                    "its bf16 builds keep convolutions fp32 (explorer.passes.bf16_conv.why_convs_fp32)")
    path = tmp_path / "cnn.onnx"
    onnx.save(_cnn(), path)
    report = export_workload(str(path), "cpu", tmp_path / "bundle", precision="bf16", layers=False)
    assert report.verified, report.verdict
    manifest = report.manifest
    assert manifest["tolerance"] == BF16_TOLERANCE and manifest["precision"]["converted_products"] == 3
    assert not any("reduction C_in" in k or "vdpbf16ps" in k for k in manifest["precision"]["kept_fp32"])
    conv_tasks = [t["name"] for t in manifest["tasks"] if "conv2d_nhwc_bf16" in t["name"]]
    assert len(conv_tasks) == 3 and not any("bf16_im2col" in t["name"] or "conv2d_bf16" in t["name"]
                                            for t in manifest["tasks"]), manifest["tasks"]
    for task in report.built.workload.tasks():  # each kernel's default names the vector tile, no fallback
        if task.name in conv_tasks:
            _, choice = default_schedule(task.mod["main"], host.cpu_spec())
            assert not choice.fallback_reason and "_w6" in choice.steps[0] and "(vdpbf16ps, direct NHWC" in \
                choice.steps[0], (task.name, choice)
    asm = "".join(m.inspect_source("asm") for m in report.built.executable.mod.imports)
    assert "vdpbf16ps" in asm and "tdpbf16ps" not in asm


# 5. The default reopened from its steps in a fresh process

# A child process applies a steps file with none of schedx's intrinsics registered yet, then checks the
# kernel against the trace's replay.
_APPLY_IN_A_FRESH_PROCESS = """
import json, sys
import tvm_ffi
from tvm.s_tir import TensorIntrin
from explorer.schedule.session import ScheduleSession
from explorer.schedule.steps import load_steps
from explorer.schedule.trace import replay
from tests.test_bf16_vector_conv import vector_conv_func

shape, steps_path, trace_path = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
steps = load_steps(steps_path)
names = [s.args["intrin"] for s in steps if s.primitive == "tensorize"]
fresh = all(TensorIntrin.get(n, allow_missing=True) is None for n in names)
func = vector_conv_func(shape)
session = ScheduleSession(func)
session.apply_all(steps)
want = replay(func, json.loads(open(trace_path).read())).mod["main"]
print(json.dumps({"fresh": fresh, "names": names, "equal": tvm_ffi.structural_equal(session.mod["main"], want)}))
"""


@pytest.mark.parametrize("case", ["3x3-s2", "7x7-map"])
def test_the_vector_conv_default_reopens_from_its_steps_file_in_a_fresh_process(tmp_path, case):
    from explorer.schedule.session import ScheduleSession
    from explorer.schedule.steps import dump_steps, parse_steps
    from explorer.schedule.trace import trace_to_steps

    shape = CASES[case]
    cpu = parse_target("cpu:znver5").cpu_spec()
    func = vector_conv_func(shape)
    scheduled, choice = default_schedule(func, cpu)
    text = dump_steps(trace_to_steps(func, choice.trace))
    name = _expected_step(shape, cpu).split(": ")[1].split(" ")[0]
    assert name in text and "pragma_import_llvm" in text, text
    session = ScheduleSession(func)  # here, as the Schedule page applies them
    session.apply_all(parse_steps(text))
    # (the pass's kernel is private: the default's copy alone is named main)
    assert tvm_ffi.structural_equal(session.mod["main"], scheduled.without_attr("global_symbol"))
    (tmp_path / "steps.json").write_text(text)
    (tmp_path / "trace.json").write_text(json.dumps(choice.trace))
    done = subprocess.run([sys.executable, "-c", _APPLY_IN_A_FRESH_PROCESS, json.dumps(shape),
                           str(tmp_path / "steps.json"), str(tmp_path / "trace.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["fresh"] and result["names"] == [name] and result["equal"], result


def test_an_amx_cpu_takes_the_vector_tile_where_its_tiles_do_not_fit():
    """A bf16 model built for vectors (on a Zen 5) and scheduled for an AMX CPU (a workload reused across
    targets): a convolution the AMX tiles do not fit (6-pixel rows: no tile of 7-16 pixels divides them)
    takes the vdpbf16ps tile (every AMX CPU has AVX512-BF16), not the fp32-style register tile (R4)."""
    target = parse_target("cpu:sapphirerapids")
    mod, converted, _ = bf16_convs(conv_module(1, 64, 6, 6, 64, 3, 1, 1)[0], vectors=True)
    func, choice = default_schedule(_prim_funcs(mod)["conv2d_nhwc_bf16"], target.cpu_spec())
    assert converted == 1 and not choice.fallback_reason and "vdpbf16ps, direct NHWC" in choice.steps[0], choice
    assert "vdpbf16ps" in _asm(func, target)
