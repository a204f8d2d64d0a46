"""What a careless or hostile user types, at the store and its commands: an empty ``SCHEDX_DB``,
absurd counts, impossible dates, import files built to break the parser. Each is one line, exit
status 1 on the command line, a ``StoreError`` in the library; nothing is written."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

from store import ImportFormatError, Record, Store, StoreError, Workload, default_db_path
from tests.store_cases import MS_ARGS, MS_TARGET, matmul_trace, write_ms

HW = "hw/2c"


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "schedx.db") as s:
        s.add_workload(Workload(key="1", name="matmul", flops=2 * 64 ** 3))
        s.add_records([Record(workload_key="1", target='{"kind": "llvm"}', hardware=HW, source="manual", status="ok",
                              steps=[], trace=None, latencies=[m], median_s=None, gflops=None, environment={},
                              created=f"2025-01-0{day}T12:00:00+00:00")
                       for day, m in ((1, 3e-3), (2, 2e-3), (3, 1e-3))])
        yield s


def run(*args: str):
    from app.cli import cli

    return CliRunner().invoke(cli, list(args), obj={})


def assert_one_line_error(result, *words: str) -> None:
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for word in words:
        assert word in lines[0], result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


# the database setting

@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_schedx_db_is_an_error_not_the_home_database(monkeypatch, tmp_path, value):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SCHEDX_DB", value)
    with pytest.raises(StoreError, match="SCHEDX_DB is set but empty"):
        default_db_path()
    with pytest.raises(StoreError, match="SCHEDX_DB is set but empty"):
        Store()
    assert_one_line_error(run("db", "info"), "SCHEDX_DB is set but empty")
    assert_one_line_error(run("leaderboard"), "SCHEDX_DB is set but empty")
    assert not (tmp_path / "home").exists()


# counts

@pytest.mark.parametrize("call", [
    lambda s: s.best(top=10 ** 20),
    lambda s: s.records(limit=10 ** 20),
    lambda s: s.records(limit=5, offset=-1),
    lambda s: s.records(limit="5; DROP TABLE records"),
    lambda s: s.top_k("1", None, HW, 10 ** 30),
    lambda s: s.top_k("1", None, HW, True),
])
def test_absurd_counts_are_store_errors(store, call):
    with pytest.raises(StoreError, match="must be"):
        call(store)
    assert store.count() == 3


@pytest.mark.parametrize("top", ["99999999999999999999", "0", "-3", "1e3", "２０", "12abc", "1" * 5000])
def test_leaderboard_top_out_of_range_is_one_line(store, top):
    assert_one_line_error(run("leaderboard", "--db", str(store.path), "--any-hardware", "--top", top), "--top")


def test_leaderboard_top_at_the_limits(store):
    for top in ("1", "1000000"):
        result = run("leaderboard", "--db", str(store.path), "--any-hardware", "--top", top, "--json")
        assert result.exit_code == 0 and len(json.loads(result.output)) == 1, result.output


# dates

@pytest.mark.parametrize("bad", ["2020-13-45", "2025-02-30", "yesterday", "20250101", "2025-01-01T25:00", "２０２５-01-01"])
def test_impossible_dates_are_refused(store, bad):
    with pytest.raises(StoreError, match="date"):
        store.records(since=bad)
    with pytest.raises(StoreError, match="date"):
        store.count(until=bad)
    assert_one_line_error(run("leaderboard", "--db", str(store.path), "--any-hardware", "--since", bad), "--since")


def test_valid_dates_filter(store):
    assert store.count(since="2025-01-02") == 2
    assert store.count(since=date(2025, 1, 2)) == 2
    assert store.count(since="2025-01-02T12:00:00Z") == 2  # at the instant: included
    assert store.count(since="2025-01-02T13:00:00+02:00") == 2  # 11:00 UTC
    assert store.count(since="2025-01-02T13:00:00") == 1  # no zone: UTC
    later = datetime(2025, 1, 2, 12, tzinfo=timezone(timedelta(hours=-1)))  # 13:00 UTC
    assert store.count(since=later) == 1
    result = run("leaderboard", "--db", str(store.path), "--any-hardware", "--since", "2025-01-03", "--json")
    assert result.exit_code == 0 and [r["median_ms"] for r in json.loads(result.output)] == [1.0]


def test_cli_paths_that_cannot_exist(tmp_path):
    long_name = str(tmp_path / ("x" * 5000))
    assert_one_line_error(run("leaderboard", "--db", long_name), "cannot open")
    assert_one_line_error(run("db", "info", "--db", long_name), "cannot open")


# import files built to break the parser

def _ms(tmp_path, workloads, records):
    return write_ms(tmp_path / "ms", workloads, records)


@pytest.mark.parametrize("case", ["deep", "digits", "negative", "nan", "huge", "bool_index", "target"])
def test_malformed_import_names_file_and_line(store, tmp_path, case):
    good_w = ["9593177933350849261", "bW9k"]
    good_r = [0, [matmul_trace([16, 4]), [0.002], MS_TARGET, MS_ARGS]]
    workloads, records = [good_w], [good_r]
    if case == "digits":
        workloads = [["٩٥٩٣١٧٧", "bW9k"]]  # Arabic-Indic digits pass str.isdigit()
    elif case == "negative":
        records = [good_r, [0, [matmul_trace([8, 8]), [-0.5], MS_TARGET, MS_ARGS]]]
    elif case == "bool_index":  # JSON true is no workload index, even with a workload at index 1
        workloads = [good_w, ["123", "bW9k"]]
        records = [good_r, [True, [matmul_trace([8, 8]), [0.5], MS_TARGET, MS_ARGS]]]
    elif case == "target":
        records = [good_r, [0, [matmul_trace([8, 8]), [0.5], {"kind": "llvm", "mcpu": 123}, MS_ARGS]]]
    folder = _ms(tmp_path, workloads, records)
    rfile = folder / "database_tuning_record.json"
    if case == "deep":
        rfile.write_text(json.dumps(good_r) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    elif case == "nan":
        nan_r = [0, [matmul_trace([8, 8]), [float("nan")], MS_TARGET, MS_ARGS]]
        rfile.write_text(json.dumps(good_r) + "\n" + json.dumps(nan_r) + "\n")
    elif case == "huge":
        rfile.write_text(json.dumps(good_r) + "\n" + '[0, [' + json.dumps(matmul_trace([8, 8])) + ", [1" + "0" * 400
                         + "], " + json.dumps(MS_TARGET) + ", null]]\n")

    def target_fn(target: dict) -> str:  # stands in for TVM's canonicaliser: it rejects what TVM rejects
        if not isinstance(target.get("mcpu", ""), str):
            raise ValueError("mcpu must be a string")
        return json.dumps(target, sort_keys=True)

    with pytest.raises(ImportFormatError) as err:
        store.import_metaschedule(folder, hardware=HW, target_fn=target_fn)
    where = "database_workload.json, line 1" if case == "digits" else "database_tuning_record.json, line 2"
    assert where in str(err.value) and "nothing was imported" in str(err.value)
    assert store.count() == 3


def test_unreadable_import_file_is_an_import_error(store, tmp_path):
    folder = _ms(tmp_path, [["1", "bW9k"]], [])
    (folder / "database_tuning_record.json").unlink()
    (folder / "database_tuning_record.json").mkdir()  # a folder where a file should be
    summary = store.import_metaschedule(folder, hardware=HW)  # no record file: the workloads only
    assert summary["records_added"] == 0
    (folder / "database_workload.json").write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(ImportFormatError, match="not UTF-8"):
        store.import_metaschedule(folder, hardware=HW)


def test_export_into_a_file_is_a_store_error(store, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    with pytest.raises(StoreError, match="cannot create the folder"):
        store.export_metaschedule(blocker / "ms")


@pytest.mark.parametrize("kind", ["fifo", "device link", "wal fifo"])
@pytest.mark.parametrize("opener", ["Store", "Store(create=False)", "open_readonly"])
def test_a_database_path_that_is_no_regular_file_is_refused_before_sqlite_opens_it(tmp_path, monkeypatch, kind, opener):
    """Issue 49: `Store('/dev/full')` (what `tune --db /dev/full` and SCHEDX_DB=/dev/full reach) made
    SQLite create /dev/full-journal and then said "disk I/O error". Every opener checks the path
    first (store.paths.check_db_path): here SQLite is not even allowed to open anything. A device is
    reached through a link under tmp_path; nothing is created in /dev."""
    import os

    from store import schema

    monkeypatch.setattr(schema, "connect", lambda path, **_: pytest.fail(f"SQLite was asked to open {path}"))
    path = tmp_path / "x.db"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device link":
        if not os.path.exists("/dev/zero"):
            pytest.skip("no /dev/zero here")
        path.symlink_to("/dev/zero")
    else:
        path.write_bytes(b"")
        os.mkfifo(tmp_path / "x.db-wal")
    before = sorted(p.name for p in tmp_path.iterdir())
    words = {"fifo": r"x.db is a FIFO \(named pipe\), not a database file",
             "device link": "x.db is a character device", "wal fifo": "x.db-wal, where SQLite keeps"}[kind]
    with pytest.raises(StoreError, match=words):
        if opener == "open_readonly":
            schema.open_readonly(path)
        else:
            Store(path, create=opener == "Store")
    assert sorted(p.name for p in tmp_path.iterdir()) == before
