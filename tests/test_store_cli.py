"""``schedx leaderboard`` and ``schedx db ...`` in-process with click's CliRunner."""

from __future__ import annotations

import csv
import io
import json

import click
import pytest
from click.testing import CliRunner

from app.cli import cli
from app.cli_store import db, leaderboard
from store import Store
from tests.store_cases import MS_HW, MS_TARGET, fill_demo, matmul_trace, write_ms

HW = "test-machine/2c"


@pytest.fixture
def demo(tmp_path):
    path = tmp_path / "demo.db"
    ids = fill_demo(path, hardware=HW)
    return path, ids


def run(*args, ok=True):
    result = CliRunner().invoke(cli, list(args), obj={}, catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, result.output
    return result


def test_every_command_has_help():
    for command in (leaderboard, db, *db.commands.values()):
        assert command.help and command.help.strip(), command.name
        result = CliRunner().invoke(command, ["--help"])
        assert result.exit_code == 0 and "Usage" in result.output
    assert {"leaderboard", "db"} <= set(cli.commands)


def test_leaderboard_table(demo):
    path, ids = demo
    out = run("leaderboard", "--db", str(path), "--hardware", HW).output
    lines = out.strip().splitlines()
    assert lines[0].split()[:3] == ["RANK", "WORKLOAD", "GFLOPS"]
    assert len(lines) == 3 and "matmul_512x512x512_float32" in out and "conv2d_1x64x56x56" in out
    assert "llvm znver4 2c" in out


def test_leaderboard_json_filters(demo):
    path, ids = demo
    rows = json.loads(run("leaderboard", "--db", str(path), "--any-hardware", "--json").output)
    assert len(rows) == 3 and [r["rank"] for r in rows] == [1, 2, 3]
    assert rows[0]["gflops"] >= rows[1]["gflops"]
    rows = json.loads(run("leaderboard", "--db", str(path), "--hardware", HW, "--source", "manual", "--json").output)
    assert {r["source"] for r in rows} == {"manual"}
    rows = json.loads(run("leaderboard", "--db", str(path), "--hardware", HW, "--workload", "matmul*", "--top", "2",
                          "--json").output)
    assert [r["id"] for r in rows] == [ids[2], ids[1]]  # that workload's records, fastest first
    rows = json.loads(run("leaderboard", "--db", str(path), "--hardware", HW, "--verified-only", "--json").output)
    assert [r["id"] for r in rows] == [ids[1]]
    rows = json.loads(run("leaderboard", "--db", str(path), "--any-hardware", "--target", "cuda", "--json").output)
    assert rows == []


def test_leaderboard_csv(demo):
    path, _ = demo
    out = run("leaderboard", "--db", str(path), "--any-hardware", "--csv").output
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 3 and {"rank", "workload", "gflops", "median_ms", "id", "target_json"} <= set(rows[0])


def test_leaderboard_empty_and_elsewhere(tmp_path, demo):
    out = run("leaderboard", "--db", str(tmp_path / "none.db")).output
    assert "No records yet" in out and "schedx db import" in out
    assert not (tmp_path / "none.db").exists()
    path, _ = demo
    out = run("leaderboard", "--db", str(path), "--hardware", "some/other/machine").output
    assert "try --any-hardware" in out
    assert json.loads(run("leaderboard", "--db", str(tmp_path / "none.db"), "--json").output) == []


def test_db_env_var(demo, monkeypatch):
    path, _ = demo
    monkeypatch.setenv("SCHEDX_DB", str(path))
    data = json.loads(run("db", "info", "--json").output)
    assert data["path"] == str(path) and data["records"] == 7 and data["schema_version"] == 4


def test_db_info_text(demo):
    path, _ = demo
    out = run("db", "info", "--db", str(path)).output
    assert "2 workloads, 7 records" in out and "by source" in out


def test_db_import_export_merge(tmp_path):
    ms_dir = write_ms(tmp_path / "work", [["9593177933350849261", "bW9kdWxl"]],
                      [[0, [matmul_trace([16, 4]), [0.002], MS_TARGET, None]],
                       [0, [matmul_trace([8, 8]), [0.001], MS_TARGET, None]]])
    a = tmp_path / "a.db"
    summary = json.loads(run("db", "import", str(ms_dir), "--db", str(a), "--hardware", MS_HW, "--json").output)
    assert summary["records_added"] == 2 and summary["workloads_added"] == 1
    with Store(a) as store:  # the CLI canonicalises targets with TVM's help
        assert store.records()[0].target == '{"kind": "llvm", "mcpu": "znver4", "num-cores": 2}'
    out = run("db", "import", str(ms_dir), "--db", str(a), "--hardware", MS_HW).output
    assert "imported 0 records (2 already there)" in out
    out = run("db", "export", str(tmp_path / "out"), "--db", str(a), "--hardware", MS_HW).output
    assert "wrote 2 records of 1 workloads" in out
    assert len((tmp_path / "out" / "database_tuning_record.json").read_text().splitlines()) == 2
    again = run("db", "export", str(tmp_path / "out"), "--db", str(a), "--any-hardware", ok=False)
    assert again.exit_code == 1 and "--force" in again.output
    assert run("db", "export", str(tmp_path / "out"), "--db", str(a), "--any-hardware", "--force").exit_code == 0
    b = tmp_path / "b.db"
    fill_demo(b, hardware=HW)
    merged = json.loads(run("db", "merge", str(b), "--db", str(a), "--json").output)
    assert merged["records_added"] == 7 and merged["workloads_added"] == 2
    assert "merged 0 records (7 already there)" in run("db", "merge", str(b), "--db", str(a)).output


@pytest.mark.parametrize("args, message", [
    (["db", "info", "--db", "{bad}"], "not a SQLite database"),
    (["leaderboard", "--db", "{bad}"], "not a SQLite database"),
    (["db", "merge", "{bad}", "--db", "{good}"], "not a SQLite database"),
    (["db", "import", "{folder}", "--db", "{good}"], "database_workload.json"),
    (["db", "info", "--db", "{missing}"], "no schedx database"),
])
def test_errors_exit_1_without_traceback(tmp_path, args, message):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not a database at all" * 10)
    (tmp_path / "folder").mkdir()
    paths = {"bad": bad, "good": tmp_path / "good.db", "folder": tmp_path / "folder", "missing": tmp_path / "m.db"}
    result = CliRunner().invoke(cli, [a.format(**paths) for a in args], obj={})
    assert result.exit_code == 1, result.output
    assert message in result.output and "Traceback" not in result.output
    assert bad.read_bytes() == b"not a database at all" * 10


def test_malformed_import_names_file_and_line(tmp_path):
    ms_dir = write_ms(tmp_path / "work", [["1", "bW9k"]], [[0, [matmul_trace([1, 2]), [0.1], MS_TARGET, None]]])
    (ms_dir / "database_tuning_record.json").write_text('[0, [[[], []], [0.1], {"kind": "llvm"}, null]]\n{oops\n')
    result = CliRunner().invoke(cli, ["db", "import", str(ms_dir), "--db", str(tmp_path / "x.db")], obj={})
    assert result.exit_code == 1
    assert "database_tuning_record.json, line 2" in result.output
    with Store(tmp_path / "x.db") as store:
        assert store.count() == 0


def test_usage_errors():
    result = CliRunner().invoke(leaderboard, ["--json", "--csv"])
    assert result.exit_code == 2 and "either --json or --csv" in result.output
    assert isinstance(leaderboard, click.Command)
