"""``schedx tune --precision bf16``: a model searched as ``schedx export --precision bf16`` builds
it (its weight products as bf16 kernels), so that the records found are the ones the export at
bf16 chooses, times inside the model and ships; refused before any job where the CPU has no bf16
instructions or the workload is a single kernel."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from app.cli import cli
from explorer.precision import for_precision
from explorer.target import parse_target
from explorer.workload import load_workload
from store import Store
from tests.bf16_models import mlp_path  # noqa: F401 - the fixture: an MLP whose two matmuls become bf16
from tests.cpu_marks import HAS_BF16


def _no_bf16_flags() -> str:
    from explorer.target.environment import cpu_flags

    return " ".join(f for f in cpu_flags() if "bf16" not in f and not f.startswith("amx"))


def test_tune_refuses_bf16_where_the_cpu_lacks_the_instructions_before_any_job(mlp_path, tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDX_CPU_FLAGS", _no_bf16_flags())  # this machine played without AVX512-BF16 and AMX
    db = tmp_path / "refused.db"
    r = CliRunner().invoke(cli, ["tune", mlp_path, "--precision", "bf16", "--trials", "8", "--db", str(db)])
    assert r.exit_code == 1, r.output
    assert "--precision bf16 needs a CPU with AVX512-BF16 or AMX-BF16" in r.output and "Traceback" not in r.output
    assert not db.exists() or not Store(db).jobs()  # no job was started


def test_tune_refuses_bf16_for_a_single_kernel(tmp_path):
    r = CliRunner().invoke(cli, ["tune", "matmul:M=16,N=16,K=16", "--precision", "bf16", "--target", "cpu:znver4",
                                 "--rpc-tracker", "127.0.0.1:1", "--rpc-key", "x", "--db", str(tmp_path / "k.db")])
    assert r.exit_code == 1, r.output  # (an RPC target: refused before the tracker is reached, on any host)
    assert "is a single kernel" in r.output and "cannot reach" not in r.output


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16 (avx512_bf16 not in its flags): a bf16 "
                                         "search is refused here")
def test_a_bf16_job_searches_the_tasks_an_export_at_bf16_builds(mlp_path):
    from export.build import prepare
    from search.job_spec import JobSpec

    job = JobSpec(mlp_path, precision="bf16").validate()
    built = prepare(load_workload(mlp_path), job.target, precision="bf16")
    exported = {o.task.key: o.task.name for o in built.outcomes}  # the kernels the export at bf16 schedules
    assert {t.key: t.name for t in job.tasks} == exported
    assert "mlp/dense_bf16" in exported.values()
    fp32 = {t.key for t in JobSpec(mlp_path).validate().tasks}
    assert fp32 != set(exported)  # the fp32 matmuls are other tasks


def test_old_jobs_read_fp32_and_new_ones_keep_their_precision():
    from search.job_spec import JobSpec

    assert JobSpec.from_dict({"workload": "m.onnx", "target": "cpu"}).precision == "fp32"
    spec = JobSpec("m.onnx", precision="bf16")
    assert JobSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


@pytest.mark.slow
@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16 (avx512_bf16 not in its flags): a bf16 "
                                         "search cannot measure its kernels here")
def test_records_searched_at_bf16_are_the_ones_an_export_at_bf16_chooses_and_times_in_the_model(mlp_path, tmp_path):
    from export.choose import record_schedule, task_choices
    from export.shipping import ShipSpec, shipped_schedules

    db = str(tmp_path / "bf16.db")
    r = CliRunner().invoke(cli, ["tune", mlp_path, "--precision", "bf16", "--trials", "8", "--per-batch", "4",
                                 "--population", "32", "--generations", "1", "--confirm-rounds", "1", "--db", db])
    assert r.exit_code == 0, r.output
    assert "task(s) at bf16" in r.output
    target = parse_target("cpu")
    fp32 = load_workload(mlp_path)
    bf16_tasks = for_precision(fp32, target, "bf16")[0].tasks()
    store = Store(db)
    searched = {w.key: w.name for w in store.workloads()}
    assert set(searched) == {t.key for t in bf16_tasks}, searched  # the bf16 kernels, not the fp32 matmuls
    assert "mlp/dense_bf16" in searched.values() and not any("matmul" in name for name in searched.values())
    (job,) = json.loads(CliRunner().invoke(cli, ["jobs", "--db", db, "--json"]).output)
    assert job["params"]["precision"] == "bf16"
    assert "bf16)" in CliRunner().invoke(cli, ["jobs", "--db", db]).output

    # the export at bf16 finds records for every one of its kernels and ships those that beat the default
    out = tmp_path / "bundle"
    r = CliRunner().invoke(cli, ["export", mlp_path, "--precision", "bf16", "--db", db, "--no-check-in-model",
                                 "--no-layers", "-o", str(out)])
    assert r.exit_code == 0, r.output
    choices = task_choices(store, bf16_tasks, target)
    assert all(c.candidates for c in choices), [c.task.name for c in choices if not c.candidates]
    manifest = json.loads((out / "manifest.json").read_text())
    won = {c.task.name: c.best.id for c in choices if c.best.source != "default"}
    assert manifest["records"] == won and manifest["precision"]["name"] == "bf16"

    # a searched record of the bf16 matmul applies to the export's kernel and is timed inside the bf16 model
    (dense,) = [c for c in choices if c.task.name == "mlp/dense_bf16"]
    found = next(rec for rec in dense.candidates if rec.source == "search")
    shipped = shipped_schedules(ShipSpec(fp32, target, db=db, precision="bf16",
                                         schedules={"mlp/dense_bf16": record_schedule(found)}, threads=1))
    check = shipped.decision.check
    assert check.tasks["mlp/dense_bf16"]["verdict"] in ("kept", "dropped", "whole"), check.tasks
    assert check.tasks["mlp/dense_bf16"]["record_s"] and check.tasks["mlp/dense_bf16"]["default_s"]
