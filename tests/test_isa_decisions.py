"""Every ISA-dependent decision of the default CPU rules, checked for each target kind by building
for it: AVX2, AVX-512 and NEON, whatever CPU runs the test. Nothing here runs the built code (only
tests that compare numbers depend on the host); each case asserts the decision (register tile, tail
of rows, rows fused over two output axes, weights packed in panels, micro-kernel width, int8
intrinsic) and the instructions LLVM emitted for it (FMAs of the target's vector width, none wider).

A machine that hides AVX-512 while LLVM names its CPU znver4 is played with ``SCHEDX_CPU_FLAGS``:
its host target builds AVX2 code with AVX2's decisions."""

from __future__ import annotations

import re

import numpy as np
import pytest

from explorer.schedule import microkernel
from explorer.schedule.codegen import asm_stats
from explorer.schedule.defaults import default_schedule
from explorer.target import host_target, parse_target
from explorer.workload import load_kernel, load_workload
from tests.isa_asm import TARGETS, VECTOR_BITS, assert_vector_width, target_asm

CONV_56 = "conv2d_nhwc:N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,pad=1"  # ResNet-18's 56x56 3x3 conv
CONV_7 = "conv2d_nhwc:N=1,C=512,H=7,W=7,K=512,R=3,S=3,stride=1,pad=1"  # its last, 9.4 MB of weights
CONV_1X1 = "conv2d_nhwc:N=1,C=16,H=112,W=112,K=96,R=1,S=1,stride=1,pad=0"  # MobileNetV2's, a short reduction
MATMUL_1024 = "matmul:M=16,N=1024,K=256"  # rows 4 KB apart: packed even as an activation
MATMUL_98 = "matmul:M=98,N=64,K=512"  # 98 rows: no factor of 6

# kernel -> ISA -> (register tile, rows in a tail of their own (0: none), rows over two output
# axes as one, weights packed in panels). The accumulators, the weight vectors every row shares
# and the row's operand fit the register file: AVX2's 16 registers take 12 accumulators (6x16)
# and a tail where 6 does not divide the rows; AVX-512's and NEON's 32 take up to 28, in tiles
# whose rows divide ResNet's widths (4 or 7 or 14 rows: no tail).
DECISIONS = {
    CONV_56: {"avx2": ("6x16", 2, False, False), "avx512": ("4x64", 0, False, False),
              "neon": ("4x16", 0, False, False)},
    CONV_7: {"avx2": ("5x16", 4, True, True), "avx512": ("7x32", 0, False, True), "neon": ("7x8", 0, False, True)},
    CONV_1X1: {"avx2": ("2x32", 0, False, False), "avx512": ("7x32", 0, False, False),
               "neon": ("4x16", 0, False, False)},
    MATMUL_1024: {"avx2": ("6x16", 4, False, True), "avx512": ("4x64", 0, False, True),
                  "neon": ("4x16", 0, False, True)},
    MATMUL_98: {"avx2": ("6x16", 2, False, False), "avx512": ("14x32", 0, False, False),
                "neon": ("14x8", 0, False, False)},
}


@pytest.mark.parametrize("isa", sorted(TARGETS))
@pytest.mark.parametrize("spec", sorted(DECISIONS), ids=lambda s: s.split(",stride")[0])
def test_the_default_tiles_follow_the_target_and_build_to_its_vector_width(spec, isa):
    target = parse_target(TARGETS[isa])
    tile, tail, fused, packed = DECISIONS[spec][isa]
    func, choice = default_schedule(load_kernel(spec).func, target.cpu_spec())
    said = choice.steps[0]
    assert choice.rule == "full", choice
    assert f"register tile {tile} " in said, said
    assert (f"the last {tail} in {tail}x" in said) if tail else ("the last" not in said), said
    assert ("outputs as one axis" in said) is fused, said
    assert ("weights packed in panels" in said) is packed, said
    assert_vector_width(target_asm(func, target), VECTOR_BITS[isa])


