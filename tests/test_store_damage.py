"""A database damaged mid-way (pages overwritten, as a failing disk or a careless copy leaves it):
refused at open with one clear message, never a ``sqlite3.DatabaseError`` traceback, never a
leaderboard answered from whatever pages are still readable; errors name the file at fault."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from store import CorruptDatabaseError, Store, StoreError
from store import schema
from tests.store_cases import damage_pages, fill_demo, filled_store


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def damaged(tmp_path) -> Path:
    path = filled_store(tmp_path / "damaged.db", 600)
    damage_pages(path)
    return path


def test_a_damaged_database_is_refused_at_open(damaged):
    before = _digest(damaged)
    conn = sqlite3.connect(damaged)  # SQLite itself still opens it and answers from the good pages
    assert conn.execute("SELECT COUNT(*) FROM workloads").fetchone()[0] == 1
    conn.close()
    for read_only in (None, True):
        with pytest.raises(CorruptDatabaseError, match=r"damaged.db is damaged .*quick_check|damaged.db is damaged"):
            Store(damaged, read_only=read_only)
    assert _digest(damaged) == before


def test_damage_after_opening_is_a_store_error_not_a_traceback(tmp_path):
    """A file damaged while a process has it open (the UI, a search): the first read that meets a
    bad page raises CorruptDatabaseError; check() finds it at once."""
    path = filled_store(tmp_path / "schedx.db", 3000)  # bigger than SQLite's page cache
    with Store(path) as store:
        damage_pages(path)
        with pytest.raises(CorruptDatabaseError, match="is damaged"):
            store.records()
        with pytest.raises(CorruptDatabaseError, match="is damaged"):
            store.check()
        for call in (store.info, lambda: store.export_metaschedule(tmp_path / "ms")):
            with pytest.raises(CorruptDatabaseError, match="is damaged"):
                call()
    assert not (tmp_path / "ms" / "database_tuning_record.json").exists()


def test_quick_check_runs_once_per_process_per_file_version(tmp_path):
    path = filled_store(tmp_path / "schedx.db", 50)
    Store(path).close()  # the first open in this process checks the file
    db = schema.connect(path)
    try:
        assert schema.check_once(db, path) is False  # unchanged since: not again
    finally:
        db.close()
    damage_pages(path)  # the file changed under us: the next open checks it again
    with pytest.raises(CorruptDatabaseError):
        Store(path)
    copy = tmp_path / "copy.db"
    shutil.copy(filled_store(tmp_path / "fresh.db", 5), copy)
    Store(copy).close()  # a copy is a new file, checked like any other


def test_merge_errors_name_the_file_at_fault(tmp_path, damaged):
    ours_path = filled_store(tmp_path / "ours.db", 5)
    with Store(ours_path) as ours:
        with pytest.raises(CorruptDatabaseError) as err:
            ours.merge(damaged)
        assert str(damaged) in str(err.value) and str(ours_path) not in str(err.value)
        assert ours.count() == 5
    with Store(ours_path) as ours, pytest.raises(StoreError) as err:
        ours.merge(tmp_path / "missing.db")
    assert str(tmp_path / "missing.db") in str(err.value)


@pytest.mark.parametrize("args", [
    ["db", "info", "--db", "{damaged}"],
    ["db", "export", "{out}", "--db", "{damaged}", "--any-hardware"],
    ["db", "merge", "{damaged}", "--db", "{good}"],
    ["leaderboard", "--db", "{damaged}", "--any-hardware"],
])
def test_cli_refuses_a_damaged_database_in_one_line(tmp_path, damaged, args):
    from app.cli import cli

    paths = {"damaged": damaged, "good": tmp_path / "good.db", "out": tmp_path / "out"}
    result = CliRunner().invoke(cli, [a.format(**paths) for a in args], obj={})
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "damaged.db is damaged" in lines[0], result.output
    assert "Traceback" not in result.output and not isinstance(result.exception, sqlite3.Error)


def test_a_full_disk_is_named_as_such_not_as_a_disk_io_error(tmp_path, monkeypatch):
    """Issue 30, probe 7: with the disk full, a write read "cannot open ...: disk I/O error" (what
    SQLite says when its WAL cannot grow). The message says the disk is full, how much is free, and
    what to do."""
    import errno
    from collections import namedtuple

    from store.errors import io_reason

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10 << 30, (10 << 30) - (1 << 20), 1 << 20))
    db = tmp_path / "s.db"
    text = io_reason(db, sqlite3.OperationalError("disk I/O error"))
    assert text.startswith("the disk holding it is full (1.0 MB free)") and "--db" in text
    assert io_reason(db, OSError(errno.ENOSPC, "No space left on device")).startswith("the disk holding it is full")
    store = Store(db)
    assert "the disk holding it is full" in str(store._error(sqlite3.OperationalError("disk I/O error")))
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10 << 30, 0, 10 << 30))
    assert io_reason(db, sqlite3.OperationalError("disk I/O error")) == "disk I/O error"  # not a full disk: as it was


def test_text_that_is_not_utf8_is_named_and_the_leaderboard_carries_on(tmp_path):
    """Issue 49: bytes that are not UTF-8 in a TEXT column (written by another tool) pass
    quick_check, and every leaderboard then failed with "Could not decode to UTF-8 column 'name'".
    Now the rows are read (U+FFFD for the bad bytes), the damaged ones named, the rest shown."""
    from app.cli import cli

    db = tmp_path / "text.db"
    fill_demo(db, hardware="fuzz/2c")
    conn = sqlite3.connect(db)
    conn.execute("UPDATE records SET error = CAST(x'41ff42' AS TEXT) WHERE id = 2")
    conn.execute("UPDATE workloads SET name = CAST(x'6dc3' AS TEXT) WHERE key = '2002'")
    conn.commit()
    conn.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    for args in (["leaderboard", "--any-hardware"], ["leaderboard", "-w", "matmul*", "--any-hardware", "--json"],
                 ["db", "info"]):
        result = CliRunner().invoke(cli, [*args, "--db", str(db)], obj={})
        assert result.exit_code == 0, (args, result.output)
        assert "Traceback" not in result.output and "Could not decode" not in result.output, result.output
        warning = [line for line in result.stderr.splitlines() if line.startswith("Warning: ")]
        assert len(warning) == 1 and "2 row(s) hold text that is not UTF-8" in warning[0], result.stderr
        assert "records 2 (error)" in warning[0] and "workloads 2 (name)" in warning[0], warning[0]
        assert "Warning" not in result.stdout  # --json stays JSON
    shown = CliRunner().invoke(cli, ["leaderboard", "--any-hardware", "--db", str(db)], obj={}).stdout
    assert "matmul_512x512x512_float32" in shown and "m\ufffd" in shown  # every workload ranked, the damaged one too
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before  # reading changed nothing
    with Store(db) as store:
        assert store.info()["text_not_utf8"]["rows"] == 2
        store.check()  # quick_check has nothing against it: it was never about text
    fill_demo(tmp_path / "clean.db", hardware="fuzz/2c")
    with Store(tmp_path / "clean.db") as store:
        store.best(top=5)
        assert store.text_warning() == "" and store.info()["text_not_utf8"]["rows"] == 0
