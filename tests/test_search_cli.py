"""`schedx sketches`, `schedx tune`, `schedx jobs` in-process."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from app.cli import cli

pytestmark = pytest.mark.heavy  # real builds or searches: left out of make test-fast


def test_sketches_text_and_json():
    r = CliRunner().invoke(cli, ["sketches", "matmul:M=32,N=32,K=32", "--sample", "1"])
    assert r.exit_code == 0, r.output
    assert "sketch 0" in r.output and "MultiLevelTiling" in r.output and "?" in r.output and "sample 0" in r.output
    data = json.loads(CliRunner().invoke(cli, ["sketches", "matmul:M=32,N=32,K=32", "--json"]).output)
    assert data["sketches"] and data["sketches"][0]["open_steps"]


def test_tune_writes_the_leaderboard_and_jobs_lists_it(tmp_path):
    db = str(tmp_path / "cli.db")
    r = CliRunner().invoke(cli, ["tune", "matmul:M=32,N=32,K=32", "--trials", "4", "--per-batch", "4",
                                 "--population", "32", "--generations", "1", "--db", db, "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output[r.output.index("{"):])
    assert summary["trials"] == 4 and summary["measured"] + summary["failed"] == 4
    (confirmed,) = summary["confirmed"]
    assert confirmed["default_s"] > 0 and confirmed["calls"] == 1 and confirmed["gain_s"] >= 0
    assert confirmed["after_origin"], confirmed
    jobs = json.loads(CliRunner().invoke(cli, ["jobs", "--db", db, "--json"]).output)
    assert jobs[0]["status"] == "done" and jobs[0]["progress"]["trials"] == 4
    lb = CliRunner().invoke(cli, ["leaderboard", "--db", db, "--json"])
    assert lb.exit_code == 0 and json.loads(lb.output)
    # timed as the model runs them (cache flushed before each single run), and the records say so
    from store import Store

    timings = {r.environment.get("timing", "")[:4] for r in Store(db).records() if r.status == "ok"}
    assert "cold" in timings, timings
    warm = str(tmp_path / "warm.db")
    r = CliRunner().invoke(cli, ["tune", "matmul:M=32,N=32,K=32", "--trials", "4", "--per-batch", "4",
                                 "--population", "32", "--generations", "1", "--warm-timing", "--confirm-rounds", "0",
                                 "--db", warm])
    assert r.exit_code == 0, r.output
    assert not any(r.environment.get("timing", "").startswith("cold") for r in Store(warm).records())


def test_bad_parameters_exit_1_before_any_work(tmp_path):
    db = str(tmp_path / "bad.db")
    cases = [
        (["tune", "matmul", "--trials", "0", "--db", db], "0 is not in 1.."),
        (["tune", "matmul", "--target", "tpu", "--db", db], "unknown target"),
        (["tune", "matmul", "--rpc-tracker", "127.0.0.1:1", "--rpc-key", "x", "--db", db], "cannot reach the RPC tracker"),
        (["tune", "not_a_kernel:M=3", "--db", db], "unknown kernel"),
        (["jobs", "--db", db, "stop", "42"], "no job 42"),
    ]
    for args, words in cases:
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 1, (args, r.output)
        assert words in r.output and "Traceback" not in r.output


def test_tune_minutes_without_trials_stops_on_time_and_the_job_is_done(tmp_path):
    db = str(tmp_path / "minutes.db")
    r = CliRunner().invoke(cli, ["tune", "matmul:M=32,N=32,K=32", "--minutes", "0.1", "--per-batch", "4",
                                 "--population", "32", "--generations", "1", "--timeout", "20", "--db", db, "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output[r.output.index("{"):])
    assert summary["stopped"] == "time budget" and summary["trials"] > 0
    jobs = json.loads(CliRunner().invoke(cli, ["jobs", "--db", db, "--json"]).output)
    assert jobs[0]["status"] == "done" and jobs[0]["params"]["params"]["minutes"] == 0.1
    assert jobs[0]["params"]["params"]["timeout_s"] == 20



def test_jobs_names_a_measuring_job_of_another_database_as_such(tmp_path, monkeypatch):
    """Job ids restart at 1 in every database: the measuring lock's holder from another database
    is 'job 2 of OTHER', not this database's job 2."""
    import json
    import os
    import time

    monkeypatch.setenv("SCHEDX_LOCK_DIR", str(tmp_path / "lock"))
    (tmp_path / "lock").mkdir()
    mine, other = tmp_path / "mine.db", tmp_path / "other.db"
    for db, says in ((other, f"job 2 of {other}"), (mine, "(job 2, matmul")):
        (tmp_path / "lock" / "holder.json").write_text(json.dumps(
            {"pid": os.getpid(), "what": "matmul_M64", "job": 2, "db": str(db), "since": time.time()}))
        r = CliRunner().invoke(cli, ["jobs", "--db", str(mine)])
        assert r.exit_code == 0, r.output
        line = next(x for x in r.output.splitlines() if x.startswith("measuring on this machine"))
        assert says in line, line


def test_a_foreground_tune_prints_a_line_per_batch(tmp_path):
    """Not a bar that stays at "searching" for minutes: a line when it starts, one per batch."""
    db = str(tmp_path / "lines.db")
    r = CliRunner().invoke(cli, ["tune", "matmul:M=32,N=32,K=32", "--trials", "8", "--per-batch", "4",
                                 "--population", "32", "--generations", "1", "--db", db])
    assert r.exit_code == 0, r.output
    lines = [x for x in r.output.splitlines() if "] batch " in x]
    assert len(lines) >= 2 and "/8 trials" in lines[-1] and "GFLOPS" in lines[-1], r.output
    assert "timing each task's default schedule first" in r.output
    # issue 28: per task the default and the chosen schedule, timed cold in turns, and the gain per run
    table = r.output[r.output.index("per task, timed alone"):].splitlines()
    assert "chosen from" in table[1] and "matmul" in table[2], r.output
    assert table[2].split()[-1] in ("default", "sketch") or "default rules" in table[2], table[2]
