"""A default record as a search stores it (its trace only, no steps), put in a leaderboard database:
what the Leaderboard's "Open in Schedule page" opens, for the page tests."""

from __future__ import annotations

from pathlib import Path

from explorer.target.environment import hardware_fingerprint
from store import Record, Store


def add_default_record(db: str | Path, workload, trace: list) -> int:
    """Store ``workload`` (a :class:`store.Workload`) and a default record of ``trace`` for it in ``db``;
    the record's id."""
    with Store(db) as store:
        store.add_workload(workload)
        return store.add_record(Record(
            workload_key=workload.key, target='{"kind": "llvm"}', hardware=hardware_fingerprint(), source="default",
            status="ok", steps=[], trace=trace, latencies=[1e-4], median_s=1e-4, gflops=None, environment={}))


__all__ = ["add_default_record"]
