"""``Store``: the leaderboard database every front end and MetaSchedule share.

Contract:
- One SQLite file (WAL). Several processes may open it at once: readers never wait for the
  writer; writers queue for up to 30 s (busy timeout) instead of failing with "database is locked".
- Every write method is one transaction: ``add_records`` of 10 000 records lands whole or not at
  all, even if the process is killed half-way (kill -9 included: SQLite's write-ahead log rolls
  an unfinished transaction back the next time the file is opened).
- Values in and out are frozen :mod:`store.records` dataclasses; rows and SQL stay in here.
- A ``Store`` holds one connection; a lock makes its methods safe to call from several threads.
- Files that are not ours are refused untouched (see :mod:`store.schema`); a damaged file is
  refused (``PRAGMA quick_check`` the first time a process opens it, and again by ``info``,
  ``merge`` and ``export_metaschedule``). A path that is not a regular file (a FIFO, a device
  such as /dev/full, a folder) is refused before SQLite opens it or writes a journal beside it
  (:func:`store.paths.check_db_path`, which every command's ``--db`` goes through too).
- Text that another tool stored as bytes that are not UTF-8 (which quick_check does not see) is
  read with U+FFFD in their place instead of failing the query; :meth:`Store.text_warning` names
  the rows once such text was read, and ``info`` always does (see :mod:`store.text`).
- A file this process may not write is opened read-only: every read works, every write raises
  :class:`ReadOnlyDatabaseError` and changes nothing.
- Besides measurements it keeps the in-model decisions an export takes once and every command
  reuses (:mod:`store.decisions`, schema 4).
- Every SQLite error becomes a :class:`StoreError` naming the file it concerns
  (:class:`CorruptDatabaseError` for a damaged one); nothing else escapes from SQLite.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from store import claims, decisions, interop, queries, schema, text
from store.compare import compare_records
from store.decisions import Decision
from store.errors import ReadOnlyDatabaseError, StoreError, io_reason
from store.outcome import Outcome
from store.paths import user_path
from store.records import JOB_STATUSES, SOURCES, STATUSES, Job, Record, Workload, gflops_of, median_of, now_iso
from store.schema import SCHEMA_VERSION, open_database, write_transaction

ENV_VAR = "SCHEDX_DB"


def default_db_path() -> Path:
    """``$SCHEDX_DB``, else ``$XDG_DATA_HOME/schedx/schedx.db``, else ``~/.local/share/schedx/schedx.db``.

    A ``SCHEDX_DB`` that is set but empty is an error, not the home database: a script that meant
    to point somewhere must not write to the user's own leaderboard."""
    if ENV_VAR in os.environ:
        value = os.environ[ENV_VAR]
        if not value.strip():
            raise StoreError(f"{ENV_VAR} is set but empty: set it to a database file (e.g. "
                             f"{ENV_VAR}=~/schedx.db) or unset it to use the default database")
        return user_path(value)
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "schedx" / "schedx.db"


