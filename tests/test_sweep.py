"""Shapes: a batch sweep (latency and throughput against batch size, beside ONNX Runtime), and the
export's warning when records exist only at other shapes."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from app.cli import cli
from explorer.target.environment import hardware_fingerprint
from explorer.schedule.steps import Step
from explorer.schedule.trace import steps_to_trace
from explorer.errors import ExplorerError
from explorer.target import host_target, parse_target
from explorer.workload import load_workload
from export.choose import best_schedules, shape_warnings
from export.sweep import batch_shapes, sweep
from search.records import task_workload
from store import Record, Store
from store.outcome import Outcome

pytestmark = pytest.mark.heavy  # real builds or searches: left out of make test-fast


def test_a_two_point_batch_sweep_times_tvm_and_onnx_runtime():
    result = sweep("small_cnn", [1, 2], runs=3, budget_s=2.0)
    assert [p.batch for p in result.points] == [1, 2]
    assert [p.shapes for p in result.points] == ["input:1x3x32x32", "input:2x3x32x32"]
    for p in result.points:
        assert p.tvm_s and p.ort_s and p.tvm_throughput == pytest.approx(p.batch / p.tvm_s)
        assert p.tasks >= 5
    assert json.dumps(result.to_dict())


def test_records_at_other_shapes_are_named_and_not_applied(tmp_path):
    batch2 = load_workload("small_cnn", batch_shapes(load_workload("small_cnn"), 2))
    conv = "small_cnn/fused_transpose_conv2d_add_relu"  # conv + folded batch-norm + relu
    task = next(t for t in batch2.tasks() if t.name == conv)
    steps = [Step("parallel", {"loop": "conv2d_nhwc/yy"})]
    with Store(tmp_path / "s.db") as store:
        store.add_workload(task_workload(task, source="model:small_cnn", shapes=batch2.shapes))
        trace = steps_to_trace(task.mod["main"], steps)
        store.add_record(Record(workload_key=task.key, target=host_target().key, hardware=hardware_fingerprint(),
                                source="search", status="ok", steps=[s.to_dict() for s in steps], trace=trace,
                                latencies=[1e-4], median_s=1e-4, gflops=None, environment={}, verified=True))
        at_batch1 = load_workload("small_cnn")
        schedules, choices = best_schedules(store, at_batch1.tasks(), host_target())
        assert conv not in schedules  # tuned for batch 2: never applied at batch 1
        warnings = shape_warnings(choices)
        assert len(warnings) == 1 and "input:2x3x32x32" in warnings[0] and conv in warnings[0]
        schedules2, _ = best_schedules(store, batch2.tasks(), host_target())
        assert conv in schedules2
    out = CliRunner().invoke(cli, ["export", "small_cnn", "--db", str(tmp_path / "s.db"), "-o",
                                   str(tmp_path / "b"), "--no-layers"])
    assert out.exit_code == 0, out.output
    assert "records exist only for other shapes (input:2x3x32x32)" in out.output


def test_sweep_cli_writes_a_chart_and_refuses_bad_batches(tmp_path):
    chart = tmp_path / "sweep.html"
    r = CliRunner().invoke(cli, ["sweep", "small_cnn", "--batch", "1,2", "--runs", "2", "--out", str(chart), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output[r.output.index("{"):])
    assert [p["batch"] for p in data["points"]] == [1, 2]
    assert chart.stat().st_size > 1000 and "plotly" in chart.read_text()[:5000].lower()
    for bad in ("0,1", "1,1", "a,b", ""):
        r = CliRunner().invoke(cli, ["sweep", "small_cnn", "--batch", bad])
        assert r.exit_code == 1 and "--batch" in r.output
    r = CliRunner().invoke(cli, ["sweep", "matmul:M=8,N=8,K=8", "--batch", "1"])
    assert r.exit_code == 1 and "needs a model" in r.output


def test_a_search_files_its_tasks_under_the_shapes_it_tuned_at(tmp_path):
    from search.job_spec import JobSpec
    from search.jobs import run_job
    from search.params import SearchParams

    spec = JobSpec(workload="small_cnn", shapes="input:2x3x32x32",
                   params=SearchParams(trials=8, per_batch=8, cost_model="random", population=16, generations=0,
                                       init_min_unmeasured=8))
    with Store(tmp_path / "s.db") as store:
        run_job(store, spec)
        shapes = {w.shapes.get("model_shapes") for w in store.workloads() if w.name.startswith("small_cnn/")}
    assert shapes == {"input:2x3x32x32"}


def test_a_model_with_a_dynamic_batch_sweeps_without_shapes(tmp_path):
    """Issue 27: `schedx sweep` on a model with a symbolic batch asked for --shapes, which it did
    not take; the batch is the sweep's to set, and --shapes covers the other symbolic dimensions."""
    import onnx

    from export.sweep import sweep
    from tests.conftest import tiny_cnn

    onnx.save(tiny_cnn(batch="N"), tmp_path / "dyn.onnx")
    result = sweep(str(tmp_path / "dyn.onnx"), [1, 2], runs=2, budget_s=1.0, db=str(tmp_path / "none.db"))
    assert [p.batch for p in result.points] == [1, 2] and all(p.tvm_s for p in result.points)
    r = CliRunner().invoke(cli, ["sweep", str(tmp_path / "dyn.onnx"), "--batch", "1", "--runs", "1", "--shapes",
                                 "height=8", "--db", str(tmp_path / "none.db")], obj={})
    assert r.exit_code == 1 and "no input dimension is named 'height'" in r.output, r.output


