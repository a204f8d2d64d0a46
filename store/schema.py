"""Opening a schedx database safely: refuse what is not ours or damaged, create, migrate, configure.

A file is ours when it is SQLite and has a ``schedx_meta`` table whose ``app`` is ``schedx``
(and, belt and braces, ``PRAGMA application_id`` is ours). Anything else (random bytes, another
program's SQLite file, a schema newer than this code) is refused *before* a single byte is
written: no journal-mode switch, no table, no WAL file. New and empty files get the latest
schema; older schedx files are migrated one version at a time, each step in one transaction.

The first time a process opens a file (and again after the file itself changed: a copy, a
restore, a checkpoint of the write-ahead log), ``PRAGMA quick_check`` reads all of it (about
0.3 s for 100 000 records, 455 MB, from the page cache) and a damaged file is refused with
:class:`CorruptDatabaseError` instead of answering from whatever pages are still readable.

A file that this process may not write (a read-only file, or one in a read-only folder) is opened
read-only (SQLite ``mode=ro``; ``immutable=1`` when the folder cannot even hold SQLite's
shared-memory file and no write-ahead log is pending): it can be read but never migrated.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import sqlite_utils

from store.errors import (CorruptDatabaseError, ForeignDatabaseError, ReadOnlyDatabaseError, SchemaTooNewError, StoreError,
                          io_reason)
from store.paths import check_db_path
from store.outcome import Outcome
from store.records import now_iso
from store.text import lenient_text

APP = "schedx"
APPLICATION_ID = 0x53434458  # "SCDX"
SCHEMA_VERSION = 4
BUSY_TIMEOUT_S = 30.0
META_TABLE = "schedx_meta"
SQLITE_MAGIC = b"SQLite format 3\x00"

# The condition under which a record may rank; the partial index idx_records_rank uses the same
# words so that SQLite answers "best" and "top k" from the index alone (queries.best names it
# with INDEXED BY: a migration must keep an index of that name covering these columns).
RANKABLE = "status = 'ok' AND median_s IS NOT NULL AND verified IS NOT 0"

_V1 = f"""
CREATE TABLE {META_TABLE} (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE workloads (
    key TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'kernel',
    source TEXT NOT NULL DEFAULT '',
    shapes TEXT NOT NULL DEFAULT '{{}}',
    flops INTEGER NOT NULL DEFAULT 0,
    mod_b64 TEXT NOT NULL DEFAULT '',
    created TEXT NOT NULL
);
CREATE INDEX idx_workloads_name ON workloads(name);
CREATE INDEX idx_workloads_kind ON workloads(kind);
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    params TEXT NOT NULL DEFAULT '{{}}',
    progress TEXT NOT NULL DEFAULT '{{}}',
    pid INTEGER,
    created TEXT NOT NULL,
    updated TEXT NOT NULL,
    error TEXT NOT NULL DEFAULT ''
);
CREATE INDEX idx_jobs_status ON jobs(status);
CREATE TABLE records (
    id INTEGER PRIMARY KEY,
    workload_key TEXT NOT NULL REFERENCES workloads(key),
    target TEXT NOT NULL,
    hardware TEXT NOT NULL,
    source TEXT NOT NULL,
    status TEXT NOT NULL,
    steps TEXT NOT NULL DEFAULT '[]',
    trace TEXT,
    latencies TEXT NOT NULL DEFAULT '[]',
    median_s REAL,
    gflops REAL,
    environment TEXT NOT NULL DEFAULT '{{}}',
    max_error REAL,
    verified INTEGER,
    predicted REAL,
    job_id INTEGER,
    error TEXT NOT NULL DEFAULT '',
    created TEXT NOT NULL,
    args_info TEXT,
    ident TEXT NOT NULL
);
CREATE INDEX idx_records_rank ON records(workload_key, target, hardware, median_s, source, created)
    WHERE {RANKABLE};
