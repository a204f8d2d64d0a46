"""Records for an export: per task of the workload, the store's records for the export's target
(and machine), turned into the plain :class:`export.TaskSchedule` the export takes (the export
room reads the store; explorer never does).

How they rank: one record per schedule, its newest (a schedule timed again stands at its new
time); the schedules a search's confirmation round timed in turns with the default come first
(see :mod:`search.confirm_round`), then the others; fastest first within each. The best is the
first: after a search, the winner of its confirmation (the default schedule's record when the
default won, which applies the same schedule as no record).

Which machine's records count: exporting for the host CPU takes records measured on this machine
(its hardware fingerprint); a named CPU or a GPU takes records from any machine, since none of
them was measured here. ``hardware=`` overrides both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from explorer.target import Target
from explorer.workload import Task
from export.errors import ExportError
from export.schedules import TaskSchedule
from store import Record, Store, StoreError, default_db_path

AUTO = "auto"


@dataclass(frozen=True)
class TaskChoice:
    """A task and the records that could schedule it, best first (see the module docstring; empty:
    default schedule)."""

    task: Task
    candidates: tuple[Record, ...] = ()
    other_shapes: tuple[str, ...] = ()  # shapes this kernel has records at, when none are for these shapes

    @property
    def best(self) -> Record | None:
        return self.candidates[0] if self.candidates else None

    def to_dict(self) -> dict:
        return {**self.task.to_dict(), "records": [
            {"id": r.id, "source": r.source, "median_s": r.median_s, "gflops": r.gflops, "hardware": r.hardware,
             "created": r.created} for r in self.candidates]}


def open_store(path: str | os.PathLike | None) -> Store | None:
    """The store at ``path`` (must exist), or the default one if it exists, else None (no records)."""
    if path is None:
        path = default_db_path()
        if not path.is_file():
            return None
    path = Path(path).expanduser()
    if not path.is_file():
        raise ExportError(f"no database at {path}: give an existing schedx database (or leave --db out)")
    try:
        return Store(path, create=False)
    except StoreError as err:
        raise ExportError(str(err)) from err


def hardware_for(target: Target, hardware: str | None = AUTO) -> str | None:
    """The hardware fingerprint records must carry (None: any machine); see the module docstring."""
    if hardware != AUTO:
        return hardware
    if target.is_host:
        from explorer.target.environment import hardware_fingerprint

        return hardware_fingerprint()
    return None


def _usable(r: Record) -> bool:
    return bool(r.trace is not None or r.steps)


def task_choices(store: Store | None, tasks: list[Task], target: Target, *, hardware: str | None = AUTO,
                 limit: int = 10) -> list[TaskChoice]:
    """Per task, up to ``limit`` rankable records with a trace or steps for ``target``, one per
    schedule (its newest), fastest first; schedules a search's confirmation round timed come first."""
    if store is None:
        return [TaskChoice(t) for t in tasks]
    machine = hardware_for(target, hardware)
    out = []
    seen: dict[str, tuple[Record, ...]] = {}
    for task in tasks:
        if task.key not in seen:
            # each schedule at its newest time; those a search's confirmation round timed in turns
            # with the default first (see search.confirm_round)
            found = [r for text in target.record_targets
                     for r in store.schedules(workload=task.key, target=text, hardware=machine, limit=limit * 4,
                                              confirmed_first=True)]
            unique = {r.id: r for r in found if _usable(r) and target.accepts(r.target)}
            seen[task.key] = tuple(sorted(unique.values(), key=lambda r: (
                "confirmation" not in (r.environment or {}), r.median_s or float("inf"), r.id))[:limit])
        others = () if seen[task.key] else _other_shapes(store, task)
        out.append(TaskChoice(task, seen[task.key], others))
    return out


