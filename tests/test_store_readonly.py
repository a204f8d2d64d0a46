"""Read-only use: a database on a read-only file or in a read-only folder (a shared results
folder, a mounted backup) can be read by the leaderboard, ``db info`` and ``db export``; writing
to it is a clear ``ReadOnlyDatabaseError`` and changes nothing.

Tests may run as root, for whom ``chmod`` stops nothing: the permission tests then run their
checks in a forked child that has dropped to an unprivileged user, and ``read_only=True``
exercises the same code path through SQLite's own ``mode=ro`` (which binds root too).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import traceback
from pathlib import Path

import pytest

from store import ReadOnlyDatabaseError, Record, Store, StoreError, Workload

HW = "hw/2c"
NOBODY = 65534


def _fill(path: Path) -> Path:
    with Store(path) as store:
        store.add_workload(Workload(key="1", name="matmul", flops=2 * 64 ** 3, mod_b64="bW9k"))
        store.add_records([Record(workload_key="1", target='{"kind": "llvm"}', hardware=HW, source="manual",
                                  status="ok", steps=[], trace=[[["GetSBlock", [], ["C", "main"], ["b0"]]], []],
                                  latencies=[m] * 3, median_s=None, gflops=None, environment={})
                           for m in (2e-3, 1e-3, 3e-3)])
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _reads_and_refuses_writes(path: Path, out: Path, read_only: bool | None = None) -> dict:
    """Everything a viewer does works; every write raises ReadOnlyDatabaseError."""
    found = {}
    with Store(path, create=False, read_only=read_only) as store:
        found["read_only"] = store.read_only
        found["count"] = store.count()
        found["best"] = [r.median_s for r in store.best()]
        found["info_records"] = store.info()["records"]
        found["exported"] = store.export_metaschedule(out)["records"]
        refused = []
        for name, write in (("add_workload", lambda: store.add_workload(Workload(key="2", name="x"))),
                            ("add_record", lambda: store.add_record(store.records()[0])),
                            ("create_job", lambda: store.create_job("search")),
                            ("merge", lambda: store.merge(out.parent / "nothing.db"))):
            try:
                write()
            except ReadOnlyDatabaseError as err:
                refused.append(name)
                found["message"] = str(err)
        found["refused"] = refused
        found["count_after"] = store.count()
    return found


def test_read_only_open_reads_everything_and_writes_nothing(tmp_path):
    path = _fill(tmp_path / "schedx.db")
    before = _digest(path)
    with Store(path, read_only=True) as store:
        assert store.read_only
        store.read_only = False  # past our own guard: SQLite itself refuses (mode=ro binds root too)
        with pytest.raises(ReadOnlyDatabaseError, match="read-only"):
            store.add_workload(Workload(key="2", name="x"))
    found = _reads_and_refuses_writes(path, tmp_path / "ms", read_only=True)
    assert found["read_only"] is True and found["count"] == found["count_after"] == 3 and found["best"] == [1e-3]
    assert found["info_records"] == 3 and found["exported"] == 3
    assert found["refused"] == ["add_workload", "add_record", "create_job", "merge"]
    assert "nothing was written" in found["message"] and str(path) in found["message"]
    assert _digest(path) == before
    assert json.loads((tmp_path / "ms" / "database_tuning_record.json").read_text().splitlines()[0])[0] == 0


def _unprivileged(fn, *args) -> dict:
    """``fn(*args)`` as an unprivileged user: in a forked child that drops root (for whom chmod
    stops nothing), or right here when this process is not root."""
    if os.geteuid() != 0:
        return fn(*args)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read)
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            payload = {"ok": fn(*args)}
        except BaseException:  # noqa: BLE001 - reported to the parent
            payload = {"error": traceback.format_exc()}
        with os.fdopen(write, "w") as f:
            f.write(json.dumps(payload, default=str))
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        data = f.read()
    os.waitpid(pid, 0)
    payload = json.loads(data or '{"error": "the child wrote nothing"}')
    assert "error" not in payload, payload["error"]
    return payload["ok"]


@pytest.fixture
def shared_dir():
    """A folder an unprivileged user can reach (pytest's own tmp folders are private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="schedx-ro-"))
    folder.chmod(0o777)
    (folder / "out").mkdir()
    (folder / "out").chmod(0o777)
    yield folder
    for p in (folder, *folder.rglob("*")):
        p.chmod(0o777 if p.is_dir() else 0o666)
    shutil.rmtree(folder)


def test_a_read_only_file_can_be_read(shared_dir):
    path = _fill(shared_dir / "schedx.db")
    path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    before = _digest(path)
    found = _unprivileged(_reads_and_refuses_writes, path, shared_dir / "out" / "ms")
    assert found["read_only"] is True and found["count"] == found["count_after"] == 3
    assert found["info_records"] == 3 and found["exported"] == 3 and found["best"] == [1e-3]
    assert found["refused"] == ["add_workload", "add_record", "create_job", "merge"]
    assert _digest(path) == before


def test_a_database_in_a_read_only_folder_can_be_read(shared_dir):
    folder = shared_dir / "results"
    folder.mkdir()
    path = _fill(folder / "schedx.db")
    path.chmod(0o666)  # the file itself is writable; the folder (where SQLite keeps its -wal) is not
    folder.chmod(0o555)
    before = _digest(path)
    found = _unprivileged(_reads_and_refuses_writes, path, shared_dir / "out" / "ms")
    assert found["read_only"] is True and found["count"] == 3 and found["exported"] == 3
    assert found["refused"] == ["add_workload", "add_record", "create_job", "merge"]
    assert _digest(path) == before and sorted(p.name for p in folder.iterdir()) == ["schedx.db"]


def test_a_new_database_in_a_read_only_folder_is_a_clear_error(shared_dir):
    folder = shared_dir / "locked"
    folder.mkdir()
    folder.chmod(0o555)

    def create() -> str:
        try:
            Store(folder / "new.db")
        except StoreError as err:
            return str(err)
        return "created"

    message = _unprivileged(create)
    assert "read-only" in message and str(folder / "new.db") in message


def test_an_unreadable_file_is_a_clear_error(shared_dir):
    path = _fill(shared_dir / "secret.db")
    path.chmod(0)

    def open_it() -> str:
        try:
            Store(path, create=False)
        except StoreError as err:
            return str(err)
        return "opened"

    assert _unprivileged(open_it) == f"cannot read {path}: Permission denied"


def test_cli_reads_a_read_only_database(shared_dir):
    from click.testing import CliRunner

    from app.cli import cli

    path = _fill(shared_dir / "schedx.db")
    path.chmod(0o444)

    def run() -> dict:
        runner = CliRunner()
        out = {}
        for name, args in (("leaderboard", ["leaderboard", "--db", str(path), "--any-hardware", "--json"]),
                           ("info", ["db", "info", "--db", str(path)]),
                           ("export", ["db", "export", str(shared_dir / "out" / "cli"), "--db", str(path),
                                       "--any-hardware"]),
                           ("merge", ["db", "merge", str(shared_dir / "other.db"), "--db", str(path)])):
            result = runner.invoke(cli, args, obj={})
            out[name] = [result.exit_code, result.output]
        return out

    _fill(shared_dir / "other.db")
    out = _unprivileged(run)
    assert out["leaderboard"][0] == 0 and len(json.loads(out["leaderboard"][1])) == 1
    assert out["info"][0] == 0 and "3 records" in out["info"][1] and "read-only" in out["info"][1]
    assert out["export"][0] == 0 and "wrote 3 records" in out["export"][1]
    assert out["merge"][0] == 1 and out["merge"][1].startswith("Error: ") and "read-only" in out["merge"][1]
    assert len(out["merge"][1].strip().splitlines()) == 1
