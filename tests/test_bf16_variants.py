"""The bf16 rule's own design space (explorer.schedule.defaults.variants.BF16_VARIANTS): a bf16
product's variants choose the instructions (AMX tiles or vdpbf16ps steps) and the block one call
computes; each differs from the default and the others, replays from its trace as a search's
candidate and an export's record do, uses its instruction and computes the kernel at the bf16
tolerance. Compile-only per target (any host); the numeric runs only where the CPU has them."""

from __future__ import annotations

import json

import pytest
import tvm
import tvm_ffi

from explorer.schedule.defaults import default_schedule
from explorer.schedule.defaults.apply import tiled, trace_json
from explorer.schedule.defaults.variants import BF16_VARIANTS, DefaultVariant, default_variants
from explorer.schedule.trace import replay
from explorer.target import parse_target
from explorer.workload import owned_task_module
from tests.bf16_products import (CONV_SHAPES, check_conv_bf16, check_dense_bf16, conv_bf16_func, dense_bf16_func,
                                 run_conv_bf16, run_dense_bf16)
from tests.bf16_models import mlp_path  # noqa: F401 - the fixture: an MLP whose two matmuls become bf16
from tests.cpu_marks import HAS_AMX, NEEDS_BF16


def test_sizes_need_the_instruction_they_are_counted_in_and_the_label_says_the_choice():
    with pytest.raises(ValueError, match="name its bf16_isa"):
        DefaultVariant(bf16_rows=4)
    with pytest.raises(ValueError, match="bf16_isa must be one of"):
        DefaultVariant(bf16_isa="avx2")
    amx = DefaultVariant(bf16_isa="amx", bf16_rows=1, bf16_cols=2)
    assert DefaultVariant.from_dict(json.loads(json.dumps(amx.to_dict()))) == amx
    assert amx.label == "default rules, AMX tdpbf16ps, 1 x 2 tiles a call"
    assert DefaultVariant(bf16_isa="avx512bf16", bf16_rows=16, bf16_cols=1).label == \
        "default rules, vdpbf16ps steps of 16 rows x 1 panels"
    assert DefaultVariant.from_dict({"rank": 1}).bf16_isa == ""  # records written before the bf16 knobs


def _compiled(func, variant, target):
    return tvm.compile(tvm.IRModule({"main": replay(owned_task_module(func), variant.trace).mod["main"]}),
                       target=target.tvm()).mod.inspect_source("asm")


@pytest.mark.parametrize("spec, isas", [("cpu:sapphirerapids", ["amx", "amx", "amx", "avx512bf16"]),
                                        ("cpu:znver4", ["avx512bf16"] * 4)])
def test_a_dense_kernels_variants_list_their_knobs_and_use_their_instruction(spec, isas):
    target = parse_target(spec)
    func = dense_bf16_func(32, 64, 64)
    variants = default_variants(func, target.cpu_spec(), limit=4)
    assert [v.variant.bf16_isa for v in variants] == isas, [v.variant.label for v in variants]
    if isas[0] == "amx":  # the rule's 2 x 2 tiles: the other grids first
        assert [(v.variant.bf16_rows, v.variant.bf16_cols) for v in variants[:3]] == [(1, 1), (1, 2), (2, 1)]
        assert "AMX tdpbf16ps, 1 x 2 tiles" in variants[1].steps[0]
    else:  # the rule's 8 rows x 2 panels: other steps
        assert "16 rows x 1 panel of 16" in variants[0].steps[0] and "4 rows x 2 panels" in variants[1].steps[0]
    for v in (variants[0], variants[-1]):
        asm = _compiled(func, v, target)
        wanted, other = ("tdpbf16ps", "vdpbf16ps") if v.variant.bf16_isa == "amx" else ("vdpbf16ps", "tdpbf16ps")
        assert wanted in asm and other not in asm, v.variant.label


def test_a_kernel_amx_does_not_fit_gets_vdpbf16ps_variants_only():
    variants = default_variants(dense_bf16_func(8, 64, 64), parse_target("cpu:sapphirerapids").cpu_spec(), limit=6)
    assert variants and all(v.variant.bf16_isa == "avx512bf16" for v in variants)


def test_the_variants_are_bf16_choices_only_and_an_avx2_cpu_has_none():
    assert all(v.bf16_isa and not v.rank and v.pixels and v.tails for v in BF16_VARIANTS)
    assert len(set(BF16_VARIANTS)) == len(BF16_VARIANTS)
    cpu = parse_target("cpu:x86-64-v3").cpu_spec()  # no bf16 product: the fp32 register tile's variants
    assert not any(v.variant.bf16_isa for v in default_variants(dense_bf16_func(32, 64, 64), cpu, limit=6))