class Store:
    """The schedx database at ``path`` (default: :func:`default_db_path`).

    ``create=False`` refuses to create a missing file (for viewers that should not leave files
    behind). ``read_only``: None (default) opens read-only exactly when this process may not
    write the file or its folder; True always (SQLite then refuses every write itself)."""

    def __init__(self, path: str | os.PathLike | None = None, *, create: bool = True,
                 read_only: bool | None = None) -> None:
        self.path = user_path(path) if path else default_db_path()
        opened = open_database(self.path, create=create, read_only=read_only)
        self._db, self.schema_version, self.read_only = opened.db, opened.version, opened.read_only
        self._just_checked = opened.checked  # opening ran quick_check: the next admin call need not
        self._lock = threading.RLock()

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    def _error(self, err: sqlite3.Error) -> StoreError:
        """A SQLite error as the StoreError a user can act on."""
        if isinstance(err, sqlite3.IntegrityError):
            return StoreError(f"{self.path}: rejected by the database ({err})")
        if isinstance(err, sqlite3.OperationalError):
            if "readonly" in str(err):
                return self._read_only_error()
            return StoreError(f"{self.path}: {io_reason(self.path, err)}")
        if isinstance(err, sqlite3.DatabaseError):  # corrupt pages, "file is not a database"
            return schema.damaged(self.path, err)
        return StoreError(f"{self.path}: {err}")

    def _read_only_error(self) -> ReadOnlyDatabaseError:
        return ReadOnlyDatabaseError(f"{self.path} is open read-only (the file or its folder cannot be written by "
                                     "this user); nothing was written. Copy it somewhere writable or pass another "
                                     "file with --db / SCHEDX_DB.")

    @contextmanager
    def _locked(self, *, writes: bool = False) -> Iterator:
        """The connection under the lock, SQLite errors translated; ``writes`` refuses at once on a
        read-only store (also for methods that run their own transaction)."""
        with self._lock:
            if writes and self.read_only:
                raise self._read_only_error()
            try:
                yield self._db
            except sqlite3.Error as err:
                raise self._error(err) from err
            except json.JSONDecodeError as err:
                raise StoreError(f"{self.path}: a row holds text that is not JSON ({err}); the file was "
                                 "changed outside schedx") from err

    @contextmanager
    def _write(self) -> Iterator:
        with self._locked(writes=True) as db, write_transaction(db):
            yield db

    def _read(self):
        return self._locked()

    def check(self) -> None:
        """``PRAGMA quick_check`` now (O(size): about 0.3 s per 100 000 records); raises
        :class:`CorruptDatabaseError` when the file is damaged."""
        with self._locked() as db:
            self._just_checked = False
            schema.check(db, self.path)

    def text_warning(self) -> str:
        """One line naming the rows of text that is not UTF-8 (written outside schedx), when this
        store has read some (shown with U+FFFD; see :mod:`store.text`); "" otherwise. Finding the
        rows reads every table once, so it runs only after damaged text was read."""
        with self._read() as db:
            if not text.read_damaged_text(db.conn):
                return ""
            return text.describe(self.path, *text.damaged_rows(db.conn))

    def _check_before(self) -> None:
        """:meth:`check` before info, merge and export, unless opening this store has just run it."""
        if self._just_checked:
            self._just_checked = False
            return
        self.check()

    # workloads
    def add_workload(self, w: Workload, *, replace: bool = True) -> str:
        """Add a workload, or (``replace=True``) update the name, kind, source and shapes of one
        already there; known FLOPs and modules are never blanked. Returns the key."""
        row = queries.workload_row(w, now_iso())
        update = ("DO UPDATE SET name = excluded.name, kind = excluded.kind, source = excluded.source, "
                  "shapes = excluded.shapes, flops = CASE WHEN excluded.flops > 0 THEN excluded.flops ELSE flops END, "
                  "mod_b64 = CASE WHEN excluded.mod_b64 != '' THEN excluded.mod_b64 ELSE mod_b64 END"
                  if replace else "DO NOTHING")
        with self._write() as db:
            db.execute(f"INSERT INTO workloads ({', '.join(row)}) VALUES ({', '.join('?' * len(row))}) "
                       f"ON CONFLICT(key) {update}", list(row.values()))
            if replace and row["flops"] > 0:  # FLOPs now known: fill the GFLOPS of earlier records
                db.execute("UPDATE records SET gflops = ? / median_s / 1e9 WHERE workload_key = ? AND gflops IS NULL "
                           "AND median_s > 0", [row["flops"], row["key"]])
        return row["key"]

    def workload(self, key: str) -> Workload | None:
        with self._read() as db:
            rows = list(db.query("SELECT * FROM workloads WHERE key = ?", [str(key)]))
        return queries.row_workload(rows[0]) if rows else None

    def workloads(self, *, kind: str | None = None) -> list[Workload]:
        with self._read() as db:
            sql, params = "SELECT * FROM workloads", []
            if kind:
                sql, params = sql + " WHERE kind = ?", [kind]
            return [queries.row_workload(row) for row in db.query(sql + " ORDER BY name", params)]

    # records
    def add_record(self, record: Record) -> int:
        return self.add_records([record])[0]

    def add_records(self, records: list[Record]) -> list[int]:
        """Add records in ONE transaction (all or none); returns their ids in order. Fills
        ``created`` (now), ``median_s`` (from latencies) and ``gflops`` (from the workload's
        FLOPs) when left empty. The workload must have been added first."""
        records = list(records)
        for r in records:
            if r.status not in STATUSES:
                raise StoreError(f"record status {r.status!r} is not one of {', '.join(STATUSES)}")
            if r.source not in SOURCES:
                raise StoreError(f"record source {r.source!r} is not one of {', '.join(SOURCES)}")
        if not records:
            return []
        with self._write() as db:
            flops = dict(db.execute("SELECT key, flops FROM workloads WHERE key IN (SELECT value FROM json_each(?))",
                                    [json.dumps(sorted({r.workload_key for r in records}))]).fetchall())
            missing = sorted({r.workload_key for r in records} - set(flops))
            if missing:
                raise StoreError(f"unknown workload {missing[0]!r}: call add_workload() before adding its records")
            now, rows = now_iso(), []
            for r in records:
                try:
                    row = queries.record_row(r, r.created or now)
                except (TypeError, ValueError) as err:
                    raise StoreError(f"record fields must be plain JSON data (steps, trace, environment, "
                                     f"args_info): {err}") from err
                if row["median_s"] is None and r.status == Outcome.OK:
                    row["median_s"] = median_of(r.latencies)
                if row["gflops"] is None:
                    row["gflops"] = gflops_of(flops[r.workload_key], row["median_s"])
                rows.append(row)
            before = db.execute("SELECT COALESCE(MAX(id), 0) FROM records").fetchone()[0]
            db["records"].insert_all(rows, batch_size=500)
            after = db.execute("SELECT MAX(id) FROM records").fetchone()[0]
        if after - before != len(rows):  # ids are max+1 under the write lock; this would be a bug
            raise StoreError("record ids were not allocated in sequence")
        return list(range(before + 1, after + 1))

    def record(self, record_id: int) -> Record | None:
        with self._read() as db:
            rows = list(db.query("SELECT * FROM records WHERE id = ?", [int(record_id)]))
        return queries.row_record(rows[0]) if rows else None

    def measured_candidates(self, workload_key: str, target: str, hardware: str) -> dict[str, tuple[int, list]]:
        """Search candidates already measured for this workload, target and hardware: candidate
        hash -> (record id, latencies). Answered from an index (a resumed search asks it).
        Attempts that failed for reasons outside the candidate (status ``infra_error``, e.g. an
        RPC device that could not be reached) do not count: a resumed search measures them again."""
        with self._read() as db:
            rows = db.execute("SELECT candidate, id, latencies FROM records WHERE workload_key = ? AND target = ? "
                              "AND hardware = ? AND candidate IS NOT NULL AND status != ? ORDER BY id",
                              [workload_key, target, hardware, Outcome.INFRA_ERROR.value]).fetchall()
        return {c: (i, json.loads(lat)) for c, i, lat in rows}

    def records(self, *, order: str = "created", limit: int | None = None, offset: int = 0, **filters) -> list[Record]:
        """Records matching the filters of :func:`store.queries.where` (workload, target,
        hardware, kind, source, status, since, until, verified_only, job_id, rankable, has_trace);
        ``order``: created, newest, median, gflops or id."""
        with self._read() as db:
            clause, params = queries.where(db, **filters)
            return queries.select_records(db, clause, params, order=order, limit=limit, offset=offset)

    def schedules(self, *, limit: int | None = None, confirmed_first: bool = False, **filters) -> list[Record]:
        """One record per schedule among the records matching the filters (as :meth:`records`):
        each schedule's newest (infrastructure failures aside), kept when it ranks; fastest first.
        With ``confirmed_first``, schedules whose newest record is a search's confirmation come
        first (what an export ranks). The leaderboard (:meth:`best`) ranks records instead."""
        with self._read() as db:
            return queries.newest_per_schedule(db, limit=limit, confirmed_first=confirmed_first, **filters)

    def count(self, **filters) -> int:
        with self._read() as db:
            clause, params = queries.where(db, **filters)
            return db.execute(f"SELECT COUNT(*) FROM records WHERE {clause}", params).fetchone()[0]

    def distinct(self, column: str) -> list[str]:
        """The values one record column takes (target, hardware, source, status): for filter menus."""
        if column not in ("target", "hardware", "source", "status"):
            raise StoreError(f"cannot list the values of {column!r}")
        with self._read() as db:
            return [row[0] for row in db.execute(f"SELECT DISTINCT {column} FROM records ORDER BY {column}")]

    def best(self, *, workload: str | None = None, target: str | None = None, hardware: str | None = None,
             kind: str | None = None, source: str | None = None, since=None, verified_only: bool = False,
             top: int | None = None, per_source: bool = False) -> list[Record]:
        """The leaderboard: per (workload, target, hardware) the record with the lowest median among
        those that ran and did not fail verification; highest GFLOPS first. ``per_source`` keeps
        the best of each source (manual vs search) instead."""
        with self._read() as db:
            return queries.best(db, top=top, per_source=per_source, workload=workload, target=target,
                                hardware=hardware, kind=kind, source=source, since=since, verified_only=verified_only)

    def top_k(self, workload_key: str, target: str | None, hardware: str | None, k: int, *,
              with_trace: bool = False, rank: str = "median") -> list[Record]:
        """The k fastest rankable records of one workload; ``None`` target or hardware means any.
        ``rank="median"`` is schedx's rule (the leaderboard); ``rank="mean"`` MetaSchedule's (the
        mean of every run time, failures as 1e10 included), which its database interface follows."""
        with self._read() as db:
            return queries.top_k(db, str(workload_key), target, hardware, k, with_trace=with_trace, rank=rank)

    def history(self, workload_key: str, *, target: str | None = None, hardware: str | None = None) -> list[Record]:
        """Every record of a workload (key or name), oldest first, failures included."""
        return self.records(workload=str(workload_key), target=target, hardware=hardware, order="created")

    def compare(self, id_a: int, id_b: int) -> dict:
        """Two records side by side: steps aligned, differing arguments and trace decisions."""
        a, b = self.record(id_a), self.record(id_b)
        for rid, r in ((id_a, a), (id_b, b)):
            if r is None:
                raise StoreError(f"no record with id {rid} in {self.path}")
        return compare_records(a, b)

    # jobs
    def create_job(self, kind: str, params: dict | None = None) -> Job:
        now = now_iso()
        with self._write() as db:
            cursor = db.execute("INSERT INTO jobs (kind, status, params, progress, created, updated) "
                                "VALUES (?, 'queued', ?, '{}', ?, ?)", [kind, json.dumps(params or {}), now, now])
            job_id = cursor.lastrowid
        return self.job(job_id)

    def update_job(self, job_id: int, **fields) -> Job:
        """Change a job's status, progress, pid, error or params (``updated`` is set to now)."""
        allowed = {"status", "progress", "pid", "error", "params"}
        if set(fields) - allowed:
            raise StoreError(f"cannot update job field(s) {sorted(set(fields) - allowed)}; allowed: {sorted(allowed)}")
        if "status" in fields and fields["status"] not in JOB_STATUSES:
            raise StoreError(f"job status {fields['status']!r} is not one of {', '.join(JOB_STATUSES)}")
        values = {k: json.dumps(v) if k in ("progress", "params") else v for k, v in fields.items()}
        values["updated"] = now_iso()
        with self._write() as db:
            cur = db.execute(f"UPDATE jobs SET {', '.join(f'{k} = ?' for k in values)} WHERE id = ?",
                             [*values.values(), int(job_id)])
            if cur.rowcount == 0:
                raise StoreError(f"no job with id {job_id} in {self.path}")
        return self.job(job_id)

    def job(self, job_id: int) -> Job | None:
        with self._read() as db:
            rows = list(db.query("SELECT * FROM jobs WHERE id = ?", [int(job_id)]))
        return _row_job(rows[0]) if rows else None

    def jobs(self, status: str | None = None) -> list[Job]:
        with self._read() as db:
            sql, params = "SELECT * FROM jobs", []
            if status:
                sql, params = sql + " WHERE status = ?", [status]
            return [_row_job(row) for row in db.query(sql + " ORDER BY id", params)]

    # candidate claims of searches running at the same time (see store.claims)
    def claim_candidates(self, workload_key: str, target: str, hardware: str, candidates: list[str], *,
                         owner: str, ttl_s: float = 900.0) -> list[str]:
        """The candidates ``owner`` may measure now, in one transaction (see :mod:`store.claims`)."""
        with self._write() as db:
            return claims.claim(db, workload_key, target, hardware, list(candidates), owner, ttl_s)

    def release_claims(self, owner: str) -> int:
        with self._write() as db:
            return claims.release(db, owner)

    def live_claims(self) -> dict[str, int]:
        """Live claims per owner."""
        with self._read() as db:
            return claims.claimed(db)

    # in-model decisions: which of the records chosen for a model ship (see store.decisions)
    def in_model_decision(self, *, workload_key: str, target: str, hardware: str, precision: str,
                 candidates) -> Decision | None:
        """The decision kept for this question (model, target, machine, precision, the ids of the
        records judged), or None: none taken yet, or a read-only database of an older schema."""
        with self._read() as db:
            return decisions.find(db, workload_key=workload_key, target=target, hardware=hardware,
                                  precision=precision, candidates=candidates)

    def save_in_model_decision(self, decision: Decision) -> Decision:
        """Keep ``decision`` in one transaction, replacing an earlier one to the same question;
        returns it as stored (id and time filled)."""
        with self._write() as db:
            return decisions.save(db, decision)

    # the whole database
    def info(self) -> dict:
        """Path, schema version, counts, sources, statuses, machines, first and last record, size,
        and the rows whose text is not UTF-8 (``text_not_utf8``); the file is checked first
        (:meth:`check`), so a damaged one raises instead."""
        self._check_before()
        with self._read() as db:
            def one(sql: str):
                return db.execute(sql).fetchone()[0]

            def grouped(column: str) -> dict:
                return dict(db.execute(f"SELECT {column}, COUNT(*) FROM records GROUP BY {column}").fetchall())

            data = {
                "path": str(self.path), "schema_version": self.schema_version, "code_schema_version": SCHEMA_VERSION,
                "workloads": one("SELECT COUNT(*) FROM workloads"), "records": one("SELECT COUNT(*) FROM records"),
                "jobs": one("SELECT COUNT(*) FROM jobs"),
                "by_source": grouped("source"), "by_status": grouped("status"),
                "hardware": grouped("hardware"), "targets": one("SELECT COUNT(DISTINCT target) FROM records"),
                "first_record": one("SELECT MIN(created) FROM records"),
                "last_record": one("SELECT MAX(created) FROM records"),
                "journal_mode": one("PRAGMA journal_mode"),
                "read_only": self.read_only, "integrity": "ok",
            }
            named, total = text.damaged_rows(db.conn)  # quick_check does not look at text
            data["text_not_utf8"] = {"rows": total, "named": named, "note": text.describe(self.path, named, total)
                                     if total else ""}
        data["size_bytes"] = sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())
        return data

    def merge(self, other_path: str | os.PathLike) -> dict:
        """Add another schedx database's workloads and records, skipping records already here
        (same workload, target, hardware, steps/trace and latencies). Counts added and skipped.
        Both files are checked first; errors about the other file name the other file."""
        if self.read_only:
            raise self._read_only_error()
        self._check_before()
        with self._locked(writes=True) as db:
            return interop.merge(db, self.path, user_path(other_path))

    def import_metaschedule(self, folder: str | os.PathLike, *, hardware: str, source: str = "import",
                            target_fn=None, describe=None) -> dict:
        """Import a MetaSchedule JSON database folder (all lines checked first, one transaction).
        ``target_fn``/``describe`` are optional TVM-aware helpers (see search.ms_database)."""
        if source not in SOURCES:
            raise StoreError(f"record source {source!r} is not one of {', '.join(SOURCES)}")
        with self._locked(writes=True) as db:
            return interop.import_metaschedule(db, user_path(folder), hardware=hardware, source=source,
                                               target_fn=target_fn, describe=describe)

    def export_metaschedule(self, folder: str | os.PathLike, *, target: str | None = None,
                            hardware: str | None = None, overwrite: bool = False) -> dict:
        """Write records with a trace (filtered by target and hardware) as a MetaSchedule JSON
        database; the file is checked first, so a damaged one exports nothing."""
        self._check_before()
        with self._read() as db:
            clause, params = queries.where(db, target=target, hardware=hardware)
            return interop.export_metaschedule(db, user_path(folder), clause, params, overwrite=overwrite)


def _row_job(row: dict) -> Job:
    return Job(id=row["id"], kind=row["kind"], status=row["status"], params=json.loads(row["params"]),
               progress=json.loads(row["progress"]), pid=row["pid"], created=row["created"], updated=row["updated"],
               error=row["error"])


__all__ = ["ENV_VAR", "Store", "default_db_path", "user_path"]