def _fma_region_spills(asm: str, isa: str) -> tuple[int, int]:
    """Between the first and the last FMA of a listing: vector registers stored to or loaded from
    the stack, and vector register-to-register moves (accumulators shuffled for want of registers)."""
    lines = asm.splitlines()
    fma = re.compile(r"\s*fmla\s" if isa == "neon" else r"\s*vfmadd\w*ps\s")
    at = [i for i, line in enumerate(lines) if fma.match(line)]
    body = lines[min(at):max(at) + 1]
    if isa == "neon":
        stack = sum(bool(re.search(r"\bsp\b", x) and re.search(r"\b[qv]\d+", x)) for x in body)
        moves = sum(bool(re.match(r"\s*mov\s+v\d+\.\w+, v\d+", x)) for x in body)
    else:
        stack = sum(bool("%rsp" in x and re.search(r"%[xyz]mm", x)) for x in body)
        moves = sum(bool(re.match(r"\s*vmovap[sd]\s+%[xyz]mm\d+, %[xyz]mm\d+", x)) for x in body)
    return stack, moves


@pytest.mark.parametrize("isa", sorted(TARGETS))
@pytest.mark.parametrize("spec", [CONV_56, CONV_7, MATMUL_98], ids=["conv 56x56", "conv 7x7x512", "matmul 98"])
def test_a_register_tile_fits_the_register_file_with_its_weights_and_row_operand(spec, isa):
    """Accumulators, the weight vectors all rows share and the row operand (a broadcast on x86,
    AVX-512 included; NEON's input vector) must fit the vector registers: AVX-512's 7x64 tiles
    (28 + 4 + 1 of 32) made LLVM shuffle accumulators (104 moves) and spill them to the stack
    in the FMA loop of ResNet's 3x3 convs, NEON's 7x16 likewise (468 moves)."""
    target = parse_target(TARGETS[isa])
    func, _ = default_schedule(load_kernel(spec).func, target.cpu_spec())
    assert _fma_region_spills(target_asm(func, target), isa) == (0, 0)


