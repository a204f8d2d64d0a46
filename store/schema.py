"""Opening a schedx database safely: refuse what is not ours, create, migrate, configure.

A file is ours when it is SQLite and has a ``schedx_meta`` table whose ``app`` is ``schedx``
(and, belt and braces, ``PRAGMA application_id`` is ours). Anything else (random bytes, another
program's SQLite file, a schema newer than this code) is refused *before* a single byte is
written: no journal-mode switch, no table, no WAL file. New and empty files get the latest
schema; older schedx files are migrated one version at a time, each step in one transaction.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlite_utils

from store.errors import CorruptDatabaseError, ForeignDatabaseError, SchemaTooNewError, StoreError
from store.records import now_iso

APP = "schedx"
APPLICATION_ID = 0x53434458  # "SCDX"
SCHEMA_VERSION = 2
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


# MIGRATIONS[v] takes a database at version v-1 to version v (v=1 creates everything): SQL
# statements, or a function of the database. Each runs inside the caller's write transaction.
MIGRATIONS: dict[int, str | Callable[[sqlite_utils.Database], None]] = {1: _V1, 2: _v2}


def connect(path: Path) -> sqlite_utils.Database:
    """A sqlite-utils database on ``path`` with a busy timeout; reads only, writes nothing."""
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    return sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)


def open_database(path: Path, *, create: bool = True) -> tuple[sqlite_utils.Database, int]:
    """Open (creating or migrating if needed) the schedx database at ``path``.

    Returns the database and its schema version. Raises :class:`CorruptDatabaseError`,
    :class:`ForeignDatabaseError` or :class:`SchemaTooNewError` without touching the file."""
    path = Path(path)
    if path.is_dir():
        raise StoreError(f"{path} is a directory, not a database file; give a file path (e.g. {path}/schedx.db)")
    exists = path.exists() and path.stat().st_size > 0
    if exists:
        _check_header(path)
    elif not create:
        raise StoreError(f"no schedx database at {path} yet (it is created by the first measurement, "
                         "`schedx db import DIR` or `schedx db merge OTHER`)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = connect(path)
    except (OSError, sqlite3.OperationalError) as err:
        raise StoreError(f"cannot open {path}: {err}") from err
    try:
        version = _read_version(db, path)
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
    except sqlite3.OperationalError as err:
        db.close()
        raise StoreError(f"cannot open {path}: {err}") from err
    except BaseException:
        db.close()
        raise
    return db, version


def open_readonly(path: Path) -> tuple[sqlite_utils.Database, int]:
    """Open another schedx database only to read it (``schedx db merge``): never created,
    migrated or written to; rows of an older schema read as they are."""
    path = Path(path)
    if not path.is_file():
        raise StoreError(f"no schedx database at {path}")
    _check_header(path)
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S,
                               check_same_thread=False)
    except sqlite3.OperationalError as err:
        raise StoreError(f"cannot open {path}: {err}") from err
    db = sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)
    try:
        version = _read_version(db, path)
    except BaseException:
        db.close()
        raise
    if version is None:
        db.close()
        raise StoreError(f"{path} is an empty file, not a schedx database")
    return db, version


def _check_header(path: Path) -> None:
    with open(path, "rb") as f:
        head = f.read(len(SQLITE_MAGIC))
    if head != SQLITE_MAGIC:
        raise CorruptDatabaseError(
            f"{path} is not a SQLite database (it starts with {head[:8]!r}); schedx leaves it untouched. "
            "Move it away or pass another file with --db / SCHEDX_DB.")


def _read_version(db: sqlite_utils.Database, path: Path) -> int | None:
    """The schema version, None for an empty file; refuses corrupt, foreign and newer files."""
    try:
        tables = set(db.table_names())
        app_id = db.execute("PRAGMA application_id").fetchone()[0]
    except sqlite3.OperationalError:  # cannot open, locked too long: not a verdict on the file
        raise
    except sqlite3.DatabaseError as err:
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


__all__ = ["APP", "APPLICATION_ID", "MIGRATIONS", "RANKABLE", "SCHEMA_VERSION", "connect", "open_database",
           "open_readonly", "write_transaction"]
