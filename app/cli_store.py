"""``schedx leaderboard`` and ``schedx db ...``: the leaderboard database from the command line.

Each command opens the store, calls one library method and prints; a :class:`StoreError`
(corrupt, damaged or foreign file, newer schema, read-only file, malformed import) becomes
``Error: ...`` and exit 1, and so does a bad option value (:mod:`app.cli_types`).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from app.cli_common import fail_cleanly
from app.cli_types import Count, Date, DbPath, FilePath
from store.errors import StoreError
from store.records import KINDS, SOURCES, target_short

if TYPE_CHECKING:
    from store.db import Store

EMPTY_HINT = ("No records yet. Measure a kernel (`schedx measure ...` or the Schedule page), run a search "
              "(`schedx tune ...`), or import a MetaSchedule database: `schedx db import DIR`.")
COLUMNS = ("rank", "workload", "gflops", "median_ms", "source", "verified", "hardware", "target", "id")
FIELDS = COLUMNS + ("workload_key", "target_json", "created")  # --json and --csv carry these too


_store_errors = fail_cleanly  # StoreError -> `Error: message`, exit 1 (see app.cli_common)


def _db_option(fn):
    return click.option("--db", "db_path", type=DbPath(), default=None,
                        help="Database file (default: $SCHEDX_DB, else ~/.local/share/schedx/schedx.db).")(fn)


def _open(path, **kwargs):
    """The store at ``path`` (imported here: ``schedx --help`` need not load sqlite-utils)."""
    from store.db import Store

    return Store(path, **kwargs)


def _path(db_path: Path | None) -> Path:
    from store.db import default_db_path, user_path  # (sqlite-utils loads with the first command that needs it)

    return user_path(db_path) if db_path else default_db_path()


def _exists(path: Path, given: bool = True) -> bool:
    """Whether the database file is there; a folder that is not there, for a path the user gave
    (``given``), is a mistyped path, not an empty database (the default database's folder is made
    by the first write)."""
    try:
        if path.exists():
            return True
        folder = path.parent
        if given and not folder.is_dir():
            raise StoreError(f"no database at {path}: the folder {folder} does not exist")
        return False
    except (OSError, ValueError) as err:  # a name too long for the file system, a NUL byte
        raise StoreError(f"cannot open {path}: {err}") from err


def _this_machine() -> str:
    from explorer.target.environment import hardware_fingerprint

    return hardware_fingerprint()


def _echo_json(data) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


def leaderboard_rows(store: Store, records) -> list[dict]:
    """Table rows for records: workload name, GFLOPS, median in ms, short target, ..."""
    names = {w.key: w.name for w in store.workloads()}
    return [{"rank": i, "workload": names.get(r.workload_key, r.workload_key),
             "gflops": None if r.gflops is None else round(r.gflops, 3),
             "median_ms": None if r.median_s is None else round(r.median_s * 1e3, 6), "source": r.source,
             "verified": r.verified, "hardware": r.hardware, "target": target_short(r.target), "id": r.id,
             "workload_key": r.workload_key, "target_json": r.target, "created": r.created}
            for i, r in enumerate(records, start=1)]


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}" if value >= 0.01 else f"{value:.2e}"
    return str(value)


def _print_table(rows: list[dict]) -> None:
    cells = [[_fmt(row[c]) for c in COLUMNS] for row in rows]
    widths = [min(max([len(c)] + [len(line[i]) for line in cells]), 48) for i, c in enumerate(COLUMNS)]
    click.echo("  ".join(c.upper().ljust(w) for c, w in zip(COLUMNS, widths)))
    for line in cells:
        click.echo("  ".join(v[:w].ljust(w) for v, w in zip(line, widths)).rstrip())


@click.command()
@_db_option
@click.option("--workload", "-w", default=None, help="Only this workload (key, name or name pattern with *): "
              "its records ranked, instead of the best per workload.")
@click.option("--target", "-t", default=None, help="Canonical target JSON, or a kind such as llvm or cuda.")
@click.option("--hardware", default=None, help="Machine fingerprint (default: this machine's).")
@click.option("--any-hardware", is_flag=True, help="Records of every machine.")
@click.option("--source", type=click.Choice(SOURCES), default=None, help="Only manual, search, default or import.")
@click.option("--kind", type=click.Choice(KINDS), default=None, help="Only kernels or model tasks.")
@click.option("--verified-only", is_flag=True, help="Only records whose result was checked against a reference.")
@click.option("--since", type=Date(), default=None,
              help="Only records measured on or after this date (YYYY-MM-DD, or an ISO-8601 date and time).")
@click.option("--top", "-n", type=Count(1, 1_000_000), default=20, show_default=True, help="Rows to show (at most "
              "1000000).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV instead of a table.")
@_store_errors
def leaderboard(db_path, workload, target, hardware, any_hardware, source, kind, verified_only, since, top,
                as_json, as_csv) -> None:
    """Rank measured kernels: the best record per workload, target and machine (the fastest median
    among records that ran and did not fail verification), highest GFLOPS first."""
    if as_json and as_csv:
        raise click.UsageError("give either --json or --csv, not both")
    if hardware and any_hardware:
        raise click.UsageError("give either --hardware or --any-hardware, not both")
    hw = None if any_hardware else (hardware or _this_machine())
    filters = dict(target=target, hardware=hw, source=source, kind=kind, since=since, verified_only=verified_only)
    rows, elsewhere, damaged, path = [], 0, "", _path(db_path)
    if _exists(path, given=db_path is not None):  # a missing database is an empty leaderboard, not an error
        with _open(path, create=False) as store:
            if workload:
                records = store.records(workload=workload, rankable=True, order="median", limit=top, **filters)
            else:
                records = store.best(top=top, **filters)
            rows = leaderboard_rows(store, records)
            if not rows:
                elsewhere = store.count(rankable=True)
            damaged = store.text_warning()  # text another tool left as non-UTF-8: named, the rest shown
    if damaged:
        click.echo(f"Warning: {damaged}", err=True)
    if as_json:
        _echo_json(rows)
    elif as_csv:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        click.echo(buf.getvalue(), nl=False)
    elif rows:
        _print_table(rows)
    elif elsewhere:
        where = f" on this machine ({hw})" if hw else ""
        click.echo(f"No records match{where}; the database holds {elsewhere} ranked records: try --any-hardware "
                   "or fewer filters.")
    else:
        click.echo(EMPTY_HINT)


@click.group()
def db() -> None:
    """Manage the leaderboard database: import, export, merge, info."""


@db.command("import")
@click.argument("folder", type=FilePath(exists=True, file_okay=False, path_type=Path))
@_db_option
@click.option("--hardware", default=None, help="Machine the records were measured on (default: this machine's).")
@click.option("--source", type=click.Choice(SOURCES), default="import", show_default=True,
              help="Source recorded for the imported records.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@_store_errors
def import_(folder: Path, db_path, hardware, source, as_json) -> None:
    """Import a MetaSchedule JSON database (FOLDER with database_workload.json and
    database_tuning_record.json, e.g. a tune_tir work_dir). Every line is checked first; a
    malformed line imports nothing. Records already present are skipped."""
    from explorer.target import canonical_target
    from search.records import describe_b64

    with _open(_path(db_path)) as store:
        summary = store.import_metaschedule(folder, hardware=hardware or _this_machine(), source=source,
                                            target_fn=canonical_target, describe=describe_b64)
    if as_json:
        _echo_json(summary)
    else:
        click.echo(f"imported {summary['records_added']} records ({summary['records_skipped']} already there) and "
                   f"{summary['workloads_added']} new workloads from {folder}")


@db.command("export")
@click.argument("folder", type=FilePath(file_okay=False, path_type=Path))
@_db_option
@click.option("--target", "-t", default=None, help="Only this target (canonical JSON, or a kind such as llvm).")
@click.option("--hardware", default=None, help="Only this machine's records (default: this machine's).")
@click.option("--any-hardware", is_flag=True, help="Records of every machine.")
@click.option("--force", is_flag=True, help="Overwrite a MetaSchedule database already in FOLDER.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@_store_errors
def export(folder: Path, db_path, target, hardware, any_hardware, force, as_json) -> None:
    """Write records (with their traces) as a MetaSchedule JSON database in FOLDER, loadable by
    ms.database.JSONDatabase(work_dir=FOLDER)."""
    if hardware and any_hardware:
        raise click.UsageError("give either --hardware or --any-hardware, not both")
    with _open(_path(db_path), create=False) as store:
        summary = store.export_metaschedule(folder, target=target, overwrite=force,
                                            hardware=None if any_hardware else (hardware or _this_machine()))
    if as_json:
        _echo_json(summary)
    else:
        skipped = summary["skipped_no_trace"] + summary["skipped_no_module"]
        click.echo(f"wrote {summary['records']} records of {summary['workloads']} workloads to {folder}"
                   + (f" ({skipped} without a trace or module skipped)" if skipped else ""))


@db.command()
@click.argument("other", type=FilePath(dir_okay=False, path_type=Path))
@_db_option
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@_store_errors
def merge(other: Path, db_path, as_json) -> None:
    """Merge another schedx database (e.g. from another machine) into this one; records already
    here (same workload, target, machine, schedule and latencies) are skipped."""
    with _open(_path(db_path)) as store:
        summary = store.merge(other)
    if as_json:
        _echo_json(summary)
    else:
        click.echo(f"merged {summary['records_added']} records ({summary['records_skipped']} already there) and "
                   f"{summary['workloads_added']} new workloads from {other}")


@db.command()
@_db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_store_errors
def info(db_path, as_json) -> None:
    """Show the database's path, schema version, counts by source, status and machine, and size,
    after checking the whole file (SQLite quick_check): a damaged file is an error."""
    with _open(_path(db_path), create=False) as store:
        data = store.info()
    if as_json:
        _echo_json(data)
        return
    click.echo(f"{data['path']}  (schema {data['schema_version']}, {data['size_bytes'] / 1024:.0f} KB, "
               f"{data['journal_mode']}, quick_check {data['integrity']}"
               + (", read-only)" if data["read_only"] else ")"))
    click.echo(f"  {data['workloads']} workloads, {data['records']} records, {data['jobs']} jobs, "
               f"{data['targets']} targets")
    for title, key in (("by source", "by_source"), ("by status", "by_status"), ("by machine", "hardware")):
        if data[key]:
            click.echo(f"  {title}: " + ", ".join(f"{k} {v}" for k, v in sorted(data[key].items())))
    if data["first_record"]:
        click.echo(f"  records from {data['first_record']} to {data['last_record']}")
    if data["text_not_utf8"]["rows"]:
        click.echo(f"Warning: {data['text_not_utf8']['note']}", err=True)


__all__ = ["db", "leaderboard", "leaderboard_rows"]
