"""In-model decisions, kept: which of the records chosen for a model ship, decided once.

An export times the records it would apply inside the model against the default schedules and
keeps only those that win there (``export.in_model``); that decision, under the noise of a shared
machine, could come out differently every time it was taken again. So it is taken once and kept
here, with its interval, and every later command asking the same question reuses it.

A question is: this model (``workload_key``), this target (its key), this machine (the hardware
fingerprint of the machine that timed it), this precision, and these records judged (their ids).
A new record that changes which records are chosen, another machine or another precision is
another question, without an answer yet. Saving an answer to a question already answered
replaces it (a recheck). The table comes with schema 4 (:mod:`store.schema`); a database of an
older schema opened read-only has none, and holds no decision.

What the figures mean is the export's business: ``details`` is plain JSON the store keeps as given.
Functions here run inside the caller's transaction (see :class:`store.Store`'s decision methods).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace

import sqlite_utils

from store.records import now_iso
from store.schema import DECISIONS_TABLE


def _ids(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(sorted({int(v) for v in values}))


def _ids_text(values: Iterable[int]) -> str:
    """The ids as the table keys them: ascending, once each, compact JSON."""
    return json.dumps(list(_ids(values)), separators=(",", ":"))


@dataclass(frozen=True)
class Decision:
    """One in-model decision (see the module docstring). ``candidates``: the ids of the records
    judged; ``kept``: those that ship; ``ratio``, ``low``, ``high``: the whole model's time with the
    records that won kernel by kernel over the defaults', and its 95% interval (None when none
    won); ``details``: the check's own figures; ``created``: when it was taken (ISO-8601 UTC)."""

    workload_key: str
    target: str
    hardware: str
    precision: str
    candidates: tuple[int, ...]
    kept: tuple[int, ...] = ()
    ratio: float | None = None
    low: float | None = None
    high: float | None = None
    details: dict = field(default_factory=dict)
    created: str = ""
    id: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "candidates", _ids(self.candidates))
        object.__setattr__(self, "kept", _ids(self.kept))

    @property
    def dropped(self) -> tuple[int, ...]:
        return tuple(i for i in self.candidates if i not in set(self.kept))

    def to_dict(self) -> dict:
        return {**asdict(self), "candidates": list(self.candidates), "kept": list(self.kept),
                "dropped": list(self.dropped)}


def find(db: sqlite_utils.Database, *, workload_key: str, target: str, hardware: str, precision: str,
         candidates: Iterable[int]) -> Decision | None:
    """The decision taken for this question, or None (none yet, or a database without the table)."""
    if DECISIONS_TABLE not in db.table_names():
        return None
    rows = list(db.query(f"SELECT * FROM {DECISIONS_TABLE} WHERE workload_key = ? AND target = ? AND hardware = ? "
                         "AND precision = ? AND candidates = ?",
                         [workload_key, target, hardware, precision, _ids_text(candidates)]))
    return _row_decision(rows[0]) if rows else None


def save(db: sqlite_utils.Database, decision: Decision) -> Decision:
    """Keep ``decision`` (``created`` filled with now when empty), replacing an earlier answer to
    the same question; returns it as stored, with its id."""
    created = decision.created or now_iso()
    row = {"workload_key": decision.workload_key, "target": decision.target, "hardware": decision.hardware,
           "precision": decision.precision, "candidates": _ids_text(decision.candidates),
           "kept": _ids_text(decision.kept), "ratio": decision.ratio, "low": decision.low, "high": decision.high,
           "details": json.dumps(decision.details), "created": created}
    cursor = db.execute(f"INSERT OR REPLACE INTO {DECISIONS_TABLE} ({', '.join(row)}) "
                        f"VALUES ({', '.join('?' * len(row))})", list(row.values()))
    return replace(decision, created=created, id=cursor.lastrowid)


def _row_decision(row: dict) -> Decision:
    return Decision(workload_key=row["workload_key"], target=row["target"], hardware=row["hardware"],
                    precision=row["precision"], candidates=tuple(json.loads(row["candidates"])),
                    kept=tuple(json.loads(row["kept"])), ratio=row["ratio"], low=row["low"], high=row["high"],
                    details=json.loads(row["details"]), created=row["created"], id=row["id"])


__all__ = ["Decision", "find", "save"]
