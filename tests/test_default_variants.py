"""The default rules' own design space (explorer.schedule.defaults.variants): each variant is the
default rules with one choice changed, differs from the default and the others, replays from its
trace, compiles for each vector width and computes the kernel."""

from __future__ import annotations

import re

import pytest
import tvm

from explorer.kernels import load_kernel
from explorer.schedule.codegen import code_views
from explorer.schedule.defaults import default_schedule
from explorer.schedule.defaults.analysis import block_facts, root_blocks
from explorer.schedule.defaults.analysis import NotApplicable
from explorer.schedule.defaults.tile_choice import choose_tiles, row_axis, vector_axis
from explorer.schedule.defaults.variants import DefaultVariant, default_variants
from explorer.target import host_target, parse_target

# the last 3x3 convolution of ResNet-18: AVX2's default runs its 7x7 outputs as one axis of rows
CONV = "conv2d_nhwc:C=512,H=7,W=7,K=512,R=3,S=3,pad=1"
TILE = re.compile(r"register tile (\d+x\d+)")


def _tile(steps) -> str:
    return TILE.search(steps[0]).group(1)


@pytest.mark.parametrize("spec", ["cpu:x86-64-v3", "cpu:x86-64-v4", "aarch64:cortex-a76"])
def test_the_ranking_offers_other_tiles_in_order_and_says_when_it_has_no_more(spec):
    from tvm import s_tir

    from explorer.workload import owned_task_module

    cpu = parse_target(spec).cpu_spec()
    sch = s_tir.Schedule(owned_task_module(load_kernel("matmul:M=50,N=64,K=128").func))
    block = next(b for b in root_blocks(sch) if not block_facts(sch, b).is_spatial)
    facts = block_facts(sch, block)
    vec = vector_axis(facts)
    rows = row_axis(facts, vec)
    ranked = []
    for rank in range(64):
        try:
            ranked.append(choose_tiles(facts, vec, rows, cpu, rank=rank))
        except NotApplicable as why:
            assert "tiles fit" in str(why)
            break
    assert ranked[0] == choose_tiles(facts, vec, rows, cpu)  # rank 0: the default's tile
    assert 2 <= len(ranked) < 64 and len(set(ranked)) == len(ranked)
    assert all(t.row_tile * t.vec_tile // cpu.lanes("float32") <= cpu.accumulators for t in ranked)


@pytest.mark.parametrize("spec", ["cpu:x86-64-v3", "cpu:x86-64-v4"])
def test_a_convolutions_variants_change_one_choice_each_and_replay_from_their_traces(spec):
    import tvm_ffi
    from tvm import s_tir

    from explorer.workload import owned_task_module

    target = parse_target(spec)
    cpu = target.cpu_spec()
    func = load_kernel(CONV).func
    default, choice = default_schedule(func, cpu)
    variants = default_variants(func, cpu, limit=6)
    labels = [v.variant.label for v in variants]
    assert len(variants) >= 3 and len(set(labels)) == len(labels), labels
    assert labels[0] == "default rules, tile ranked 2" and _tile(variants[0].steps) != _tile(choice.steps)
    if "as one axis" in choice.steps[0]:  # AVX2: 5x16 over the 7x7 outputs; a variant keeps the rows apart
        apart = next(v for v in variants if not v.variant.pixels)
        assert "as one axis" not in apart.steps[0]
    funcs = [default]
    for v in variants:
        sch = s_tir.Schedule(owned_task_module(func))
        s_tir.Trace.apply_json_to_schedule(v.trace, sch)
        funcs.append(sch.mod["main"])
    assert len({tvm_ffi.structural_hash(f) for f in funcs}) == len(funcs)  # all different from each other
    # compiled for the vector width (not run): fused multiply-adds on the width's registers
    asm = code_views(tvm.IRModule({"main": funcs[1]}), target).asm
    register = "zmm" if "v4" in spec else "ymm"
    assert re.search(rf"vfmadd\w+\s+.*%{register}", asm), asm[:2000]


def test_an_elementwise_kernel_has_nothing_to_choose():
    assert default_variants(load_kernel("softmax").func, host_target().cpu_spec()) == []
    assert DefaultVariant().label == "default rules"


@pytest.mark.heavy
def test_every_variant_computes_the_kernel():
    from explorer.measure import measure

    kernel = load_kernel("matmul:M=50,N=64,K=128")
    variants = default_variants(kernel.func, host_target().cpu_spec(), limit=6)
    assert len(variants) >= 3
    for v in variants:
        from tvm import s_tir

        from explorer.workload import owned_task_module

        sch = s_tir.Schedule(owned_task_module(kernel.func))
        s_tir.Trace.apply_json_to_schedule(v.trace, sch)
        result = measure(kernel, sch.mod, repeat=1, min_repeat_s=0.0)
        assert result.status == "ok" and result.verified, (v.variant.label, result.error)
