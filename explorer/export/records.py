"""Tasks of an export and the schedule chosen for each, as plain data.

A *task* is one PrimFunc of the module being exported, keyed exactly as MetaSchedule keys its
workloads (structural hash of the normalised PrimFunc), so a record in the store meets the
kernel it was tuned for. A :class:`TaskSchedule` is what the caller chose for a task: a record's
trace or steps (``explorer`` never reads the store; ``search.export_records`` turns records into
these). Tasks left without one keep the default schedule, and :func:`coverage_warning` says which
and how much of the work they carry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import tvm
import tvm_ffi


@dataclass(frozen=True)
class Task:
    """One kernel of the exported module: its name there, workload key, calls per run, FLOPs."""

    name: str
    key: str
    calls: int
    flops: int

    @property
    def work(self) -> int:
        return self.flops * max(1, self.calls)

    def to_dict(self) -> dict:
        return asdict(self)


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
    (no record: dlight on GPU, the unscheduled loop nest on CPU) or "failed" (a record was given
    but did not apply; the default was used and ``error`` says why)."""

    task: Task
    schedule: str
    record_id: int | None = None
    share: float = 0.0
    error: str = ""

    def to_dict(self) -> dict:
        return {**self.task.to_dict(), "schedule": self.schedule, "record_id": self.record_id,
                "share": self.share, "error": self.error}


def normalized_task(func: tvm.tirx.PrimFunc) -> tvm.IRModule:
    """The task module MetaSchedule tunes and keys: ``main`` with global_symbol and noalias set."""
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    return _normalize_mod(func)


def task_key(func: tvm.tirx.PrimFunc) -> str:
    """MetaSchedule's workload key of a PrimFunc (the decimal text of database_workload.json)."""
    return str(tvm_ffi.structural_hash(normalized_task(func)) % (1 << 64))


def module_tasks(mod: tvm.IRModule) -> list[Task]:
    """The PrimFuncs ``main`` calls, most work first (FLOPs x calls)."""
    from tvm.s_tir.analysis import estimate_tir_flops

    from explorer.kernels.from_model import call_counts
    from explorer.relax_walk import prim_funcs

    calls = call_counts(mod) if "main" in [g.name_hint for g in mod.get_global_vars()] else {}
    tasks = []
    for name, func in prim_funcs(mod).items():
        try:
            flops = int(estimate_tir_flops(tvm.IRModule({"main": func})))
        except Exception:  # noqa: BLE001 - opaque bodies: no FLOPs estimate
            flops = 0
        tasks.append(Task(name=name, key=task_key(func), calls=int(calls.get(name, 1)), flops=flops))
    tasks.sort(key=lambda t: (-t.work, t.name))
    return tasks


def shares(tasks: list[Task]) -> dict[str, float]:
    """Each task's fraction of the module's FLOPs (calls counted)."""
    total = sum(t.work for t in tasks) or 1
    return {t.name: t.work / total for t in tasks}


def coverage_warning(outcomes: list[TaskOutcome], device: str) -> str:
    """One sentence naming the tasks that run a default schedule, with their FLOPs share ("" if none)."""
    default = [o for o in outcomes if o.schedule != "record"]
    if not default:
        return ""
    what = "dlight's default GPU schedules" if device == "cuda" else "the unscheduled loop nest (no record: slow)"
    share = sum(o.share for o in default)
    named = ", ".join(f"{o.task.name} ({o.share:.1%})" for o in default[:8])
    more = f" and {len(default) - 8} more" if len(default) > 8 else ""
    return (f"{len(default)} of {len(outcomes)} kernels ({share:.1%} of the FLOPs) have no record for this target "
            f"and use {what}: {named}{more}")


def pick(schedules: Mapping[str, TaskSchedule] | None, task: Task) -> TaskSchedule | None:
    """The schedule chosen for ``task``: looked up by task name first, then by workload key."""
    if not schedules:
        return None
    return schedules.get(task.name) or schedules.get(task.key)


__all__ = ["Task", "TaskOutcome", "TaskSchedule", "coverage_warning", "module_tasks", "normalized_task", "pick",
           "shares", "task_key"]
