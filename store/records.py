"""What the store holds, as frozen values that serialise to JSON: workloads, records, jobs.

These cross every room (the UI, the CLI, the search and MetaSchedule adapter), so they carry
plain JSON only: no TVM objects, no SQLite rows. ``to_dict()`` gives JSON-safe data and
``from_dict()`` reads it back (unknown keys are ignored, so older readers accept newer dicts).
"""

from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from store.errors import StoreError
from store.outcome import Outcome
from store.values import DictValue


KINDS = ("kernel", "model_task")
SOURCES = ("manual", "search", "default", "import")
STATUSES = tuple(o.value for o in Outcome)  # the record statuses, as plain text
JOB_STATUSES = ("queued", "running", "done", "failed", "stopped")

# MetaSchedule writes this run time for a candidate that failed to build or run.
MS_FAILED_SECS = 1e10


@dataclass(frozen=True)
class Workload(DictValue):
    """Something to compile, keyed by MetaSchedule's structural hash of its IRModule.

    ``key`` is the decimal string MetaSchedule writes in ``database_workload.json``;
    ``mod_b64`` is the module exactly as MetaSchedule stores it there (opaque to the store)."""

    key: str
    name: str
    kind: str = "kernel"
    source: str = ""
    shapes: dict = field(default_factory=dict)
    flops: int = 0
    mod_b64: str = ""


@dataclass(frozen=True)
class Record(DictValue):
    """One measurement of one schedule of one workload, on one target and machine.

    ``target`` is the canonical target JSON text (compared by equality); ``hardware`` the
    fingerprint of the machine that measured it; ``latencies`` every repeat in seconds."""

    workload_key: str
    target: str
    hardware: str
    source: str
    status: Outcome  # (a value read back from a database is its text; Store.add_record refuses others)
    steps: list
    trace: object
    latencies: list
    median_s: float | None
    gflops: float | None
    environment: dict
    max_error: float | None = None
    verified: bool | None = None
    predicted: float | None = None
    job_id: int | None = None
    error: str = ""
    created: str = ""
    id: int | None = None
    args_info: object = None
    candidate: str | None = None  # a search candidate's structural hash (what resume looks up)
    # MetaSchedule's run_secs exactly as it reported them, when they say more than ``latencies``
    # (its failure marker 1e10 among them, or an empty list); None: the latencies are the run times
    run_secs: list | None = None

    @property
    def ok(self) -> bool:
        """Whether the record may rank: it ran, and did not fail verification."""
        return self.status == Outcome.OK and self.median_s is not None and self.verified is not False

    @property
    def outcome(self) -> Outcome:
        """``status`` as an :class:`Outcome`."""
        return Outcome(self.status)

    def ms_run_secs(self) -> list[float]:
        """The run times MetaSchedule sees for this record: its own run_secs when it gave them,
        else the latencies of a record that ran, else its failure marker ``[1e10]``."""
        if self.run_secs is not None:
            return [float(x) for x in self.run_secs]
        if self.status == Outcome.OK and self.latencies:
            return [float(x) for x in self.latencies]
        return [MS_FAILED_SECS]

    def identity(self) -> str:
        """What makes two records the same measurement (see :func:`record_identity`)."""
        return record_identity(self.workload_key, self.target, self.hardware, self.steps, self.trace, self.latencies)


@dataclass(frozen=True)
class Job(DictValue):
    """A background run (search, export) kept in the same database so any process can follow it."""

    id: int
    kind: str
    status: str
    params: dict
    progress: dict
    pid: int | None
    created: str
    updated: str
    error: str = ""


def record_identity(workload_key: str, target: str, hardware: str, steps, trace, latencies) -> str:
    """The identity used to skip duplicates when merging or importing.

    Two records are the same measurement when workload, target, hardware, schedule (steps and
    trace) and every measured latency are equal. Source and time are left out on purpose: a
    record exported to MetaSchedule JSON and imported back, or merged twice, is not new."""
    payload = json.dumps([workload_key, target, hardware, steps or [], trace, [float(x) for x in latencies or []]],
                         sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha1(payload.encode()).hexdigest()


def median_of(latencies) -> float | None:
    """Median of the valid latencies (MetaSchedule's 1e10 failure marker excluded)."""
    valid = [float(x) for x in latencies or [] if x is not None and float(x) < MS_FAILED_SECS]
    return statistics.median(valid) if valid else None


def split_run_secs(run_secs) -> tuple[list[float], list[float] | None]:
    """MetaSchedule's run_secs as (latencies, run_secs to keep): the latencies are the valid run
    times; the exact list is kept too when it says more (a failure marker, or no run at all)."""
    if run_secs is None:
        return [], None
    exact = [float(x) for x in run_secs]
    valid = [x for x in exact if x < MS_FAILED_SECS]
    return valid, (exact if exact != valid or not exact else None)


def gflops_of(flops: int | float, median_s: float | None) -> float | None:
    if not flops or not median_s:
        return None
    return flops / median_s / 1e9


def now_iso() -> str:
    """The current time as ISO-8601 UTC with microseconds: sortable as text."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def iso_since(value) -> str | None:
    """A ``since``/``until`` filter (date, datetime or ISO-8601 text) as text comparable with
    ``created`` (UTC; a time without a zone is UTC). Raises :class:`StoreError` for text that is
    not a real date, such as ``2020-13-45``."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = parse_date(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    raise StoreError(f"a date filter must be a date, a datetime or ISO-8601 text, not {type(value).__name__}")


def parse_date(text: str) -> date | datetime:
    """``YYYY-MM-DD`` as a date, or an ISO-8601 date and time as a datetime; else StoreError."""
    text = str(text).strip()
    try:
        if len(text) == 10 and text.isascii():
            return date.fromisoformat(text)
        if len(text) > 10 and text.isascii() and text[10] in "T ":
            return datetime.fromisoformat(text)
    except ValueError as err:
        raise StoreError(f"{text!r} is not a valid date ({err}); write YYYY-MM-DD, e.g. 2025-01-31") from err
    raise StoreError(f"{text[:40]!r} is not a date; write YYYY-MM-DD (e.g. 2025-01-31) or an ISO-8601 date and time")


def target_short(target: str) -> str:
    """A few words for a canonical target JSON: ``llvm znver4 2c``, ``cuda sm_80``."""
    try:
        t = json.loads(target)
    except (TypeError, ValueError):
        return str(target)
    if not isinstance(t, dict):
        return str(target)
    words = [str(t.get("kind", "?"))]
    for key in ("mcpu", "arch", "model", "device"):
        if t.get(key):
            words.append(str(t[key]))
    mattr = [str(a) for a in t.get("mattr") or []]
    if mattr:
        words.append(" ".join(mattr[:2]) + (f" (+{len(mattr) - 2} more)" if len(mattr) > 2 else ""))
    if t.get("mtriple"):
        words.append(str(t["mtriple"]).split("-")[0])
    if t.get("num-cores"):
        words.append(f"{t['num-cores']}c")
    return " ".join(words)


__all__ = ["JOB_STATUSES", "Job", "KINDS", "MS_FAILED_SECS", "Record", "SOURCES", "STATUSES", "Workload",
           "gflops_of", "iso_since", "median_of", "now_iso", "parse_date", "record_identity", "split_run_secs",
           "target_short"]
