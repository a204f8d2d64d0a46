"""The schedx command line, run in-process with click's CliRunner."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from app.cli import cli


@pytest.fixture
def runner():
    return CliRunner()


def test_every_command_has_help(runner):
    for name, command in cli.commands.items():
        assert command.help, f"{name} has no help text"
        result = runner.invoke(cli, [name, "--help"])
        assert result.exit_code == 0 and "Usage" in result.output


def test_models_lists_the_zoo(runner):
    result = runner.invoke(cli, ["models"])
    assert result.exit_code == 0
    for name in ("small_cnn", "resnet18", "mobilenet_v2", "bert_encoder", "example:resnet50"):
        assert name in result.output
    data = json.loads(runner.invoke(cli, ["models", "--json"]).output)
    assert [m["name"] for m in data["zoo"]][:2] == ["small_cnn", "resnet18"]


def test_pipelines_json(runner):
    data = json.loads(runner.invoke(cli, ["pipelines", "--json"]).output)
    assert {p["name"] for p in data["pipelines"]} >= {"tuning", "cpu-default", "cuda"}
    assert any(p["name"] == "ConvertLayout" for p in data["passes"])


def test_passes_writes_one_script_and_dot_per_snapshot(runner, tiny_onnx_path, tmp_path):
    out = tmp_path / "snaps"
    result = runner.invoke(cli, ["passes", str(tiny_onnx_path), "--pipeline", "tuning", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "FuseOps" in result.output and "LegalizeOps" in result.output
    summary = json.loads((out / "summary.json").read_text())
    n = len(summary["snapshots"]) + 1  # plus the input module
    assert len(list(out.glob("*.py"))) == n and len(list(out.glob("*.dot"))) == n
    assert (out / "000_input.py").read_text().startswith("# from tvm.script")
    assert "digraph" in next(out.glob("*FuseOps.dot")).read_text()


def test_passes_json_with_custom_list(runner):
    result = runner.invoke(cli, ["passes", "small_cnn", "--passes", "LegalizeOps,FuseOps", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["pipeline"] == "custom" and data["model"]["name"] == "small_cnn"
    assert [s["name"] for s in data["snapshots"]][-2:] == ["LegalizeOps", "FuseOps"]


@pytest.mark.parametrize("args, words", [
    (["passes", "small_cnn", "--passes", "Nope"], "unknown pass 'Nope'"),
    (["passes", "small_cnn", "--pipeline", "warp"], "unknown pipeline 'warp'"),
    (["passes", "nonexistent.onnx"], "no such ONNX file"),
    (["passes", "small_cnn", "--shapes", "input:1xfoo"], "not a whole number"),
])
def test_bad_input_exits_nonzero_without_traceback(runner, args, words):
    result = runner.invoke(cli, args)
    assert result.exit_code == 1
    assert words in result.output and "Traceback" not in result.output


def test_corrupt_file(runner, tmp_path):
    bad = tmp_path / "junk.onnx"
    bad.write_text("hello, I am not a model")
    result = runner.invoke(cli, ["passes", str(bad)])
    assert result.exit_code == 1 and "not a readable ONNX model" in result.output


def test_debug_shows_the_exception(runner):
    result = runner.invoke(cli, ["--debug", "passes", "small_cnn", "--passes", "Nope"])
    assert result.exit_code == 1 and result.exception is not None
    assert type(result.exception).__name__ == "PipelineError"


def test_pipeline_and_passes_are_exclusive(runner):
    result = runner.invoke(cli, ["passes", "small_cnn", "--pipeline", "tuning", "--passes", "FuseOps"])
    assert result.exit_code == 1 and "either --pipeline or --passes" in result.output


def test_passes_help_names_the_pipeline_it_runs_by_default(runner):
    """Issue 29: `passes --help` said "default: tuning" while it ran the task pipeline."""
    from explorer.passes.pipelines import TASK_PIPELINE

    assert f"default: {TASK_PIPELINE}" in " ".join(runner.invoke(cli, ["passes", "--help"]).output.split())


def test_targets_and_the_unknown_cpu_error_count_the_same_cpus(runner):
    """Issue 29: `targets` said 104 of 130 CPUs where the unknown-CPU error said 131 ("generic")."""
    import re

    shown = runner.invoke(cli, ["targets"]).output
    total = int(re.search(r"named CPUs \(\d+ of (\d+) run here", shown).group(1))
    refused = runner.invoke(cli, ["measure", "matmul:M=8,N=8,K=8", "--target", "cpu:notacpu"], obj={}).output
    assert f"lists all {total} " in refused, refused


def test_jobs_shows_a_time_budget_as_minutes_not_ten_million_trials(runner, tmp_path):
    """Issue 29: a `tune --minutes 1` job read `0/10000000` in `schedx jobs`."""
    from search.params import UNLIMITED_TRIALS
    from search.job_spec import JobSpec
    from search.params import SearchParams
    from store import Store

    db = tmp_path / "jobs.db"
    with Store(db) as store:
        by_time = JobSpec(workload="matmul:M=64,N=64,K=64", params=SearchParams(trials=UNLIMITED_TRIALS, minutes=1.5))
        by_count = JobSpec(workload="matmul:M=64,N=64,K=64", params=SearchParams(trials=48))
        for spec in (by_time, by_count):
            store.create_job("search", spec.to_dict())
    rows = runner.invoke(cli, ["jobs", "--db", str(db)]).output.splitlines()
    assert "0/1.5 min" in rows[1] and "10000000" not in rows[1], rows
    assert "0/48" in rows[2], rows


def test_the_command_line_starts_without_loading_the_heavy_libraries():
    """Every command took 9-20 s to start on a loaded machine (`--help` 5 s): the CLI imports
    TVM, sqlite-utils (with pandas), ONNX and the rest only in the command that uses them."""
    import subprocess
    import sys

    code = ("import sys, app.cli; heavy = ('tvm', 'sqlite_utils', 'pandas', 'numpy', 'onnx', 'streamlit', 'torch'); "
            "print(' '.join(m for m in heavy if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"loaded at start: {out}"