def _distinct_replayed(func, cpu, limit=6):
    """The variants, checked to differ from the default and each other and to replay from their
    traces to the schedule the rules made."""
    default, _ = default_schedule(func, cpu)
    variants = default_variants(func, cpu, limit=limit)
    assert variants
    hashes = {tvm_ffi.structural_hash(default)}
    for v in variants:
        replayed = replay(owned_task_module(func), v.trace).mod["main"]
        assert tvm_ffi.structural_equal(replayed, tiled(func, cpu, v.variant)[0].mod["main"], map_free_vars=True)
        hashes.add(tvm_ffi.structural_hash(replayed))
    assert len(hashes) == len(variants) + 1
    return variants


@NEEDS_BF16
def test_a_dense_kernels_variants_compute_it_at_the_bf16_tolerance():
    target = parse_target("cpu")
    m, n, k = 32, 64, 96
    func = dense_bf16_func(m, n, k)
    variants = _distinct_replayed(func, target.cpu_spec())
    assert any(v.variant.bf16_isa == "amx" for v in variants) == HAS_AMX
    for v in variants:
        sch = replay(owned_task_module(func), v.trace)
        lib = tvm.compile(tvm.IRModule({"main": sch.mod["main"]}), target=target.tvm())
        check_dense_bf16(*run_dense_bf16(lib, m, n, k))


@NEEDS_BF16
def test_a_convolutions_variants_compute_it_at_the_bf16_tolerance():
    target = parse_target("cpu")
    shape = CONV_SHAPES[0]
    func = conv_bf16_func(*shape)
    variants = _distinct_replayed(func, target.cpu_spec(), limit=4)
    for v in variants:
        sch = replay(owned_task_module(func), v.trace)
        lib = tvm.compile(tvm.IRModule({"main": sch.mod["main"]}), target=target.tvm())
        check_conv_bf16(*run_conv_bf16(lib, shape), shape)


@pytest.mark.slow
@NEEDS_BF16
def test_a_bf16_search_measures_the_bf16_rules_variants_and_an_export_rebuilds_the_one_measured(mlp_path, tmp_path):
    from click.testing import CliRunner

    from app.cli import cli
    from explorer.precision import for_precision
    from explorer.workload import load_workload, tag_task
    from export.choose import record_schedule, task_choices
    from export.shipping import ShipSpec, shipped_schedules
    from store import Store
    from store.outcome import Outcome

    db = str(tmp_path / "variants.db")
    r = CliRunner().invoke(cli, ["tune", mlp_path, "--precision", "bf16", "--trials", "16", "--per-batch", "4",
                                 "--population", "32", "--generations", "1", "--confirm-rounds", "0", "--db", db])
    assert r.exit_code == 0, r.output
    target = parse_target("cpu")
    fp32 = load_workload(mlp_path)
    tasks = {t.key: t for t in for_precision(fp32, target, "bf16")[0].tasks()}
    by_label = {v.label: v for v in BF16_VARIANTS}
    store = Store(db)
    measured = [rec for rec in store.records(source="search") if rec.environment.get("default_variant") in by_label]
    assert measured, [rec.environment for rec in store.records()]
    rec = measured[0]
    task = tasks[rec.workload_key]
    assert "dense_bf16" in task.name and rec.status == Outcome.OK and rec.median_s and rec.verified is True

    # the record replays to exactly the schedule the rules make for that variant (what was measured)
    replayed = replay(tag_task(task.mod, task.key), record_schedule(rec).trace).mod["main"]
    rules = tiled(task.mod["main"], target.cpu_spec(), by_label[rec.environment["default_variant"]])[0]
    assert tvm_ffi.structural_equal(replayed, replay(tag_task(task.mod, task.key), trace_json(rules)).mod["main"])

    # the export at bf16 builds it into the model and times it there against the default
    choice = next(c for c in task_choices(store, list(tasks.values()), target) if c.task.key == task.key)
    assert any(c.id == rec.id for c in choice.candidates)
    shipped = shipped_schedules(ShipSpec(fp32, target, db=db, precision="bf16",
                                         schedules={task.name: record_schedule(rec)}, threads=1))
    verdict = shipped.decision.check.tasks[task.name]
    assert verdict["verdict"] in ("kept", "dropped", "whole") and verdict["record_s"] and verdict["default_s"]
