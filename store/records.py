"""What the store holds, as frozen values that serialise to JSON: workloads, records, jobs.

These cross every room (the UI, the CLI, the search and MetaSchedule adapter), so they carry
plain JSON only: no TVM objects, no SQLite rows. ``to_dict()`` gives JSON-safe data and
``from_dict()`` reads it back (unknown keys are ignored, so older readers accept newer dicts).
"""

from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import asdict, dataclass, field, fields
from datetime import date, datetime, timezone

KINDS = ("kernel", "model_task")
SOURCES = ("manual", "search", "default", "import")
STATUSES = ("ok", "build_error", "run_error", "verify_failed", "timeout")
JOB_STATUSES = ("queued", "running", "done", "failed", "stopped")

# MetaSchedule writes this run time for a candidate that failed to build or run.
MS_FAILED_SECS = 1e10


def _from_dict(cls, data: dict):
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class Workload:
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

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Workload:
        return _from_dict(cls, data)


@dataclass(frozen=True)
class Record:
    """One measurement of one schedule of one workload, on one target and machine.

    ``target`` is the canonical target JSON text (compared by equality); ``hardware`` the
    fingerprint of the machine that measured it; ``latencies`` every repeat in seconds."""

    workload_key: str
    target: str
    hardware: str
    source: str
    status: str
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

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Record:
        return _from_dict(cls, data)

    @property
    def ok(self) -> bool:
        """Whether the record may rank: it ran, and did not fail verification."""
        return self.status == "ok" and self.median_s is not None and self.verified is not False

    def identity(self) -> str:
        """What makes two records the same measurement (see :func:`record_identity`)."""
        return record_identity(self.workload_key, self.target, self.hardware, self.steps, self.trace, self.latencies)


@dataclass(frozen=True)
class Job:
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

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Job:
        return _from_dict(cls, data)


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


def gflops_of(flops: int | float, median_s: float | None) -> float | None:
    if not flops or not median_s:
        return None
    return flops / median_s / 1e9


def now_iso() -> str:
    """The current time as ISO-8601 UTC with microseconds: sortable as text."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def iso_since(value) -> str | None:
    """A ``since`` filter (date, datetime or ISO text) as text comparable with ``created``."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc).isoformat(timespec="microseconds")
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


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
    if t.get("num-cores"):
        words.append(f"{t['num-cores']}c")
    return " ".join(words)


__all__ = ["JOB_STATUSES", "Job", "KINDS", "MS_FAILED_SECS", "Record", "SOURCES", "STATUSES", "Workload", "gflops_of",
           "iso_since", "median_of", "now_iso", "record_identity", "target_short"]
