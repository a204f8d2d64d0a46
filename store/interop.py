"""Records in and out: MetaSchedule JSON databases, and merging another schedx database.

MetaSchedule's JSON database is two files of one JSON value per line:
``database_workload.json``: ``["<structural hash>", "<base64 of the IRModule's TVM JSON>"]`` and
``database_tuning_record.json``: ``[workload_index, [trace, run_secs, target, args_info]]``
(``workload_index`` counts workload lines from 0). Import reads and checks every line before it
writes anything, then writes in one transaction; a malformed line raises
:class:`ImportFormatError` naming the file and line. Duplicates (see
:func:`store.records.record_identity`) are skipped, so importing or merging twice adds nothing.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import sqlite_utils

from store.errors import ImportFormatError, StoreError
from store.outcome import Outcome
from store.queries import record_row, row_record, row_workload, workload_row
from store.records import Record, Workload, gflops_of, median_of, now_iso, split_run_secs
from store.schema import damaged, open_readonly, write_transaction

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"

TargetFn = Callable[[dict], str]
DescribeFn = Callable[[str, str], dict]


def default_target_text(target: dict) -> str:
    """Target JSON as text when no TVM-aware canonicaliser is given: keys sorted."""
    return json.dumps(target, sort_keys=True)


def _lines(path: Path):
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if line.strip():
                    yield number, line
    except UnicodeDecodeError as err:
        raise ImportFormatError(f"{path}: not UTF-8 text ({err}); nothing was imported") from err
    except OSError as err:
        raise ImportFormatError(f"{path}: cannot be read ({err.strerror or err}); nothing was imported") from err


def _json(path: Path, number: int, line: str):
    try:
        return json.loads(line)
    except ValueError as err:
        raise _bad(path, number, f"not JSON ({err.args[0]})") from err
    except RecursionError as err:
        raise _bad(path, number, "JSON nested too deeply") from err


def _is_run_time(value) -> bool:
    """A number of seconds MetaSchedule could have written: finite, not negative."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(float(value)) and value >= 0
    except OverflowError:  # an integer too large for a float
        return False


def _bad(path: Path, number: int, what: str) -> ImportFormatError:
    return ImportFormatError(f"{path}, line {number}: {what}; nothing was imported")


def read_metaschedule(folder: Path) -> tuple[list[tuple[str, str]], list[tuple[int, list, int]]]:
    """Parse and check both files: (key, mod_b64) per workload line, (index, record JSON, line
    number) per record line."""
    folder = Path(folder)
    wpath, rpath = folder / WORKLOAD_FILE, folder / RECORD_FILE
    if not wpath.is_file():
        raise ImportFormatError(f"{folder} has no {WORKLOAD_FILE}: not a MetaSchedule JSON database")
    workloads: list[tuple[str, str]] = []
    for number, line in _lines(wpath):
        value = _json(wpath, number, line)
        if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)
                and value[0].isascii() and value[0].isdigit()):
            raise _bad(wpath, number, 'expected ["<structural hash digits>", "<base64 module>"]')
        workloads.append((value[0], value[1]))
    records: list[tuple[int, list, int]] = []
    for number, line in _lines(rpath) if rpath.is_file() else ():
        value = _json(rpath, number, line)
        if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], int)
                and not isinstance(value[0], bool) and isinstance(value[1], list) and len(value[1]) == 4):
            raise _bad(rpath, number, "expected [workload_index, [trace, run_secs, target, args_info]]")
        index, (trace, run_secs, target, args_info) = value
        if not 0 <= index < len(workloads):
            raise _bad(rpath, number, f"workload index {index} is not a line of {WORKLOAD_FILE} "
                                      f"({len(workloads)} workloads)")
        if not (isinstance(trace, list) and len(trace) == 2 and all(isinstance(t, list) for t in trace)):
            raise _bad(rpath, number, "trace must be [instructions, decisions]")
        if run_secs is not None and not (isinstance(run_secs, list) and all(map(_is_run_time, run_secs))):
            raise _bad(rpath, number, "run_secs must be a list of seconds (finite numbers, not negative)")
        if target is not None and not (isinstance(target, dict) and "kind" in target):
            raise _bad(rpath, number, "target must be a JSON object with a kind")
        if args_info is not None and not isinstance(args_info, list):
            raise _bad(rpath, number, "args_info must be a list")
        records.append((index, value[1], number))
    return workloads, records