CREATE INDEX idx_records_history ON records(workload_key, created);
CREATE INDEX idx_records_created ON records(created);
CREATE INDEX idx_records_machine ON records(hardware, target);
CREATE INDEX idx_records_ident ON records(ident);
CREATE INDEX idx_records_job ON records(job_id);
"""



def _v2(db: sqlite_utils.Database) -> None:
    """The structural hash of a search candidate's scheduled module gets its own indexed column
    (it lived in the environment JSON): resuming a search asks "measured already?" of the index."""
    if "candidate" not in {row[1] for row in db.execute("PRAGMA table_info(records)")}:
        db.execute("ALTER TABLE records ADD COLUMN candidate TEXT")
    db.execute("UPDATE records SET candidate = json_extract(environment, '$.candidate') WHERE candidate IS NULL "
               "AND json_valid(environment) AND json_extract(environment, '$.candidate') IS NOT NULL")
    db.execute("CREATE INDEX IF NOT EXISTS idx_records_candidate ON records(workload_key, target, hardware, candidate) "
               "WHERE candidate IS NOT NULL")


# Before schema 3 an infrastructure failure (not the candidate's fault) was a record whose error
# text started with this. Schema 3 gives it its own status, Outcome.INFRA_ERROR.
LEGACY_INFRA_PREFIX = "infrastructure: "


def _columns(db: sqlite_utils.Database, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def _v3(db: sqlite_utils.Database) -> None:
    """Outcomes as a status, and MetaSchedule's run times kept exactly.

    Rows whose error starts with ``infrastructure: `` get status ``infra_error`` (the error text is
    kept as it was, and the status they had goes into their environment as ``previous_status``;
    an environment that was not a JSON object is kept whole as ``previous_environment``). A new
    column ``run_secs`` holds MetaSchedule's run times when they say more than the latencies
    (failure markers); existing rows leave it empty. Rows are rewritten only where they change:
    migrating 100 000 records reads the file once and writes almost nothing."""
    if "run_secs" not in _columns(db, "records"):
        db.execute("ALTER TABLE records ADD COLUMN run_secs TEXT")
    db.execute("UPDATE records SET environment = CASE WHEN json_valid(environment) AND json_type(environment) = "
               "'object' THEN json_set(environment, '$.previous_status', status) ELSE json_object('previous_status', "
               "status, 'previous_environment', environment) END, status = ? WHERE substr(error, 1, ?) = ? "
               "AND status != ?",
               [Outcome.INFRA_ERROR.value, len(LEGACY_INFRA_PREFIX), LEGACY_INFRA_PREFIX, Outcome.INFRA_ERROR.value])


# Schema 4: the in-model decision (which of the records chosen for a model ship, timed inside the
# model against the default schedules) is taken once and kept, with its interval, for every later
# command to reuse (see store.decisions). One row per question: the model's key, the target's key,
# the machine that timed it, the precision and the ids of the records judged (ascending, as JSON);
# ``kept`` the ids that ship; ratio, low and high the whole model's time with them over the
# defaults' and its 95% interval (NULL when none won kernel by kernel); details the figures per task.
DECISIONS_TABLE = "in_model_decisions"
_V4 = f"""
CREATE TABLE IF NOT EXISTS {DECISIONS_TABLE} (
    id INTEGER PRIMARY KEY,
    workload_key TEXT NOT NULL,
    target TEXT NOT NULL,
    hardware TEXT NOT NULL,
    precision TEXT NOT NULL,
    candidates TEXT NOT NULL,
    kept TEXT NOT NULL DEFAULT '[]',
    ratio REAL,
    low REAL,
    high REAL,
    details TEXT NOT NULL DEFAULT '{{}}',
    created TEXT NOT NULL,
    UNIQUE (workload_key, target, hardware, precision, candidates)
)
"""

# MIGRATIONS[v] takes a database at version v-1 to version v (v=1 creates everything): SQL
# statements, or a function of the database. Each runs inside the caller's write transaction.
MIGRATIONS: dict[int, str | Callable[[sqlite_utils.Database], None]] = {1: _V1, 2: _v2, 3: _v3, 4: _V4}

# Files this process has checked with quick_check, by (device, inode, ctime) when checked
_CHECKED: set[tuple[int, int, int]] = set()
_CHECKED_LOCK = threading.Lock()


class Opened(NamedTuple):
    """An open database: the connection, its schema version, whether it is read-only, and
    whether opening it ran quick_check (the first open of the file in this process)."""

    db: sqlite_utils.Database
    version: int
    read_only: bool
    checked: bool


def connect(path: Path, *, read_only: bool = False, immutable: bool = False) -> sqlite_utils.Database:
    """A sqlite-utils database on ``path`` with a busy timeout; opening writes nothing.
    ``read_only``: SQLite refuses every write (``mode=ro``); ``immutable``: also no locking, for a
    file nothing can change (a read-only folder)."""
    if read_only or immutable:
        query = "mode=ro" + ("&immutable=1" if immutable else "")
        conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?{query}", uri=True, timeout=BUSY_TIMEOUT_S,
                               check_same_thread=False)
    else:
        conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    conn.text_factory = lenient_text()  # text another tool stored as non-UTF-8 reads (as U+FFFD), counted
    return sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)


def writable(path: Path) -> bool:
    """Whether this process may write the database file at ``path`` (and the SQLite files beside
    it): the file, or for a new file its folder, is writable, and so is the folder."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if path.exists() and not os.access(path, os.W_OK):
        return False
    return os.access(folder, os.W_OK | os.X_OK)