def _projection(path, channels: int = 20, inputs: int = 16, size: int = 8) -> str:
    """A 1x1 conv to 20 channels (+ bias, ReLU): AVX-512 and AVX2 pad its outputs (PadConvOutputChannels),
    SSE's 4 lanes hold 20 whole, so an SSE CPU's task pipeline gives it a task of its own on any x86 host."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.2, (channels, inputs, 1, 1)).astype("float32"), "w"),
             numpy_helper.from_array(rng.normal(0, 0.2, (channels,)).astype("float32"), "b")]
    nodes = [helper.make_node("Conv", ["input", "w", "b"], ["c"]), helper.make_node("Relu", ["c"], ["out"])]
    graph = helper.make_graph(
        nodes, "projection", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, inputs, size, size])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, channels, size, size])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


def test_a_sweep_for_another_cpu_tunes_and_ships_that_cpus_tasks(tmp_path):
    model = _projection(tmp_path / "projection.onnx")
    try:
        target = parse_target("cpu:nehalem")  # SSE 4.2 (4 lanes): runs on any x86-64 machine of the last 15 years
        target.require_runnable("time")
    except ExplorerError as err:  # (an ARM host: no x86 CPU runs here)
        pytest.skip(str(err))
    theirs = load_workload(model, "input:1x16x8x8").for_target(target).tasks()
    here = {t.key for t in load_workload(model).tasks()}
    conv = next((t for t in theirs if t.key not in here), None)  # the conv as nehalem computes it: 20 channels
    if conv is None:
        pytest.skip("this machine's tasks are nehalem's (an SSE-only CPU): nothing tells them apart")

    db = tmp_path / "tuned.db"
    result = sweep(model, [1], target=target, db=db, trials=4, runs=2, budget_s=0.5, check_in_model=False)
    with Store(db) as store:
        tuned = {r.workload_key for r in store.records() if r.status == Outcome.OK}
    assert conv.key in tuned and tuned <= {t.key for t in theirs}, "the sweep tuned this machine's tasks"
    point = result.points[0]  # what it shipped: the best of those records where one beat the default schedule
    assert point.trials > 0 and point.tasks == len(theirs)
    assert point.from_records == len(best_schedules(db, theirs, target)[0])
