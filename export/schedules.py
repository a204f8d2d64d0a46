"""The schedule chosen for each task of an export, and what became of it, as plain data.

Tasks are :class:`explorer.workload.Task` (keyed as MetaSchedule keys its workloads, so a record
in the store meets the kernel it was tuned for). A :class:`TaskSchedule` is what the caller chose
for a task: a record's trace or steps (:mod:`export.choose` turns store records into these).
Tasks left without one keep the target's default schedule, and :func:`coverage_warning` says
which and how much of the work they carry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from explorer.workload import Task


@dataclass(frozen=True)
class TaskSchedule:
    """A schedule for one task: a MetaSchedule trace (plain JSON) or a list of steps (dicts),
    and where it came from. ``record_id`` is the store record's id when it came from one."""

    trace: object = None
    steps: tuple = ()
    record_id: int | None = None
    source: str = ""
    median_s: float | None = None

    def to_dict(self) -> dict:
        return {"record_id": self.record_id, "source": self.source, "median_s": self.median_s,
                "has_trace": self.trace is not None, "steps": len(self.steps)}


@dataclass(frozen=True)
class TaskOutcome:
    """What the export did with one task: ``schedule`` is "record" (a record applied), "default"
    (no record: the target's default schedule, dlight on GPU and schedx's rules on CPU), "written"
    (a kernel schedx writes whole for the target: a recurrent layer's) or "failed" (a record was
    given but did not apply; the default was used and ``error`` says why)."""

    task: Task
    schedule: str
    record_id: int | None = None
    share: float = 0.0
    error: str = ""

    def to_dict(self) -> dict:
        return {**self.task.to_dict(), "schedule": self.schedule, "record_id": self.record_id,
                "share": self.share, "error": self.error}


def shares(tasks: list[Task]) -> dict[str, float]:
    """Each task's fraction of the module's FLOPs (calls counted)."""
    total = sum(t.work for t in tasks) or 1
    return {t.name: t.work / total for t in tasks}


def coverage_warning(outcomes: list[TaskOutcome], default_schedule: str) -> str:
    """One sentence naming the tasks that run ``default_schedule`` (the target's words for it),
    with their FLOPs share ("" if none)."""
    default = [o for o in outcomes if o.schedule not in ("record", "written")]
    if not default:
        return ""
    what = default_schedule
    share = sum(o.share for o in default)
    named = ", ".join(f"{o.task.name} ({o.share:.1%})" for o in default[:8])
    more = f" and {len(default) - 8} more" if len(default) > 8 else ""
    return (f"{len(default)} of {len(outcomes)} kernels ({share:.1%} of the FLOPs) have no record for this target "
            f"(or a search found none faster than the default) and use {what}: {named}{more}")


def pick(schedules: Mapping[str, TaskSchedule] | None, task: Task) -> TaskSchedule | None:
    """The schedule chosen for ``task``: looked up by task name first, then by workload key."""
    if not schedules:
        return None
    return schedules.get(task.name) or schedules.get(task.key)


def by_key(schedules: Mapping[str, TaskSchedule] | None, outcomes) -> dict[str, TaskSchedule] | None:
    """The schedules a build was given, by the workload key of the task each met in its ``outcomes``
    (a task name names another kernel in a build of the same model whose products changed: its
    matmuls or convolutions built again in fp32); those given by key that met none kept as they are."""
    if not schedules:
        return schedules
    names = {o.task.name for o in outcomes}
    keyed = {k: s for k, s in schedules.items() if k not in names and k.isdigit()}
    keyed.update({o.task.key: s for o in outcomes if (s := pick(schedules, o.task)) is not None})
    return keyed


__all__ = ["TaskOutcome", "TaskSchedule", "by_key", "coverage_warning", "pick", "shares"]