def import_metaschedule(db: sqlite_utils.Database, folder: Path, *, hardware: str, source: str = "import",
                        target_fn: TargetFn | None = None, describe: DescribeFn | None = None,
                        environment: dict | None = None) -> dict:
    """Import a MetaSchedule JSON database. ``target_fn`` turns a target dict into the canonical
    text (default: sorted JSON); ``describe(key, mod_b64)`` may supply name, shapes and flops of
    new workloads (the store itself cannot read a module)."""
    folder = Path(folder)
    workloads, lines = read_metaschedule(folder)
    target_fn = target_fn or default_target_text
    known = {row["key"]: row_workload(row) for row in db.query("SELECT * FROM workloads")}
    new_workloads: dict[str, Workload] = {}
    for key, mod_b64 in workloads:
        if key in known or key in new_workloads:
            continue
        info = describe(key, mod_b64) if describe else {}
        new_workloads[key] = Workload(key=key, name=info.get("name") or f"{folder.name}/{key[:10]}",
                                      kind=info.get("kind", "kernel"), source=f"import:{folder}",
                                      shapes=info.get("shapes", {}), flops=int(info.get("flops") or 0),
                                      mod_b64=mod_b64)
    flops = {k: w.flops for k, w in {**known, **new_workloads}.items()}
    created, env = now_iso(), environment if environment is not None else {"imported_from": str(folder.resolve())}
    records, targets = [], {}
    for index, (trace, run_secs, target, args_info), number in lines:
        key = workloads[index][0]
        valid, exact = split_run_secs(run_secs)
        median = median_of(valid)
        target_json = json.dumps(target, sort_keys=True) if target else ""
        if target_json not in targets:
            try:
                targets[target_json] = target_fn(target) if target else ""
            except Exception as err:  # noqa: BLE001 - a target TVM cannot read is the file's fault
                raise _bad(folder / RECORD_FILE, number, f"unreadable target {target_json[:80]} ({err})") from err
        records.append(Record(
            workload_key=key, target=targets[target_json], hardware=hardware, source=source,
            status=Outcome.OK if valid else Outcome.RUN_ERROR, steps=[], trace=trace, latencies=valid,
            median_s=median, gflops=gflops_of(flops[key], median), environment=env,
            error="" if valid else "no valid run time", created=created, args_info=args_info, run_secs=exact))
    with write_transaction(db):
        for w in new_workloads.values():
            db["workloads"].insert(workload_row(w, created))
        added, skipped = insert_new(db, records)
    return {"dir": str(folder), "workloads_added": len(new_workloads), "workloads_in_file": len(workloads),
            "records_added": added, "records_skipped": skipped}


def insert_new(db: sqlite_utils.Database, records: list[Record], *, keep_job: bool = True) -> tuple[int, int]:
    """Insert the records whose identity is not in the database yet (inside the caller's
    transaction); returns (added, skipped)."""
    seen = {row[0] for row in db.execute("SELECT ident FROM records")}
    rows = []
    for r in records:
        row = record_row(r, r.created or now_iso())
        if not keep_job:
            row["job_id"] = None
        if row["ident"] in seen:
            continue
        seen.add(row["ident"])
        rows.append(row)
    if rows:
        db["records"].insert_all(rows, batch_size=500)
    return len(rows), len(records) - len(rows)


