"""Candidate claims: searches running at the same time on one database never measure the same
candidate twice.

Before a search measures a batch it claims the batch's candidates (by workload, target, machine
and candidate hash) in one write transaction; a candidate already measured (a record that is not
an ``infra_error``) or claimed by another live search is not granted. Claims are released when
the batch's records are written (the records then answer) and when the search ends; a claim
older than its time-to-live (a search killed with -9 never released it) no longer counts.

The table is created the first time a search claims anything (no schema version change: older
schedx versions ignore it, and a read-only database is never claimed in, it cannot be searched).
"""

from __future__ import annotations

import json
import time

import sqlite_utils

from store.outcome import Outcome

TABLE = "candidate_claims"
_CREATE = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    workload_key TEXT NOT NULL,
    target TEXT NOT NULL,
    hardware TEXT NOT NULL,
    candidate TEXT NOT NULL,
    owner TEXT NOT NULL,
    expires REAL NOT NULL,
    PRIMARY KEY (workload_key, target, hardware, candidate)
)"""


def claim(db: sqlite_utils.Database, workload_key: str, target: str, hardware: str, candidates: list[str],
          owner: str, ttl_s: float) -> list[str]:
    """Inside the caller's write transaction: the candidates ``owner`` may measure (its own claims
    renewed, new ones taken); the others are measured already or claimed by someone else."""
    db.execute(_CREATE)
    now = time.time()
    wanted = sorted(set(candidates))
    if not wanted:
        return []
    measured = {row[0] for row in db.execute(
        "SELECT candidate FROM records WHERE workload_key = ? AND target = ? AND hardware = ? AND status != ? "
        "AND candidate IN (SELECT value FROM json_each(?))",
        [workload_key, target, hardware, Outcome.INFRA_ERROR.value, json.dumps(wanted)]).fetchall()}
    held = dict(db.execute(
        f"SELECT candidate, owner FROM {TABLE} WHERE workload_key = ? AND target = ? AND hardware = ? "
        "AND expires > ? AND candidate IN (SELECT value FROM json_each(?))",
        [workload_key, target, hardware, now, json.dumps(wanted)]).fetchall())
    granted = [c for c in wanted if c not in measured and held.get(c, owner) == owner]
    db.conn.executemany(f"INSERT OR REPLACE INTO {TABLE} (workload_key, target, hardware, candidate, owner, expires) "
                   "VALUES (?, ?, ?, ?, ?, ?)", [(workload_key, target, hardware, c, owner, now + ttl_s)
                                                 for c in granted])
    return [c for c in candidates if c in set(granted)]


def release(db: sqlite_utils.Database, owner: str) -> int:
    """Inside the caller's write transaction: drop ``owner``'s claims (and any that expired)."""
    if TABLE not in db.table_names():
        return 0
    cur = db.execute(f"DELETE FROM {TABLE} WHERE owner = ? OR expires <= ?", [owner, time.time()])
    return cur.rowcount


def claimed(db: sqlite_utils.Database) -> dict[str, int]:
    """Live claims per owner (what ``schedx jobs`` can show)."""
    if TABLE not in db.table_names():
        return {}
    return dict(db.execute(f"SELECT owner, COUNT(*) FROM {TABLE} WHERE expires > ? GROUP BY owner",
                           [time.time()]).fetchall())


__all__ = ["TABLE", "claim", "claimed", "release"]
