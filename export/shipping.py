"""Which schedules ship: the one answer export, bench, profile, sweep and their pages share.

For a workload built for a target at a precision on this machine, :func:`shipped_schedules` gives
1. the records chosen per task (:mod:`export.choose`: the best for that target and machine), or
   the caller's picks (the Export page's);
2. the in-model decision applied (:mod:`export.in_model`: a record ships only where its kernel
   beats the default inside the model, and the records kept so ship together only where they make
   the whole model faster beyond the noise), whenever records would apply and the target runs
   here unless the caller says otherwise;
3. the default schedule for every task left without a record (the tasks the answer leaves out).

The tasks are those of the workload as built at the precision (:func:`export.build.as_built`:
at bf16, the bf16 kernels ``schedx tune --precision bf16`` searched; at int8, the QDQ model's), so a
record found for one precision never applies to the other's kernel of the same name. Give the
workload as built (the callers in :mod:`export.entry` do) and it is not made again.

The in-model decision is taken once and kept in the database with its interval
(:mod:`store.decisions`), for the model (its structural hash), the target (its key), this machine
(its hardware fingerprint), the precision and the ids of the records judged. Every later call
asking the same question reuses it and times nothing: taken again and again under the noise of a
shared machine, the answer would change from one command to the next. A new record that changes
which records are chosen, another machine or another precision asks another question, decided
afresh; ``recheck`` takes the decision again and replaces the one kept. A database that cannot
keep it (read-only, absent, the caller's schedules without record ids) still gets a decision,
taken each time, and the answer says why it was not kept.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from explorer.target import Target
from explorer.workload import Workload
from export.build import Progress
from export.choose import TaskChoice
from export.in_model import InModelCheck
from export.schedules import TaskSchedule
from store import Decision, Store, StoreError

# The in-model timing: (workload, target, schedules by task name, threads=) -> (the records kept by
# task name, the check's figures); the figures decide (export.in_model.check_in_model; tests pass
# a fake that times nothing)
InModelTimer = Callable[..., tuple[dict[str, TaskSchedule], InModelCheck]]

NO_RECORDS_USED = "no records used"
ALL_DROPPED = ("every record lost to the default schedule inside the model (what an export ships is the default "
               "build)")


@dataclass(frozen=True)
class ShipSpec:
    """The question: which schedules ship when ``workload`` is built for ``target`` at
    ``precision`` on this machine. Records come from ``db`` (a path, an open Store, or None: the
    default database if there is one; in-model decisions are kept there too) measured on
    ``hardware`` (None: :func:`export.choose.hardware_for`'s rule), or none with
    ``use_records=False``, or are the caller's ``schedules`` (task name or key -> schedule).
    ``check_in_model``: apply the in-model decision (None: whenever records would apply and the
    target runs here; False ships the records as chosen); ``recheck``: take it again even where
    one is kept; ``threads``: the threads the in-model timing runs with."""

    workload: Workload
    target: Target
    db: str | os.PathLike | Store | None = None
    use_records: bool = True
    hardware: str | None = None
    schedules: Mapping[str, TaskSchedule] | None = None
    precision: str = "fp32"
    check_in_model: bool | None = None
    recheck: bool = False
    threads: int | None = None


@dataclass(frozen=True)
class DecisionUsed:
    """The in-model decision an answer applied: as kept in the database (or as it would be kept),
    whether it was reused (nothing timed), and why it was not kept ("" when it was)."""

    decision: Decision
    reused: bool
    not_kept: str = ""

    @property
    def check(self) -> InModelCheck:
        return InModelCheck.from_dict(self.decision.details.get("check") or {})

    def text(self) -> str:
        """``in-model decision from <time> (reused, ...): 12 record(s) kept, 11 dropped (<interval>)``."""
        check = self.check
        how = ("reused: a recheck takes it again" if self.reused else
               "taken now" if self.not_kept else "taken now, kept for the next commands")
        line = (f"in-model decision from {_when(self.decision.created)} ({how}): {len(check.kept)} record(s) kept, "
                f"{len(check.dropped)} dropped ({_interval(check.whole)})")
        return f"{line}; not kept for the next command: {self.not_kept}" if self.not_kept else line

    def to_dict(self) -> dict:
        return {**self.decision.to_dict(), "reused": self.reused, "not_kept": self.not_kept, "text": self.text()}


def _when(created: str) -> str:
    try:
        return datetime.fromisoformat(created).strftime("%Y-%m-%d %H:%M:%S UTC")
    except ValueError:
        return created or "?"


def _interval(whole: dict) -> str:
    if not whole:
        return "none won kernel by kernel"
    verdict = {"faster": "faster", "same": "no difference beyond the noise"}.get(whole["verdict"], whole["verdict"])
    return (f"with the {whole['records']} that won kernel by kernel the model ran {whole['ratio']:.3f}x the defaults' "
            f"time, 95% CI {whole['low']:.3f}-{whole['high']:.3f}: {verdict}")


@dataclass(frozen=True)
class Shipped:
    """The answer: ``schedules`` (task name -> the record's schedule; every other task gets the
    default), the ``choices`` behind them (records per task, best first; empty when the caller
    gave the schedules or no records were used), ``warnings`` from choosing (records only at other
    shapes), the in-model ``decision`` applied (None: not applied), and ``why_none``: why no record
    ships, where none does."""

    schedules: dict[str, TaskSchedule]
    choices: tuple[TaskChoice, ...] = ()
    warnings: tuple[str, ...] = ()
    decision: DecisionUsed | None = None
    why_none: str = ""

    @property
    def dropped(self) -> list[str]:
        """One sentence per record the in-model decision dropped, saying why."""
        return self.decision.check.notes() if self.decision is not None else []

    @property
    def notes(self) -> list[str]:
        """What an export's manifest says about the choice: the warnings, then the records dropped."""
        return [*self.warnings, *self.dropped]

    def summary(self) -> str:
        """The decision used, in one line ("" when none was applied)."""
        return self.decision.text() if self.decision is not None else ""

    def to_dict(self) -> dict:
        return {"schedules": {name: s.to_dict() for name, s in self.schedules.items()},
                "warnings": list(self.warnings), "dropped": self.dropped, "why_none": self.why_none,
                "decision": self.decision.to_dict() if self.decision is not None else None}


def shipped_schedules(spec: ShipSpec, progress: Progress | None = None, *,
                      timer: InModelTimer | None = None) -> Shipped:
    """Which schedules ship for ``spec`` (see the module docstring). ``progress(stage, fraction)``
    hears the in-model timing; ``timer`` replaces it (None: :func:`export.in_model.check_in_model`).
    The rooms' own errors (a database that cannot be read, a target that cannot be timed here)
    raise with their messages."""
    from export.build import workload_tasks
    from export.schedules import pick

    say = progress or (lambda stage, frac: None)
    spec = replace(spec, workload=_as_built(spec))
    schedules, choices, warnings = _chosen(spec)
    check = spec.check_in_model if spec.check_in_model is not None else spec.target.runs_here
    if not (check and schedules):
        return Shipped(schedules, choices, warnings, None, _why_none(spec, choices, schedules))
    spec.target.require_runnable("time")
    chosen = {t.name: s for t in workload_tasks(spec.workload) if (s := pick(schedules, t)) is not None}
    if not chosen:  # the caller's schedules name no task of this workload: nothing applies
        return Shipped({}, choices, warnings, None, _why_none(spec, choices, {}))
    used = _decide(spec, chosen, say, timer)
    kept = set(used.check.kept)
    shipped = {name: s for name, s in chosen.items() if name in kept}
    return Shipped(shipped, choices, warnings, used, "" if shipped else ALL_DROPPED)


def _as_built(spec: ShipSpec) -> Workload:
    """The workload as the build at ``spec.precision`` compiles it: its tasks are the ones records
    are chosen for and the in-model timing builds (bf16: the weight products rewritten; int8: the
    QDQ model). A workload given as built (:func:`export.build.as_built`) is taken as it is."""
    from export.build import as_built

    return as_built(spec.workload, spec.target, spec.precision)[0]


def _chosen(spec: ShipSpec) -> tuple[dict[str, TaskSchedule], tuple[TaskChoice, ...], tuple[str, ...]]:
    """The schedules before the in-model decision, the choices behind them, and their warnings."""
    if spec.schedules is not None:
        return dict(spec.schedules), (), ()
    if not spec.use_records:
        return {}, (), ()
    from export.choose import shape_warnings, workload_schedules

    schedules, choices = workload_schedules(spec.db, spec.workload, spec.target, hardware=spec.hardware)
    return schedules, tuple(choices), tuple(shape_warnings(choices))


def _why_none(spec: ShipSpec, choices: tuple[TaskChoice, ...], schedules: Mapping) -> str:
    from export.choose import why_no_schedules

    if schedules:
        return ""
    if not spec.use_records:
        return NO_RECORDS_USED
    if spec.schedules is not None:
        return "the default schedule was picked for every kernel"
    return why_no_schedules(list(choices))


def _decide(spec: ShipSpec, chosen: dict[str, TaskSchedule], say: Progress, timer: InModelTimer | None
            ) -> DecisionUsed:
    """The kept decision for this question, else one taken now (and kept where the database can)."""
    from explorer.target.environment import hardware_fingerprint

    ids = [s.record_id for s in chosen.values()]
    question = {"workload_key": spec.workload.workload_hash(), "target": spec.target.key,
                "hardware": hardware_fingerprint(), "precision": spec.precision,
                "candidates": tuple(i for i in ids if i is not None)}
    if None in ids:
        store, not_kept = None, "a schedule given without its record's id cannot be matched again"
    else:
        store, not_kept = _decision_store(spec.db)
    try:
        if store is not None and not spec.recheck:
            try:
                found = store.in_model_decision(**question)
            except StoreError:  # an unreadable row: taken again, and replaced
                found = None
            if found is not None:
                say(f"reusing the in-model decision from {_when(found.created)}", 0.0)
                return DecisionUsed(found, reused=True)
        say(f"timing {len(chosen)} record(s) inside the model against the default schedules", 0.0)
        if timer is None:
            from export.in_model import check_in_model

            timer = check_in_model
        _, check = timer(spec.workload, spec.target, chosen, threads=spec.threads)
        whole = check.whole or {}
        decision = Decision(**question, kept=tuple(chosen[n].record_id for n in check.kept
                                                   if n in chosen and chosen[n].record_id is not None),
                            ratio=whole.get("ratio"), low=whole.get("low"), high=whole.get("high"),
                            details={"check": check.to_dict(), "threads": spec.threads,
                                     "records": {n: s.record_id for n, s in chosen.items()}})
        if store is not None:
            try:
                decision = store.save_in_model_decision(decision)
            except StoreError as err:  # read-only: the decision applies, and is taken again next time
                not_kept = str(err)
        if not decision.created:
            from store.records import now_iso

            decision = replace(decision, created=now_iso())
        return DecisionUsed(decision, reused=False, not_kept=not_kept)
    finally:
        if store is not None and not isinstance(spec.db, Store):
            store.close()


def _decision_store(db: str | os.PathLike | Store | None) -> tuple[Store | None, str]:
    """The database decisions are kept in (the one records come from), or why there is none."""
    if isinstance(db, Store):
        return db, ""
    from pathlib import Path

    from store import default_db_path

    try:
        path = Path(db).expanduser() if db is not None else default_db_path()
        if not path.is_file():
            return None, f"no database at {path}"
        return Store(path, create=False), ""
    except (StoreError, OSError) as err:
        return None, str(err)


__all__ = ["ALL_DROPPED", "NO_RECORDS_USED", "DecisionUsed", "InModelTimer", "ShipSpec", "Shipped",
           "shipped_schedules"]