@pytest.mark.parametrize("isa", sorted(TARGETS))
def test_a_weight_wider_than_the_tile_is_packed_at_build_time_for_every_target(isa, tmp_path):
    """A MatMul by a 256x1024 initializer: its kernel reads the weight in panels one register tile
    wide (16 floats on AVX2 and NEON, 64 on AVX-512), folded into the parameter at build
    time: no packing is left in the kernels, whatever the target."""
    from explorer.ir.tir_walk import LAYOUT_REWRITE_PREPROC, blocks
    from explorer.ir.relax_walk import prim_funcs
    from export.build import prepare
    from tests.kernel_cases import matmul_model

    _, weight = matmul_model(tmp_path / "mm.onnx")
    target = parse_target(TARGETS[isa])
    prepared = prepare(load_workload(str(tmp_path / "mm.onnx")), target)
    assert prepared.packed == 1
    (spec, value), = zip(prepared.params, prepared.values)
    assert spec.source == "packed:W"
    panels, k, width = value.shape
    tile = int(DECISIONS[MATMUL_1024][isa][0].split("x")[1])
    assert (k, width, panels) == (256, tile, 1024 // tile)
    np.testing.assert_array_equal(value.transpose(1, 0, 2).reshape(256, 1024), weight)
    assert not any(LAYOUT_REWRITE_PREPROC in b.annotations for f in prim_funcs(prepared.mod).values()
                   for b in blocks(f))


@pytest.mark.parametrize("isa", sorted(TARGETS))
def test_a_weight_whose_row_one_tile_spans_is_left_in_place(isa):
    """small_cnn's convs have 16-64 output channels: where one register tile spans a weight's whole
    row (AVX-512's 64-wide tiles on 64 channels), the panel would be the row itself, so nothing is
    packed; a narrower tile (AVX2's 32 on 64 channels) packs. The export packs exactly the kernels
    whose schedule says so (a weight under ``PACK_MIN_BYTES`` stays in place: its rows stay in cache)."""
    import math

    from explorer.schedule.defaults.panels import PACK_MIN_BYTES
    from export.build import prepare

    target = parse_target(TARGETS[isa])
    workload = load_workload("small_cnn")
    says_packed = 0
    for task in workload.tasks():
        _, choice = default_schedule(task.mod["main"], target.cpu_spec())
        step = choice.steps[0]
        if "register tile" in step and "conv2d" in task.name:
            tile_width = int(step.split("register tile ")[1].split()[0].split("x")[1])
            weight = [int(n) for n in task.mod["main"].params[1].shape]  # HWIO
            large = math.prod(weight) * 4 >= PACK_MIN_BYTES
            assert ("weights packed in panels" in step) is (tile_width < weight[-1] and large), (task.name, step)
        # a weight padded to whole vectors (the 10-class head where no half vector divides 10) is
        # padded once at build time as well (export.weight_layouts.mark_weight_padding)
        says_packed += "weights packed in panels" in step or "outputs padded to whole vectors" in step
    assert prepare(workload, target).packed == says_packed
    if isa == "avx2":
        assert says_packed >= 1


@pytest.mark.parametrize("isa", sorted(TARGETS))
def test_the_micro_kernel_is_as_wide_as_the_targets_vectors_and_builds_to_its_fmas(isa):
    from tests.kernel_cases import tensorized_matmul

    target = parse_target(TARGETS[isa])
    mk = microkernel.for_target(target)
    assert mk is not None and mk.nr == VECTOR_BITS[isa] // 32
    sch = tensorized_matmul(load_kernel(f"matmul:M=16,N={2 * mk.nr},K=8"), mk)
    assert_vector_width(target_asm(sch.mod, target), VECTOR_BITS[isa])


def test_int8_kernels_take_the_targets_dot_product_or_none():
    """x86 widths and their instructions are built in tests/test_int8_kernels.py; NEON has no int8
    intrinsic in schedx: its int8 conv still gets a default schedule that builds to NEON vectors."""
    from tests.kernel_cases import int8_conv_kernel

    target = parse_target(TARGETS["neon"])
    assert target.cpu_spec().int8_dot == ""
    func, _, _ = int8_conv_kernel(8, 63)
    scheduled, choice = default_schedule(func, target.cpu_spec())
    assert "schedx_int8" not in " ".join(choice.steps)
    stats = asm_stats(target_asm(scheduled, target))
    assert stats.vector.get(128, 0) > 0 and max(stats.vector) == 128, stats.summary()


def test_a_host_that_hides_avx512_gets_avx2_decisions_and_code(monkeypatch):
    """A VM that hides AVX-512 while LLVM calls its CPU znver4 (played with SCHEDX_CPU_FLAGS on any
    x86 host with AVX2): the host target leaves AVX-512 out, and its kernels are AVX2's."""
    from explorer.target.host import cpu_flags

    if host_target().arch != "x86_64" or "avx2" not in cpu_flags():
        pytest.skip("plays an x86 host with AVX2")
    monkeypatch.setenv("SCHEDX_CPU_FLAGS", " ".join(f for f in cpu_flags() if not f.startswith("avx512")))
    target = host_target()
    assert target.vector_width == 256 and "avx512f" not in target.features
    func, choice = default_schedule(load_kernel(CONV_56).func, target.cpu_spec())
    assert f"register tile {DECISIONS[CONV_56]['avx2'][0]} " in choice.steps[0], choice.steps
    assert_vector_width(target_asm(func, target), 256)


@pytest.mark.parametrize("isa", sorted(TARGETS))
def test_the_assembly_view_finds_the_hot_loop_on_every_target(isa):
    """The Schedule page opens the assembly at the loop that does the work: the innermost loop
    with the FMAs (x86 `jne .LBB`, AArch64 `b.ne`/`cbnz ... .LBB` back branches)."""
    from explorer.schedule.codegen import asm_stats, hot_loop

    target = parse_target(TARGETS[isa])
    func, _ = default_schedule(load_kernel(MATMUL_98).func, target.cpu_spec())
    asm = target_asm(func, target)
    hot = hot_loop(asm)
    assert hot is not None and hot.fma > 0
    lines = asm.splitlines()
    assert lines[hot.first - 1].strip().startswith(".L") and hot.last > hot.first
    body = asm_stats("\n".join(lines[hot.first - 1:hot.last]))
    assert body.fma.get(VECTOR_BITS[isa], 0) == hot.fma  # the FMAs of the target's width are in it
    assert hot.last - hot.first < len(lines) / 4  # a loop, not the function around it
