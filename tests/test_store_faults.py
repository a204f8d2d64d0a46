"""Bad files and bad luck: what is not ours is refused untouched, a killed writer leaves no
partial batch, and several processes share one file without "database is locked"."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from store import CorruptDatabaseError, ForeignDatabaseError, SchemaTooNewError, Store, StoreError, Workload
from store.schema import META_TABLE

ROOT = Path(__file__).resolve().parent.parent


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _untouched(path: Path, before: str) -> None:
    assert _digest(path) == before
    assert not Path(f"{path}-wal").exists() and not Path(f"{path}-journal").exists()


def test_random_bytes_are_refused_untouched(tmp_path):
    path = tmp_path / "schedx.db"
    path.write_bytes(b"\x00not sqlite" + os.urandom(8192))
    before = _digest(path)
    with pytest.raises(CorruptDatabaseError, match="not a SQLite database"):
        Store(path)
    _untouched(path, before)


def test_sqlite_header_with_garbage_is_refused_untouched(tmp_path):
    path = tmp_path / "schedx.db"
    path.write_bytes(b"SQLite format 3\x00" + os.urandom(8192))
    before = _digest(path)
    with pytest.raises(CorruptDatabaseError):
        Store(path)
    _untouched(path, before)


def test_foreign_sqlite_is_refused_untouched(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('ada')")
    conn.commit()
    conn.close()
    before = _digest(path)
    with pytest.raises(ForeignDatabaseError, match="another application") as err:
        Store(path)
    assert isinstance(err.value, CorruptDatabaseError)
    _untouched(path, before)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # not switched to WAL
    conn.close()


def test_meta_table_of_another_app_is_refused(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute(f"CREATE TABLE {META_TABLE} (key TEXT PRIMARY KEY, value TEXT)")
    conn.execute(f"INSERT INTO {META_TABLE} VALUES ('app', 'imposter')")
    conn.commit()
    conn.close()
    before = _digest(path)
    with pytest.raises(ForeignDatabaseError, match="not a schedx database"):
        Store(path)
    _untouched(path, before)


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "schedx.db"
    Store(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"UPDATE {META_TABLE} SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    before = _digest(path)
    with pytest.raises(SchemaTooNewError, match="schema version 99.*newer schedx"):
        Store(path)
    assert _digest(path) == before
    assert issubclass(SchemaTooNewError, StoreError)



def _version_1_database(path):
    """A database as schedx wrote it before schema 2 (the candidate hash in the environment)."""
    from store.schema import APP, APPLICATION_ID, MIGRATIONS

    conn = sqlite3.connect(path)
    conn.executescript(MIGRATIONS[1])
    conn.execute(f"INSERT INTO {META_TABLE} VALUES ('app', ?), ('schema_version', '1'), ('created', 'x')", [APP])
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("INSERT INTO workloads (key, name, created) VALUES ('w1', 'matmul', 'x')")
    conn.execute("INSERT INTO records (workload_key, target, hardware, source, status, latencies, median_s, "
                 "environment, created, ident) VALUES ('w1', 't', 'h', 'search', 'ok', '[0.002]', 0.002, "
                 "'{\"candidate\": \"123\", \"cpu\": \"z\"}', 'x', 'i1'), ('w1', 't', 'h', 'manual', 'ok', '[0.003]', "
                 "0.003, '{}', 'x', 'i2')")
    conn.commit()
    conn.close()


def test_version_1_database_is_migrated_and_keeps_its_search_candidates(tmp_path):
    from store.schema import SCHEMA_VERSION

    path = tmp_path / "old.db"
    _version_1_database(path)
    store = Store(path)
    assert store.info()["schema_version"] == SCHEMA_VERSION == 4
    assert store.measured_candidates("w1", "t", "h") == {"123": (1, [0.002])}
    assert [r.candidate for r in store.records(order="id")] == ["123", None]
    store.close()
    assert Store(path).info()["schema_version"] == SCHEMA_VERSION  # opening again changes nothing


def test_merging_an_older_database_reads_it_without_migrating_it(tmp_path):
    other = tmp_path / "old.db"
    _version_1_database(other)
    before = _digest(other)
    ours = Store(tmp_path / "ours.db")
    result = ours.merge(other)
    assert result["records_added"] == 2
    assert ours.measured_candidates("w1", "t", "h") and list(ours.measured_candidates("w1", "t", "h")) == ["123"]
    assert _digest(other) == before


_WRITER = textwrap.dedent("""
    import sys
    from store import Record, Store, Workload
    path, n = sys.argv[1], int(sys.argv[2])
    store = Store(path)
    store.add_workload(Workload(key="1", name="w"))
    env = {"note": "x" * 800}
    batch = [Record(workload_key="1", target="llvm", hardware="hw", source="search", status="ok",
                    steps=[{"primitive": "split", "args": {"i": i}}], trace=None, latencies=[1e-3, 2e-3],
                    median_s=1.5e-3, gflops=None, environment=env) for i in range(n)]
    print("ready", flush=True)
    store.add_records(batch)
    print("done", flush=True)
