"""SQL for the leaderboard: rows <-> records, filters, best per workload, top k, history.

Every query filters with the same keyword set (see :func:`where`), so the CLI, the UI and the
MetaSchedule adapter agree on what "best on this machine for this target" means:
the lowest median among records that ran (``status == "ok"``) and did not fail verification.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterable

import sqlite_utils

from store.errors import StoreError
from store.outcome import Outcome
from store.records import Record, Workload, iso_since, record_identity
from store.schema import RANKABLE

_JSON_FIELDS = ("steps", "latencies", "environment")
_NULLABLE_JSON = ("trace", "args_info", "run_secs")
_ROW_ONLY = ("ident",)  # columns the store keeps for itself
MAX_ROWS = (1 << 63) - 1  # SQLite's largest integer
RANKS = ("median", "mean")
ORDERS = {
    "created": "created, id",
    "newest": "created DESC, id DESC",
    "median": "median_s IS NULL, median_s, id",
    "gflops": "gflops IS NULL, gflops DESC, median_s, id",
    "id": "id",
}


def record_status(r: Record) -> str:
    """The status a record is stored with: its outcome's value (the text of an error never
    decides it)."""
    return Outcome(r.status).value


def record_row(r: Record, created: str) -> dict:
    """The SQLite row of a record (JSON fields as text, ``verified`` as 0/1/NULL)."""
    row = {name: getattr(r, name) for name in ("workload_key", "target", "hardware", "source",
                                                 "median_s", "gflops", "max_error", "predicted", "job_id", "error",
                                                 "candidate")}
    row["status"] = record_status(r)
    row["steps"] = json.dumps(r.steps or [])
    row["latencies"] = json.dumps([float(x) for x in r.latencies or []])
    row["environment"] = json.dumps(r.environment or {})
    for name in _NULLABLE_JSON:
        value = getattr(r, name)
        row[name] = None if value is None else json.dumps(value)
    if r.run_secs is not None:
        row["run_secs"] = json.dumps([float(x) for x in r.run_secs])
    row["verified"] = None if r.verified is None else int(bool(r.verified))
    row["created"] = created
    row["ident"] = record_identity(r.workload_key, r.target, r.hardware, r.steps, r.trace, r.latencies)
    return row


def row_record(row: dict) -> Record:
    data = {k: v for k, v in row.items() if k not in _ROW_ONLY}
    for name in _JSON_FIELDS:
        data[name] = json.loads(data[name])
    for name in _NULLABLE_JSON:  # (a database of an older schema has no run_secs column)
        data[name] = None if data.get(name) is None else json.loads(data[name])
    data["verified"] = None if data["verified"] is None else bool(data["verified"])
    return Record.from_dict(data)


def workload_row(w: Workload, created: str) -> dict:
    return {"key": str(w.key), "name": w.name, "kind": w.kind, "source": w.source,
            "shapes": json.dumps(w.shapes or {}), "flops": int(w.flops or 0), "mod_b64": w.mod_b64 or "",
            "created": created}


def row_workload(row: dict) -> Workload:
    return Workload(key=row["key"], name=row["name"], kind=row["kind"], source=row["source"],
                    shapes=json.loads(row["shapes"]), flops=row["flops"], mod_b64=row["mod_b64"])


def resolve_workloads(db: sqlite_utils.Database, workload: str | Iterable[str]) -> list[str]:
    """Workload keys for a key, an exact name, or a name pattern with ``*`` (GLOB)."""
    names = [workload] if isinstance(workload, str) else list(workload)
    keys: list[str] = []
    for w in names:
        op = "GLOB" if any(ch in w for ch in "*?[") else "="
        keys += [row[0] for row in db.execute(f"SELECT key FROM workloads WHERE key = ? OR name {op} ?", [w, w])]
    return sorted(set(keys))


def where(db: sqlite_utils.Database, *, workload=None, target=None, hardware=None, kind=None, source=None,
          status=None, since=None, until=None, verified_only=False, job_id=None, rankable=False,
          has_trace=False) -> tuple[str, list]:
    """A WHERE clause and its parameters for the common filters (None means "any").

    ``target`` is the exact canonical JSON, or a bare kind (``llvm``, ``cuda``) that matches
    every target of that kind. ``source``/``status``/``hardware`` accept a value or a list."""
    terms, params = [], []
    if workload is not None:
        keys = resolve_workloads(db, workload)
        terms.append(f"workload_key IN ({', '.join('?' * len(keys))})")  # IN () matches nothing
        params += keys
    if target is not None:
        if str(target).lstrip().startswith("{"):
            terms.append("target = ?")
            params.append(target)
        else:
            terms.append("(target = ? OR (json_valid(target) AND json_extract(target, '$.kind') = ?))")
            params += [target, target]
    for column, value in (("hardware", hardware), ("source", source), ("status", status)):
        if value is None:
            continue
        values = [value] if isinstance(value, str) else list(value)
        terms.append(f"{column} IN ({', '.join('?' * len(values))})")
        params += values
    if kind is not None:
        terms.append("workload_key IN (SELECT key FROM workloads WHERE kind = ?)")
        params.append(kind)
    if iso_since(since) is not None:
        terms.append("created >= ?")
        params.append(iso_since(since))
    if iso_since(until) is not None:
        terms.append("created < ?")
        params.append(iso_since(until))
    if verified_only:
        terms.append("verified = 1")
    if job_id is not None:
        terms.append("job_id = ?")
        params.append(job_id)
    if rankable:
        terms.append(RANKABLE)
    if has_trace:
        terms.append("trace IS NOT NULL")
    return (" AND ".join(terms) or "1"), params


def row_count(name: str, value) -> int:
    """A count the caller gave (limit, offset, top, k) as an int SQLite can take, else StoreError."""
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)
    except TypeError as err:
        raise StoreError(f"{name} must be a whole number, not {str(value)[:40]!r}") from err
    if not 0 <= value <= MAX_ROWS:
        raise StoreError(f"{name} must be between 0 and {MAX_ROWS}, not {str(value)[:40]}")
    return value


def select_records(db: sqlite_utils.Database, clause: str, params: list, *, order: str = "created",
                   limit: int | None = None, offset: int = 0) -> list[Record]:
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}; one of {sorted(ORDERS)}")
    sql = f"SELECT * FROM records WHERE {clause} ORDER BY {ORDERS[order]}"
    if limit is not None:
        sql += f" LIMIT {row_count('limit', limit)} OFFSET {row_count('offset', offset)}"
    return [row_record(row) for row in db.query(sql, params)]


def best(db: sqlite_utils.Database, *, top: int | None = None, per_source: bool = False, **filters) -> list[Record]:
    """One record per (workload, target, hardware), or per (workload, target, hardware, source)
    with ``per_source``: the lowest median among rankable records, highest GFLOPS first."""
    if filters.get("workload") is not None and not resolve_workloads(db, filters["workload"]):
        return []  # (an always-false term leaves INDEXED BY without a plan)
    clause, params = where(db, rankable=True, **filters)
    group = "workload_key, target, hardware" + (", source" if per_source else "")
    # the partial rank index covers every filter here: tell SQLite, or it may pick a narrower
    # index (hardware, created) and read 100k full rows instead of one small index
    inner = (f"SELECT id FROM (SELECT id, MIN(median_s) FROM records INDEXED BY idx_records_rank WHERE {clause} "
             f"GROUP BY {group})")
    sql = f"SELECT * FROM records WHERE id IN ({inner}) ORDER BY {ORDERS['gflops']}"
    if top is not None:
        sql += f" LIMIT {row_count('top', top)}"
    return [row_record(row) for row in db.query(sql, params)]


def newest_per_schedule(db: sqlite_utils.Database, *, limit: int | None = None, confirmed_first: bool = False,
                        **filters) -> list[Record]:
    """Records matching ``filters``, one per schedule (per workload, target and machine): its newest
    record, when that one ranks; fastest first. A schedule is its search candidate's structural
    hash, else its trace and steps. A schedule timed again (a search's confirmation round) ranks by
    that newer time, not by the luckiest of its timings. ``confirmed_first``: schedules whose newest
    record is a confirmation's (``environment.confirmation``) come before all others."""
    if filters.get("workload") is not None and not resolve_workloads(db, filters["workload"]):
        return []  # (an always-false term leaves INDEXED BY without a plan)
    clause, params = where(db, **filters)
    # one workload's rows through its index: without it SQLite may scan a whole machine's records
    index = "INDEXED BY idx_records_history " if filters.get("workload") is not None else ""
    # the newest attempt of each schedule decides (an infrastructure failure is not the schedule's):
    # one that failed its confirmation (wrong result, crash) no longer ranks at its older time
    inner = (f"SELECT MAX(id) FROM records {index}WHERE {clause} AND status != '{Outcome.INFRA_ERROR.value}' "
             "GROUP BY workload_key, target, hardware, COALESCE(candidate, COALESCE(trace, '') || steps)")
    order = ("json_extract(environment, '$.confirmation') IS NULL, " if confirmed_first else "") + ORDERS["median"]
    sql = f"SELECT * FROM records WHERE id IN ({inner}) AND {RANKABLE} ORDER BY {order}"
    if limit is not None:
        sql += f" LIMIT {row_count('limit', limit)}"
    return [row_record(row) for row in db.query(sql, params)]


def top_k(db: sqlite_utils.Database, workload_key: str, target: str | None, hardware: str | None, k: int, *,
          with_trace: bool = False, rank: str = "median") -> list[Record]:
    """The ``k`` fastest rankable records of one workload (exact key) for a target and machine
    (None: any); ``with_trace``: only records with a MetaSchedule trace (an empty one included: it
    stands for the unscheduled function, as MetaSchedule's Python databases keep it). ``rank``: ``median`` (schedx's rule: the median of the valid runs) or ``mean``
    (MetaSchedule's: the mean of every run time, its failure marker 1e10 included)."""
    if rank not in RANKS:
        raise StoreError(f"unknown ranking {rank!r}; one of {', '.join(RANKS)}")
    k = row_count("k", k)
    key = "median_s"
    if rank == "mean":  # over run_secs when kept (failure markers in them), else the latencies
        has_run_secs = "run_secs" in {c[1] for c in db.execute("PRAGMA table_info(records)")}  # (older schemas)
        key = ("(SELECT AVG(value) FROM json_each(" + ("COALESCE(records.run_secs, records.latencies)"
                                                      if has_run_secs else "records.latencies") + "))")
    terms, params = ["workload_key = ?", RANKABLE], [workload_key]
    if target is not None:
        terms.append("target = ?")
        params.append(target)
    if hardware is not None:
        terms.append("hardware = ?")
        params.append(hardware)
    if with_trace:  # a trace MetaSchedule can replay (an empty one leaves the function as it is)
        terms.append("trace IS NOT NULL AND json_valid(trace)")
    sql = f"SELECT * FROM records WHERE {' AND '.join(terms)} ORDER BY {key}, id LIMIT {k}"
    return [row_record(row) for row in db.query(sql, params)]


__all__ = ["MAX_ROWS", "ORDERS", "RANKS", "best", "newest_per_schedule", "record_row", "record_status", "resolve_workloads", "row_count",
           "row_record", "row_workload", "select_records", "top_k", "where", "workload_row"]
