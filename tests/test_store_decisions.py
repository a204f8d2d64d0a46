"""In-model decisions kept in the store (schema 4): one answer per question (model, target,
machine, precision, the records judged), replaced when asked again; an older database is migrated
to hold them without losing a row, and one opened read-only answers that it holds none."""

from __future__ import annotations

import sqlite3

import sqlite_utils

from store import Decision, Store
from store.schema import APP, APPLICATION_ID, DECISIONS_TABLE, META_TABLE, MIGRATIONS, SCHEMA_VERSION

QUESTION = {"workload_key": "123", "target": '{"kind": "llvm"}', "hardware": "x86_64/cpu/avx2/2c", "precision": "fp32"}


def _decision(candidates=(3, 1), kept=(1,), **kw) -> Decision:
    return Decision(**QUESTION, candidates=candidates, kept=kept, ratio=0.93, low=0.88, high=0.97,
                    details={"check": {"rounds": 3}}, **kw)


def test_a_decision_is_kept_with_its_interval_and_found_by_its_question(tmp_path):
    with Store(tmp_path / "s.db") as store:
        assert store.in_model_decision(**QUESTION, candidates=[1, 3]) is None
        saved = store.save_in_model_decision(_decision())
        assert saved.id and saved.created and saved.candidates == (1, 3) and saved.dropped == (3,)
        found = store.in_model_decision(**QUESTION, candidates=[3, 1, 1])  # the same set of records, in any order
        assert found == saved and (found.ratio, found.low, found.high) == (0.93, 0.88, 0.97)
        assert found.details == {"check": {"rounds": 3}}
        for other in ({"candidates": [1]}, {"candidates": [1, 3, 4]}):  # another set of records
            assert store.in_model_decision(**QUESTION | {k: v for k, v in other.items() if k != "candidates"},
                                  candidates=other["candidates"]) is None
        for key, value in (("hardware", "aarch64/other/neon/4c"), ("precision", "bf16"), ("target", "{}"),
                           ("workload_key", "456")):
            assert store.in_model_decision(**QUESTION | {key: value}, candidates=[1, 3]) is None
        again = store.save_in_model_decision(_decision(kept=()))  # asked again: replaced
        assert store.in_model_decision(**QUESTION, candidates=[1, 3]) == again and again.kept == ()
        assert store.info()["schema_version"] == SCHEMA_VERSION == 4


def _version_3_database(path) -> None:
    """A database as schema 3 left it, with a record."""
    conn = sqlite3.connect(path)
    conn.executescript(MIGRATIONS[1])
    MIGRATIONS[2](sqlite_utils.Database(conn))
    MIGRATIONS[3](sqlite_utils.Database(conn))
    conn.execute(f"INSERT INTO {META_TABLE} VALUES ('app', ?), ('schema_version', '3'), ('created', 'x')", [APP])
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("INSERT INTO workloads (key, name, created) VALUES ('w1', 'matmul', 'x')")
    conn.execute("INSERT INTO records (workload_key, target, hardware, source, status, latencies, median_s, "
                 "environment, created, ident, candidate) VALUES ('w1', 't', 'h', 'search', 'ok', '[0.002]', 0.002, "
                 "'{}', '2025-01-01', 'i1', 'c1')")
    conn.commit()
    conn.close()


def _rows(path) -> list[tuple]:
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT * FROM records ORDER BY id").fetchall()
    conn.close()
    return rows


def test_a_schema_3_database_is_migrated_to_keep_decisions(tmp_path):
    path = tmp_path / "v3.db"
    _version_3_database(path)
    before = _rows(path)
    with Store(path) as store:
        assert store.schema_version == SCHEMA_VERSION == 4
        assert store.in_model_decision(**QUESTION, candidates=[1]) is None
        store.save_in_model_decision(_decision(candidates=(1,)))
        assert store.in_model_decision(**QUESTION, candidates=[1]).kept == (1,)
        assert [r.id for r in store.records()] == [1]
    assert _rows(path) == before  # the migration adds a table and changes no record
    conn = sqlite3.connect(path)
    conn.execute("BEGIN")
    for statement in filter(str.strip, MIGRATIONS[4].split(";")):  # again, as a racing process would
        conn.execute(statement)
    conn.commit()
    assert conn.execute(f"SELECT COUNT(*) FROM {DECISIONS_TABLE}").fetchone()[0] == 1
    conn.close()
    with Store(path) as store:  # opening again changes nothing
        assert store.schema_version == 4 and store.in_model_decision(**QUESTION, candidates=[1]) is not None


def test_an_older_database_opened_read_only_holds_no_decision(tmp_path):
    path = tmp_path / "v3.db"
    _version_3_database(path)
    with Store(path, read_only=True) as store:
        assert store.schema_version == 3  # read as it is, never migrated
        assert store.in_model_decision(**QUESTION, candidates=[1]) is None
    assert DECISIONS_TABLE not in sqlite_utils.Database(sqlite3.connect(path)).table_names()