""")


def test_kill_during_a_batch_leaves_none_or_all(tmp_path):
    path, n = tmp_path / "schedx.db", 60_000
    wal = Path(f"{path}-wal")
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(n)], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "ready"
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:  # the batch is being written to the WAL
        if wal.exists() and wal.stat().st_size > 8 << 20:
            break
        time.sleep(0.005)
    alive_at_kill = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = "done" in proc.stdout.read()
    with Store(path) as store:
        count = store.count()
        assert store.workload("1") is not None
        assert store._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert alive_at_kill and not finished, "the writer finished before it was killed; make the batch bigger"
    assert count in (0, n), f"partial batch: {count} of {n} rows"


_CONCURRENT_WRITER = textwrap.dedent("""
    import os, sys, time
    from store import Record, Store
    path, who, n, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    store = Store(path)
    while not os.path.exists(go):
        time.sleep(0.001)
    for i in range(n):
        store.add_record(Record(workload_key="1", target="llvm", hardware=who, source="search", status="ok",
                                steps=[{"primitive": "split", "args": {"i": i}}], trace=None,
                                latencies=[1e-3 + i * 1e-7], median_s=None, gflops=None, environment={}))
    print("wrote", n)
""")

_CONCURRENT_READER = textwrap.dedent("""
    import os, sys, time
    from store import Store
    path, go, stop = sys.argv[1], sys.argv[2], sys.argv[3]
    store = Store(path)
    while not os.path.exists(go):
        time.sleep(0.001)
    queries = 0
    while not os.path.exists(stop):
        store.best()
        store.history("1", hardware="w0")
        store.count()
        queries += 1
    print("queries", queries)
""")


def test_three_writers_and_a_reader(tmp_path):
    path, go, stop = tmp_path / "schedx.db", tmp_path / "go", tmp_path / "stop"
    with Store(path) as store:
        store.add_workload(Workload(key="1", name="w"))
    writers = [subprocess.Popen([sys.executable, "-c", _CONCURRENT_WRITER, str(path), f"w{i}", "1000", str(go)],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    reader = subprocess.Popen([sys.executable, "-c", _CONCURRENT_READER, str(path), str(go), str(stop)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)  # let all four open the file, then start together
    go.touch()
    outs = [w.communicate(timeout=300) for w in writers]
    stop.touch()
    rout, rerr = reader.communicate(timeout=60)
    for w, (out, err) in zip(writers, outs):
        assert w.returncode == 0 and "locked" not in err, err
        assert out.strip() == "wrote 1000"
    assert reader.returncode == 0 and "locked" not in rerr, rerr
    assert int(rout.split()[-1]) > 0
    with Store(path) as store:
        assert store.count() == 3000
        assert {h: store.count(hardware=h) for h in ("w0", "w1", "w2")} == {"w0": 1000, "w1": 1000, "w2": 1000}


_WRITE_THEN_CLOSE = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from store import Store, Workload
    path, go = sys.argv[1], Path(sys.argv[2])
    store = Store(path)
    store.add_workload(Workload(key="2", name="other process"))
    print("open", flush=True)
    while not go.exists():
        time.sleep(0.01)
    store.close()
""")


def test_opening_again_keeps_this_process_locks_so_another_never_deletes_the_log_under_it(tmp_path):
    """The CI failure "cannot open ...: disk I/O error": reading the file's header with a handle of
    our own dropped the POSIX locks this process's open connections hold, so another process
    closing last-but-one thought it was the last, checkpointed and deleted the write-ahead log
    and its index while this process still read through them."""
    path, go = tmp_path / "schedx.db", tmp_path / "go"
    held = Store(path)
    held.add_workload(Workload(key="1", name="this process"))
    other = subprocess.Popen([sys.executable, "-c", _WRITE_THEN_CLOSE, str(path), str(go)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert other.stdout.readline().strip() == "open", other.stderr.read()
    Store(path).close()  # another open and close in this process while `held` and `other` hold the file
    go.touch()
    assert other.wait(timeout=60) == 0, other.stderr.read()
    assert Path(f"{path}-wal").exists() and Path(f"{path}-shm").exists(), "the other process deleted them"
    assert {w.key for w in held.workloads()} == {"1", "2"}
    held.close()