def _other_shapes(store: Store, task: Task) -> tuple[str, ...]:
    """The shapes of other workloads of the same name (the same kernel of the same model at other
    input shapes): their records do not apply here, and the export says so."""
    shapes = []
    for w in store.workloads():
        if w.name != task.name or w.key == task.key:
            continue
        model = (w.shapes or {}).get("model_shapes")
        args = "; ".join("x".join(map(str, a.get("shape", []))) for a in (w.shapes or {}).get("args", [])[:2])
        shapes.append(model or args or "other shapes")
    return tuple(dict.fromkeys(shapes))


def shape_warnings(choices: list[TaskChoice]) -> list[str]:
    """One warning per task that has records only at other shapes (records are valid for the
    shapes they were tuned at: the default schedule is used)."""
    return [f"{c.task.name}: records exist only for other shapes ({', '.join(c.other_shapes)}); records apply to "
            f"the shapes they were tuned at, so this export uses the default schedule (tune with these --shapes)"
            for c in choices if not c.candidates and c.other_shapes]


def record_schedule(r: Record) -> TaskSchedule:
    """A record as the schedule an export applies (its trace, else its steps)."""
    return TaskSchedule(trace=r.trace, steps=tuple(r.steps or ()) if r.trace is None else (), record_id=r.id,
                        source=r.source, median_s=r.median_s)


def schedules_for(choices: list[TaskChoice], picks: Mapping[str, int | None] | None = None) -> dict[str, TaskSchedule]:
    """Task name -> schedule: the best record, or the record id ``picks`` names for that task
    (None in ``picks``: the default schedule). A record of the default schedule (source
    ``default``: a search measured it first) is the default schedule: the export builds it from
    the rules, as for a task without a record (replaying its trace left the kernels without their
    names in the profile, and the model slower than the rules' build: docs/notes/measurements.md)."""
    picks = picks or {}
    out = {}
    for choice in choices:
        name = choice.task.name
        if name in picks:
            wanted = picks[name]
            if wanted is None:
                continue
            record = next((r for r in choice.candidates if r.id == wanted), None)
            if record is None:
                raise ExportError(f"record {wanted} is not a record of task {name} for this target")
        else:
            record = choice.best
        if record is not None and record.source != "default":
            out[name] = record_schedule(record)
    return out


NO_RECORDS = "no records for this workload, target and machine"


def why_no_schedules(choices: list[TaskChoice]) -> str:
    """Why no record schedules any task, in words: no records at all, or records that all lost to
    the default schedule (its own record, measured first by a search, is the best of each task)."""
    found = [c for c in choices if c.candidates]
    if not found:
        return NO_RECORDS
    count = sum(len(c.candidates) for c in found)
    return (f"{count} records for {len(found)} of {len(choices)} tasks, and none beat the default schedule "
            "measured beside them: the default build is the tuned one")


def best_schedules(db: str | os.PathLike | Store | None, tasks: list[Task], target: Target, *,
                   hardware: str | None = AUTO) -> tuple[dict[str, TaskSchedule], list[TaskChoice]]:
    """The best record per task from the database at ``db`` (None: the default database, if any)."""
    store = db if isinstance(db, Store) else open_store(db)
    try:
        choices = task_choices(store, tasks, target, hardware=hardware)
    except StoreError as err:
        raise ExportError(f"could not read records: {err}") from err
    finally:
        if store is not None and not isinstance(db, Store):
            store.close()
    return schedules_for(choices), choices


def workload_schedules(db: str | os.PathLike | Store | None, workload, target: Target, *, use_records: bool = True,
                       hardware: str | None = None) -> tuple[dict[str, TaskSchedule], list[TaskChoice]]:
    """The best record per task of a loaded workload (none when ``use_records`` is off: --no-db),
    and the choices behind them."""
    if not use_records:
        return {}, []
    from export.build import workload_tasks

    return best_schedules(db, workload_tasks(workload), target, hardware=hardware or AUTO)


__all__ = ["workload_schedules", "AUTO", "TaskChoice", "best_schedules", "hardware_for", "open_store", "record_schedule", "schedules_for",
           "shape_warnings", "task_choices", "why_no_schedules", "NO_RECORDS"]