def export_metaschedule(db: sqlite_utils.Database, folder: Path, clause: str, params: list, *,
                        overwrite: bool = False) -> dict:
    """Write the records matching ``clause`` that have a trace, with their workloads' modules, as
    a MetaSchedule JSON database that ``JSONDatabase(work_dir=folder)`` loads. Each file is
    written beside its final name and renamed into place, so a failure leaves no half file."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise StoreError(f"cannot create the folder {folder}: {err.strerror or err}") from err
    paths = folder / WORKLOAD_FILE, folder / RECORD_FILE
    if not overwrite and any(p.exists() for p in paths):
        raise StoreError(f"{folder} already holds a MetaSchedule database; choose an empty folder or overwrite it "
                         "(--force)")
    mods = {row["key"]: row["mod_b64"] for row in db.query("SELECT key, mod_b64 FROM workloads")}
    index: dict[str, int] = {}
    record_lines: list[str] = []
    no_trace = no_module = 0
    for row in db.query(f"SELECT * FROM records WHERE {clause} ORDER BY id", params):
        r = row_record(row)
        if r.trace is None:
            no_trace += 1
            continue
        if not mods.get(r.workload_key):
            no_module += 1
            continue
        i = index.setdefault(r.workload_key, len(index))
        target = json.loads(r.target) if r.target.lstrip().startswith("{") else None
        record_lines.append(json.dumps([i, [r.trace, r.ms_run_secs(), target, r.args_info]]))
    workload_lines = [json.dumps([key, mods[key]]) for key in index]
    for path, lines in zip(paths, (workload_lines, record_lines)):
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            os.replace(tmp, path)
        except OSError as err:
            tmp.unlink(missing_ok=True)
            raise StoreError(f"cannot write {path}: {err.strerror or err}") from err
    return {"dir": str(folder), "workloads": len(workload_lines), "records": len(record_lines),
            "skipped_no_trace": no_trace, "skipped_no_module": no_module}


def _with_candidate(r: Record) -> Record:
    """A record of a schema-1 database keeps its search candidate hash in the environment."""
    if r.candidate is None and isinstance(r.environment, dict) and r.environment.get("candidate"):
        return replace(r, candidate=str(r.environment["candidate"]))
    return r


def merge(db: sqlite_utils.Database, own_path: Path, other_path: Path) -> dict:
    """Add another schedx database's workloads and records; records already here (same
    identity) are skipped. Job ids are local to a database, so merged records lose theirs."""
    other_path = Path(other_path)
    try:
        same = other_path.exists() and own_path.exists() and other_path.resolve() == own_path.resolve()
    except (OSError, ValueError) as err:  # a name too long, a NUL byte
        raise StoreError(f"cannot open {other_path}: {getattr(err, 'strerror', None) or err}") from err
    if same:
        raise StoreError("cannot merge a database into itself")
    # read as it is (never migrated or written), checked first; its errors name it, not us
    other = open_readonly(other_path, always_check=True).db
    try:
        their_workloads = [row_workload(row) for row in other.query("SELECT * FROM workloads")]
        created = {row["key"]: row["created"] for row in other.query("SELECT key, created FROM workloads")}
        their_records = [_with_candidate(row_record(row)) for row in other.query("SELECT * FROM records ORDER BY id")]
    except sqlite3.OperationalError as err:
        raise StoreError(f"cannot read {other_path}: {err}") from err
    except sqlite3.DatabaseError as err:
        raise damaged(other_path, err) from err
    finally:
        other.close()
    with write_transaction(db):
        ours = {row[0] for row in db.execute("SELECT key FROM workloads")}
        new = [w for w in their_workloads if w.key not in ours]
        for w in new:
            db["workloads"].insert(workload_row(w, created[w.key]))
        added, skipped = insert_new(db, their_records, keep_job=False)
    return {"other": str(other_path), "workloads_added": len(new), "workloads_present": len(their_workloads) - len(new),
            "records_added": added, "records_skipped": skipped}


__all__ = ["RECORD_FILE", "WORKLOAD_FILE", "default_target_text", "export_metaschedule", "import_metaschedule",
           "insert_new", "merge", "read_metaschedule"]
