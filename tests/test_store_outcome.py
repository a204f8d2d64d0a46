"""Outcomes are values (``store.Outcome``), not prefixes of the error text: schema 3 migrates the
rows schema 2 marked with ``infrastructure: `` to ``infra_error`` without losing a byte, once, in
one transaction; an ``infra_error`` never ranks and a resumed search measures it again."""

from __future__ import annotations

import json
import sqlite3

import pytest
import sqlite_utils

from store import Outcome, Record, Store, StoreError, Workload
from store.records import STATUSES
from store.schema import APP, APPLICATION_ID, META_TABLE, MIGRATIONS, SCHEMA_VERSION

T, HW = '{"kind": "llvm"}', "hw/2c"


def _record(candidate: str, status, latencies, error: str = "", **kw) -> Record:
    return Record(workload_key="w1", target=T, hardware=HW, source="search", status=status, steps=[], trace=None,
                  latencies=latencies, median_s=None, gflops=None, environment={"cpu": "z"}, error=error,
                  candidate=candidate, **kw)


def test_outcome_is_the_status_vocabulary():
    assert [o.value for o in Outcome] == list(STATUSES) == ["ok", "build_error", "run_error", "verify_failed",
                                                            "timeout", "infra_error"]
    assert Outcome.OK == "ok" and isinstance(Outcome.INFRA_ERROR, str) and str(Outcome.TIMEOUT) == "timeout"
    assert json.dumps(Record.to_dict(_record("c", Outcome.INFRA_ERROR, [])))  # plain JSON
    assert _record("c", "verify_failed", []).outcome is Outcome.VERIFY_FAILED


def test_infra_errors_never_rank_and_are_measured_again(tmp_path):
    with Store(tmp_path / "schedx.db") as store:
        store.add_workload(Workload(key="w1", name="matmul", flops=1000))
        ids = store.add_records([
            _record("a", Outcome.OK, [2e-3]),
            _record("b", Outcome.INFRA_ERROR, [1e-9], error="RPC device unreachable"),  # a bogus time
            _record("c", Outcome.BUILD_ERROR, [], error="schedule does not build"),
            _record("d", "run_error", [], error="infrastructure: a run error mentioning the old marker"),
        ])
        assert store.record(ids[1]).status == "infra_error"
        assert store.record(ids[3]).status == "run_error"  # the status decides, never the text of the error
        assert set(store.measured_candidates("w1", T, HW)) == {"a", "c", "d"}
        assert [r.id for r in store.best()] == [ids[0]]
        assert [r.id for r in store.top_k("w1", T, HW, 5)] == [ids[0]]
        assert [r.id for r in store.top_k("w1", T, HW, 5, rank="mean")] == [ids[0]]
        assert store.count(status="infra_error") == 1
        with pytest.raises(StoreError, match="infra_error"):
            store.add_record(_record("e", "infrastructure", []))


def _version_2_database(path) -> None:
    """A database exactly as schema 2 left it, with the rows the v3 migration must carry over."""
    conn = sqlite3.connect(path)
    conn.executescript(MIGRATIONS[1])
    MIGRATIONS[2](sqlite_utils.Database(conn))
    conn.execute(f"INSERT INTO {META_TABLE} VALUES ('app', ?), ('schema_version', '2'), ('created', 'x')", [APP])
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("INSERT INTO workloads (key, name, created) VALUES ('w1', 'matmul', 'x')")
    rows = [
        ("ok", "[0.002, 0.004, 0.003]", 0.003, "", '{"cpu": "z"}', "c1"),
        ("run_error", "[]", None, "infrastructure: RPC session to 10.0.0.2 lost", '{"cpu": "z"}', "c2"),
        ("build_error", "[]", None, "infrastructure: worker did not start", "not json", "c3"),
        ("timeout", "[]", None, "no answer within 300 s", "{}", "c4"),
        ("run_error", "[]", None, "run: the kernel crashed (infrastructure: was not to blame)", "{}", "c5"),
    ]
    for i, (status, lat, median, error, env, cand) in enumerate(rows):
        conn.execute("INSERT INTO records (workload_key, target, hardware, source, status, latencies, median_s, "
                     "environment, error, created, ident, candidate) VALUES ('w1', ?, ?, 'search', ?, ?, ?, ?, ?, "
                     "'2025-01-01', ?, ?)", [T, HW, status, lat, median, env, error, f"i{i}", cand])
    conn.commit()
    conn.close()


def _rows(path) -> list[dict]:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    rows = [dict(r) for r in conn.execute("SELECT * FROM records ORDER BY id")]
    conn.close()
    return rows


def test_v3_migration_turns_the_infrastructure_prefix_into_a_status_and_loses_nothing(tmp_path):
    path = tmp_path / "v2.db"
    _version_2_database(path)
    before = _rows(path)
    with Store(path) as store:
        assert store.schema_version == SCHEMA_VERSION >= 3
        assert set(store.measured_candidates("w1", T, HW)) == {"c1", "c4", "c5"}
    after = _rows(path)
    assert [r["status"] for r in after] == ["ok", "infra_error", "infra_error", "timeout", "run_error"]
    for old, new in zip(before, after, strict=True):
        changed = {k for k in old if old[k] != new[k]}
        assert changed <= {"status", "environment"}
        if changed:  # the status it had is kept beside the machine description
            env = json.loads(new["environment"])
            assert env["previous_status"] == old["status"]
            rest = {k: v for k, v in env.items() if k != "previous_status"}
            assert rest == (json.loads(old["environment"]) if old["environment"].startswith("{")
                            else {"previous_environment": old["environment"]})
    assert all(r["run_secs"] is None for r in after)


def test_v3_migration_is_idempotent(tmp_path):
    path = tmp_path / "v2.db"
    _version_2_database(path)
    Store(path).close()
    once = _rows(path)
    conn = sqlite3.connect(path)
    conn.execute("BEGIN")
    MIGRATIONS[3](sqlite_utils.Database(conn))  # again, as a second process racing the first would
    conn.commit()
    conn.close()
    assert _rows(path) == once
    with Store(path) as store:
        assert store.schema_version == SCHEMA_VERSION


def test_v3_migration_is_all_or_nothing(tmp_path):
    path = tmp_path / "v2.db"
    _version_2_database(path)
    before = _rows(path)
    conn = sqlite3.connect(path)  # a status update that fails half-way through the migration
    conn.execute("CREATE TRIGGER boom BEFORE UPDATE OF status ON records BEGIN SELECT RAISE(ABORT, 'disk full'); END")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="disk full"):
        Store(path)
    assert _rows(path) == before  # no new column, no changed row
    conn = sqlite3.connect(path)
    assert conn.execute(f"SELECT value FROM {META_TABLE} WHERE key = 'schema_version'").fetchone()[0] == "2"
    conn.execute("DROP TRIGGER boom")
    conn.commit()
    conn.close()
    with Store(path) as store:
        assert store.schema_version == SCHEMA_VERSION and store.count(status="infra_error") == 2
