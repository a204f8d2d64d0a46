"""Pipeline runner: snapshots after every pass, nested passes, changed flags, failures."""

from __future__ import annotations

import json

import pytest
import tvm

from explorer.errors import PipelineError
from explorer.passes import PASS_CATALOG, PIPELINES, PassSpec, run_pipeline
from explorer.passes.pipelines import TUNING_PASSES


def test_tuning_pipeline_snapshots_every_listed_pass(tiny_module):
    run = run_pipeline(tiny_module, "tuning")
    assert run.error is None
    assert [s.name for s in run.main_passes()] == list(TUNING_PASSES)
    by_name = {s.name: s for s in run.main_passes()}
    assert by_name["LegalizeOps"].changed and by_name["FuseOps"].changed and by_name["FuseTIR"].changed
    assert not by_name["DeadCodeElimination"].changed  # nothing left to remove after FuseTIR
    assert by_name["FuseOps"].counts.fused_functions > 0
    assert by_name["FuseTIR"].counts.fused_functions == 0
    assert by_name["LegalizeOps"].counts.prim_funcs > 0 and run.input_counts.prim_funcs == 0


def test_nested_passes_are_captured_and_foreign_ones_are_not(tiny_module):
    run = run_pipeline(tiny_module, "tuning")
    fuse_tir = run.find("FuseTIR")
    assert fuse_tir.composite
    inner = [s.name for s in run.children(fuse_tir.index)]
    assert "FuseTIRInner" in inner
    # FoldConstant compiles folded functions through the TIR pipeline on other modules:
    assert not any(s.name.startswith(("tirx.", "s_tir.")) for s in run.snapshots)


def test_changed_means_structurally_different(tiny_module):
    run = run_pipeline(tiny_module, passes="LegalizeOps,LegalizeOps")
    first, second = run.main_passes()
    assert first.changed and not second.changed


def test_before_and_input_index(tiny_module):
    run = run_pipeline(tiny_module, "tuning")
    fuse = run.find("FuseOps")
    received = run.input_index(fuse.index)
    assert run.module(received).same_as(run.before(fuse.index))
    assert run.input_index(run.find("LegalizeOps").index) == -1 or run.snapshots[0].composite


@pytest.mark.parametrize("name", list(PIPELINES))
def test_every_named_pipeline_runs(tiny_module, name):
    run = run_pipeline(tiny_module, name)
    assert run.error is None, run.error
    assert run.snapshots and any(s.changed for s in run.snapshots)
    json.dumps(run.to_dict())  # plain data all the way down


def test_cpu_default_pipeline_plans_memory(tiny_module):
    run = run_pipeline(tiny_module, "cpu-default")
    planned = run.find("StaticPlanBlockMemory")
    assert planned is not None and planned.counts.planned_bytes and planned.counts.planned_bytes > 0


def test_unknown_names_fail_before_running(tiny_module):
    with pytest.raises(PipelineError, match="unknown pipeline 'fast'"):
        run_pipeline(tiny_module, "fast")
    with pytest.raises(PipelineError, match="unknown pass 'FuseOpz'"):
        run_pipeline(tiny_module, passes="LegalizeOps,FuseOpz")


def test_a_pass_that_raises_is_reported_with_the_snapshots_before_it(tiny_module, monkeypatch):
    @tvm.transform.module_pass(opt_level=0, name="Explode")
    def explode(mod, ctx):
        raise ValueError("boom: this pass always fails")

    monkeypatch.setitem(PASS_CATALOG, "Explode", PassSpec("Explode", "fails", lambda: explode))
    run = run_pipeline(tiny_module, passes="LegalizeOps,Explode,FuseOps", isolate=False)
    assert run.failed_pass == "Explode"
    assert "boom: this pass always fails" in run.error
    assert [s.name for s in run.main_passes()] == ["LegalizeOps"]


def test_a_pass_order_that_crashes_tvm_is_caught_in_a_child(tiny_module):
    # TVM 0.27 segfaults in ConvertLayout after FoldBatchnormToConv2D; we must survive it.
    with pytest.raises(PipelineError, match="ConvertLayout.*crashed TVM"):
        run_pipeline(tiny_module, passes="FoldBatchnormToConv2D,ConvertLayout")


def test_custom_pipeline_convert_layout_changes_layout(tiny_module):
    run = run_pipeline(tiny_module, passes="ConvertLayout")
    assert run.snapshots[-1].changed
    assert "NHWC" in run.script(len(run.snapshots) - 1)


def test_resnet18_tuning_pipeline(resnet18):
    run = run_pipeline(resnet18.mod, "tuning")
    fuse = run.find("FuseOps")
    assert fuse.counts.fused_functions >= 10
    assert run.find("FuseTIR").counts.prim_funcs < run.find("FoldConstant").counts.prim_funcs
    assert run.capture_seconds >= 0  # its cost against the run: benchmarks/bench_passes.py