def open_database(path: Path, *, create: bool = True, read_only: bool | None = None) -> Opened:
    """Open (creating or migrating if needed) the schedx database at ``path``.

    ``read_only``: None decides from the file's and folder's permissions (see :func:`writable`);
    True opens read-only whatever they are. Raises :class:`CorruptDatabaseError`,
    :class:`ForeignDatabaseError` or :class:`SchemaTooNewError` without touching the file."""
    path = check_db_path(path)  # a folder, FIFO or device: refused before SQLite writes a journal beside it
    try:
        exists = path.exists() and path.stat().st_size > 0
    except (OSError, ValueError) as err:  # a name too long, a NUL byte, a folder we may not enter
        raise StoreError(f"cannot open {path}: {io_reason(path, err)}") from err
    if read_only is None:
        read_only = not writable(path)
    if exists:
        _check_readable(path)
    elif not create or read_only:
        if read_only and create:
            raise ReadOnlyDatabaseError(f"cannot create a database at {path}: its folder is read-only; "
                                        "pass a writable path with --db / SCHEDX_DB")
        raise StoreError(f"no schedx database at {path} yet (it is created by the first measurement, "
                         "`schedx db import DIR` or `schedx db merge OTHER`)")
    if read_only:
        return open_readonly(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = connect(path)
    except (OSError, sqlite3.Error) as err:
        raise StoreError(f"cannot open {path}: {io_reason(path, err)}") from err
    checked = False
    with _closed_on_failure(db, path, lambda err: f"cannot open {path}: {io_reason(path, err)}"):
        version = _read_version(db, path)
        if version is not None:
            checked = check_once(db, path)
        if version is None or version < SCHEMA_VERSION:
            if version is None:  # a new, empty file: make it ours
                _set_wal(db)
            with write_transaction(db):
                # read again under the write lock: another process may have created or migrated it
                version = _migrate(db, _read_version(db, path) or 0)
        if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            _set_wal(db)
        db.execute("PRAGMA synchronous = NORMAL")
        db.execute("PRAGMA foreign_keys = ON")
    _remember_checked(path)
    return Opened(db, version, False, checked)


def open_readonly(path: Path, *, always_check: bool = False) -> Opened:
    """Open a schedx database only to read it (a read-only file or folder, ``schedx db merge``):
    never created, migrated or written to; rows of an older schema read as they are. The file is
    checked with quick_check the first time this process opens it (every time: ``always_check``)."""
    path = check_db_path(path)
    try:
        if not path.is_file():
            raise StoreError(f"no schedx database at {path}")
    except (OSError, ValueError) as err:
        raise StoreError(f"cannot open {path}: {io_reason(path, err)}") from err
    _check_readable(path)
    wal = Path(f"{path}-wal")
    # a folder that cannot hold SQLite's -shm file: nothing can write the file either (a writer
    # needs a journal beside it), so it is read as immutable, unless a write-ahead log is pending
    immutable = not os.access(path.parent, os.W_OK | os.X_OK) and not Path(f"{path}-shm").exists() and \
        not (wal.exists() and wal.stat().st_size > 0)
    try:
        db = connect(path, read_only=True, immutable=immutable)
    except sqlite3.Error as err:
        raise StoreError(f"cannot open {path}: {io_reason(path, err)}") from err
    with _closed_on_failure(db, path, lambda err: f"cannot read {path}: {err}" + (
            "; it is read-only and has a pending write-ahead log: open it once where it can be written"
            if "readonly" in str(err) else "")):
        version = _read_version(db, path)
        if version is None:
            raise StoreError(f"{path} is an empty file, not a schedx database")
        if always_check:
            check(db, path)
        checked = always_check or check_once(db, path)
    _remember_checked(path)
    return Opened(db, version, True, checked)


@contextmanager
def _closed_on_failure(db: sqlite3.Connection, path: Path, unusable: Callable[[sqlite3.OperationalError], str]):
    """Close ``db`` when its opening fails: an operational error as a :class:`StoreError` saying
    ``unusable(err)``, any other SQLite error as :func:`damaged`, anything else as it was."""
    try:
        yield
    except sqlite3.OperationalError as err:
        db.close()
        raise StoreError(unusable(err)) from err
    except sqlite3.Error as err:
        db.close()
        raise damaged(path, err) from err
    except BaseException:
        db.close()
        raise


def damaged(path: Path, err: BaseException | str) -> CorruptDatabaseError:
    """The one message (one line) for a database whose pages cannot be read."""
    why = " ".join(str(err).split())[:200]
    return CorruptDatabaseError(
        f"{path} is damaged ({why}); schedx will not use it. Restore it from a backup, or recover what is "
        f"readable with the sqlite3 shell: sqlite3 {path} .recover | sqlite3 recovered.db")


def check(db: sqlite_utils.Database, path: Path) -> None:
    """``PRAGMA quick_check``: every page of the file read and its structure checked (O(size));
    raises :class:`CorruptDatabaseError` naming the first problem."""
    try:
        rows = [row[0] for row in db.execute("PRAGMA quick_check(10)").fetchall()]
    except sqlite3.OperationalError:
        raise
    except sqlite3.DatabaseError as err:
        raise damaged(path, err) from err
    if rows != ["ok"]:
        problems = [line.strip() for row in rows for line in str(row).splitlines()
                    if line.strip() and not line.lstrip().startswith("***")] or ["unknown problem"]
        more = f", and {len(problems) - 1} more" if len(problems) > 1 else ""
        raise damaged(path, f"quick_check: {problems[0]}{more}")


def _file_key(path: Path) -> tuple[int, int, int] | None:
    """The file as it is now: device, inode and status-change time (which any write to the file
    itself moves, a checkpoint from the write-ahead log included; reads never do)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


def check_once(db: sqlite_utils.Database, path: Path) -> bool:
    """:func:`check`, unless this process has checked this very file since it last changed: a
    process that opens a file again and again (the UI reruns its pages) pays once, not per open;
    a file replaced or rewritten since (a copy, a restore, a checkpoint) is checked again.
    True if it checked."""
    key = _file_key(path)
    with _CHECKED_LOCK:
        if key is not None and key in _CHECKED:
            return False
    check(db, path)
    return True


def _remember_checked(path: Path) -> None:
    key = _file_key(path)
    if key is not None:
        with _CHECKED_LOCK:
            if len(_CHECKED) > 1024:  # a long-lived process that opens many files: start again
                _CHECKED.clear()
            _CHECKED.add(key)


def _check_readable(path: Path) -> None:
    """Refuse a file this process may not read in words (SQLite would say "unable to open database
    file"); asks the kernel without opening it (see :func:`_not_sqlite` for why not)."""
    if not os.access(path, os.R_OK):
        raise StoreError(f"cannot read {path}: Permission denied")


def _not_sqlite(path: Path, err: sqlite3.DatabaseError) -> StoreError:
    """The error for a file SQLite cannot read as a database, naming what it starts with.

    Only called once SQLite has refused the file: reading it with a file handle of our own while
    a connection of this process holds it would drop that connection's POSIX locks on close (see
    SQLite's "How To Corrupt": another process then thinks it is the last one, checkpoints and
    deletes the write-ahead log under our readers, who get "disk I/O error")."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError as os_err:  # no permission to read it, a device that fails
        return StoreError(f"cannot read {path}: {os_err.strerror or os_err}")
    if head != SQLITE_MAGIC:
        return CorruptDatabaseError(
            f"{path} is not a SQLite database (it starts with {head[:8]!r}); schedx leaves it untouched. "
            "Move it away or pass another file with --db / SCHEDX_DB.")
    return CorruptDatabaseError(f"{path} cannot be read as SQLite ({err}); schedx leaves it untouched. "
                                "Move it away or pass another file with --db / SCHEDX_DB.")


def _read_version(db: sqlite_utils.Database, path: Path) -> int | None:
    """The schema version, None for an empty file; refuses corrupt, foreign and newer files."""
    try:
        tables = set(db.table_names())
        app_id = db.execute("PRAGMA application_id").fetchone()[0]
    except sqlite3.OperationalError:  # cannot open, locked too long: not a verdict on the file
        raise
    except sqlite3.DatabaseError as err:  # not a database, or damaged
        if getattr(err, "sqlite_errorname", "") == "SQLITE_NOTADB":  # no SQLite connection can hold it
            raise _not_sqlite(path, err) from err
        raise CorruptDatabaseError(f"{path} cannot be read as SQLite ({err}); schedx leaves it untouched. "
                                   "Move it away or pass another file with --db / SCHEDX_DB.") from err
    if not tables and app_id == 0:
        return None
    if META_TABLE not in tables or app_id not in (0, APPLICATION_ID):
        listed = ", ".join(sorted(tables)[:5]) or "no tables"
        raise ForeignDatabaseError(
            f"{path} is a SQLite database of another application ({listed}); schedx will not write to it. "
            "Pass another file with --db / SCHEDX_DB.")
    meta = {row["key"]: row["value"] for row in db.query(f"SELECT key, value FROM {META_TABLE}")}
    if meta.get("app") != APP:
        raise ForeignDatabaseError(f"{path} has a {META_TABLE} table but is not a schedx database "
                                   f"(app={meta.get('app')!r}); schedx will not write to it.")
    try:
        version = int(meta.get("schema_version", ""))
    except ValueError as err:
        raise CorruptDatabaseError(f"{path}: unreadable schema version {meta.get('schema_version')!r}") from err
    if version > SCHEMA_VERSION:
        raise SchemaTooNewError(
            f"{path} has schema version {version}, written by a newer schedx; this one reads up to version "
            f"{SCHEMA_VERSION}. Upgrade schedx (pip install -U schedx) or use another --db.")
    return version


def _migrate(db: sqlite_utils.Database, version: int) -> int:
    """Bring the schema from ``version`` to :data:`SCHEMA_VERSION` (inside the caller's transaction)."""
    for target in range(version + 1, SCHEMA_VERSION + 1):
        step = MIGRATIONS[target]
        if callable(step):
            step(db)
        else:  # statement by statement: executescript would COMMIT the open transaction first
            for statement in filter(str.strip, step.split(";")):
                db.execute(statement)
        if target == 1:
            db.execute(f"INSERT INTO {META_TABLE} (key, value) VALUES ('app', ?), ('created', ?)", [APP, now_iso()])
        db.execute(f"INSERT OR REPLACE INTO {META_TABLE} (key, value) VALUES ('schema_version', ?)", [str(target)])
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    return max(version, SCHEMA_VERSION)


def _set_wal(db: sqlite_utils.Database) -> None:
    """Switch to WAL; the switch needs a moment alone, so retry briefly when others hold the file."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() > deadline:
                raise StoreError(f"cannot switch the database to WAL mode: {err}") from err
            time.sleep(0.05)


@contextmanager
def write_transaction(db: sqlite_utils.Database) -> Iterator[sqlite_utils.Database]:
    """One write transaction: BEGIN IMMEDIATE takes the write lock up front (waiting up to the
    busy timeout), so a reader-turned-writer never fails with "database is locked" half-way."""
    db.conn.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        if db.conn.in_transaction:
            db.conn.execute("ROLLBACK")
        raise
    else:
        db.conn.execute("COMMIT")


__all__ = ["APP", "APPLICATION_ID", "DECISIONS_TABLE", "LEGACY_INFRA_PREFIX", "MIGRATIONS", "Opened", "RANKABLE", "SCHEMA_VERSION",
           "check", "check_once", "connect", "damaged", "open_database", "open_readonly", "writable",
           "write_transaction"]
