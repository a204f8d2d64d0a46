"""Build a workload for a target with the chosen schedules applied.

Models: the task pipeline (batch-norm folded, NHWC, LegalizeOps .. FuseTIR, weights marked: exactly what the
search extracts its tasks from, so workload keys meet), then each task gets its schedule: a
record's trace replayed as MetaSchedule's ``ApplyDatabase`` does, or a record's steps; records
first, and the tasks without one get the target's default (dlight on GPU; on CPU schedx's rules,
tiled, parallel and vectorized, :mod:`explorer.schedule.defaults`). Weights a schedule reads in
another layout are packed now, once (:mod:`export.weight_layouts`), then ``main``'s constants
become parameters (:mod:`export.params`). Kernels skip fusion: their one PrimFunc is the task.
Then the target's Relax lowering and finalisation passes, and ``relax.build``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax

from explorer.errors import short_tvm_message
from explorer.interrupts import reraise as reraise_interrupt
from explorer.target import Target
from explorer.workload import Task, Workload, owned_task_module
from export.errors import ExportError
from export.params import ParamSpec, lift_constants
from export.weight_layouts import fold_weight_layouts
from export.schedules import TaskOutcome, TaskSchedule, by_key, coverage_warning, pick, shares
from export.tune_command import tune_commands

Progress = Callable[[str, float], None]


@dataclass
class Built:
    """A built workload: the executable, the module handed to code generation, the parameters
    (specs and values, in ``main``'s order after the inputs), and what happened to each task."""

    workload: Workload
    target: Target
    executable: object  # relax.VMExecutable
    lowered: tvm.IRModule
    params: list[ParamSpec]
    param_values: list[np.ndarray]
    outcomes: list[TaskOutcome]
    warnings: list[str] = field(default_factory=list)
    seconds: dict = field(default_factory=dict)
    precision: object = None  # explorer.precision.Precision (None: fp32, as written)
    # the kernels where a default rule meant for them failed and a simpler one took them, or a bf16/int8
    # product ran without its dot-product tile (also in warnings): what a bench or a profile repeats
    fallbacks: list[str] = field(default_factory=list)

    @property
    def compile_seconds(self) -> float:
        return float(sum(self.seconds.values()))


def as_built(workload: Workload, target: Target, precision: str = "fp32", calibration=None) -> tuple[Workload, object]:
    """``(workload, precision)``: the workload as built at ``precision`` for ``target``
    (:func:`explorer.precision.for_precision`: made once, then handed on as it is; ``calibration``:
    int8's, :class:`explorer.precision.Calibration`), its tasks those of ``target``'s CPU
    (:meth:`explorer.workload.Workload.for_target`), a refusal as an :class:`ExportError`."""
    from explorer.precision import PrecisionError, for_precision

    try:
        built, chosen = for_precision(workload, target, precision, calibration)
    except PrecisionError as err:
        raise ExportError(str(err)) from err
    return built.for_target(target), chosen


def workload_tasks(workload: Workload) -> list[Task]:
    """The tasks of a workload, most work first: what records are looked up for."""
    return workload.tasks()


def apply_schedule(func: tvm.tirx.PrimFunc, schedule: TaskSchedule, name: str) -> tvm.tirx.PrimFunc:
    """``func`` scheduled by a record's trace (replayed like MetaSchedule's ApplyDatabase) or steps."""
    if schedule.trace is not None:
        from explorer.schedule.trace import replay

        new = replay(owned_task_module(func), schedule.trace).mod["main"]  # never the fused module's own function
    elif schedule.steps:
        from explorer.schedule.session import ScheduleSession
        from explorer.schedule.steps import steps_from_json

        session = ScheduleSession(func)
        session.apply_all(steps_from_json(list(schedule.steps)))
        new = session.mod["main"]
    else:
        raise ExportError("the record has neither a trace nor steps")
    before = [(tuple(int(d) for d in b.shape), str(b.dtype)) for b in func.params]
    after = [(tuple(int(d) for d in b.shape), str(b.dtype)) for b in new.params]
    if before != after:
        raise ExportError("the schedule changes the kernel's parameters (transform_layout on an argument)")
    return new.with_attr("global_symbol", name).with_attr("tirx.is_scheduled", True)


def _schedule_tasks(mod: tvm.IRModule, tasks: list[Task], schedules: Mapping[str, TaskSchedule] | None,
                    target: Target | None = None) -> tuple[tvm.IRModule, list[TaskOutcome]]:
    """Each task's schedule applied to every PrimFunc it stands for (``task.funcs``); a record whose
    instructions ``target`` lacks (:func:`explorer.schedule.isa_check.isa_refusal`: LLVM would abort
    the process) falls back to the default, saying why."""
    from explorer.schedule.isa_check import isa_refusal

    share = shares(tasks)
    mod = tvm.IRModule(dict(mod.functions), attrs=mod.attrs, global_infos=mod.global_infos)  # never edit the caller's
    outcomes = []
    for task in tasks:
        chosen = pick(schedules, task)
        if task.hand_written:  # written by schedx for the target; a record of it would not apply
            outcomes.append(TaskOutcome(task, "written", share=share[task.name]))
            continue
        if chosen is None:
            outcomes.append(TaskOutcome(task, "default", share=share[task.name]))
            continue
        try:  # all of the task's functions get the schedule, or none does
            scheduled = {f: apply_schedule(mod[mod.get_global_var(f)], chosen, f) for f in task.funcs}
            why = next((w for w in (isa_refusal(tvm.IRModule({"main": f}), target) for f in scheduled.values())
                        if w), "") if target is not None else ""
        except Exception as err:  # noqa: BLE001 - a record that does not apply falls back to the default
            reraise_interrupt(err)  # not Ctrl-C, which TVM turns into a bare RuntimeError
            msg = str(err) if isinstance(err, ExportError) else short_tvm_message(err, 300)
            outcomes.append(TaskOutcome(task, "failed", chosen.record_id, share[task.name], msg))
            continue
        if why:
            outcomes.append(TaskOutcome(task, "failed", chosen.record_id, share[task.name], why))
            continue
        for func_name, func in scheduled.items():
            mod[mod.get_global_var(func_name)] = func
        outcomes.append(TaskOutcome(task, "record", chosen.record_id, share[task.name]))
    return mod, outcomes


@dataclass
class Prepared:
    """A workload's module ready for code generation: scheduled, weights packed where a schedule
    reads them packed, constants lifted into parameters."""

    mod: tvm.IRModule
    params: list[ParamSpec]
    values: list[np.ndarray]
    outcomes: list[TaskOutcome]
    packed: int  # weights packed at build time
    notes: list[str] = field(default_factory=list)  # default schedules that needed a fallback
    precision: object = None  # explorer.precision.Precision
    workload: Workload | None = None  # as built: at its precision (a bf16 build's untiled convolutions in fp32)
    schedules: Mapping[str, TaskSchedule] | None = None  # as given, or by workload key where the workload changed


def prepare(workload: Workload, target: Target, schedules: Mapping[str, TaskSchedule] | None = None,
            seconds: dict[str, float] | None = None, say: Progress | None = None,
            safe: frozenset[str] = frozenset(), precision: str = "fp32") -> Prepared:
    """Everything :func:`build` does before code generation (``seconds``: filled with the time
    each stage took; ``safe``: functions whose schedule did not compile, built with the target's
    simplest rule and no record; ``precision``: :mod:`explorer.precision`; a workload already built
    at it, :func:`as_built`'s, is taken as it is). A bf16 build whose convolution kernels the default
    schedule could not tile is prepared again with those convolutions in fp32
    (:func:`explorer.precision.with_convs_fp32`): the ``workload`` it returns says which."""
    say = say or (lambda stage, frac: None)
    seconds = {} if seconds is None else seconds
    start = time.perf_counter()
    workload, chosen_precision = as_built(workload, target, precision)
    say("fusing", 0.05)
    mod = workload.fused_module()
    tasks = workload_tasks(workload)
    seconds["fuse"] = time.perf_counter() - start

    start = time.perf_counter()
    say("applying schedules", 0.2)
    if safe and schedules:  # a record whose kernel did not compile is left out
        schedules = {k: v for k, v in schedules.items()
                     if not any(t.name == k or t.key == k for t in tasks if safe.intersection(t.funcs))}
    mod, outcomes = _schedule_tasks(mod, tasks, schedules, target)
    # a kernel whose default rule fell back is named by its task, with the command that searches it
    mod, notes, untiled = target.apply_default_schedules(
        mod, target.tvm(), safe, task_names={f: task.name for task in tasks for f in task.funcs},
        tune_commands=tune_commands(workload, target, tasks))
    seconds["schedule"] = time.perf_counter() - start
    mark = time.perf_counter()
    again = _untiled_convs(workload, target, mod, untiled, {f: t.name for t in tasks for f in t.funcs})
    if again is not None:  # plain loops over bf16 bits: those convolutions in fp32, prepared again (the
        # records by key: the kernels are numbered anew; the first try's time kept apart)
        seconds["bf16_retry"] = seconds.get("bf16_retry", 0.0) + seconds["fuse"] + seconds["schedule"] + \
            time.perf_counter() - mark
        return prepare(again, target, by_key(schedules, outcomes), seconds, say, safe, precision)

    start = time.perf_counter()
    say("packing weights", 0.3)
    params, values, packed = [], [], 0
    if workload.kind == "model":  # a kernel's weights are its caller's inputs: packed on every call
        folded = fold_weight_layouts(mod)
        mod, params, values = lift_constants(folded.mod, workload.onnx_model, folded.packed_from)
        packed = folded.calls
    seconds["weights"] = time.perf_counter() - start
    return Prepared(mod, params, values, outcomes, packed, notes, chosen_precision, workload, schedules)


def _untiled_convs(workload: Workload, target: Target, fused: tvm.IRModule, untiled: Mapping[str, str],
                   task_names: Mapping[str, str]) -> Workload | None:
    """``workload`` built again with the bf16 convolutions of the ``untiled`` kernels of ``fused``
    (function name -> why) in fp32 (:mod:`explorer.passes.bf16_conv_retry`), or None where no such
    kernel computes one it has not kept fp32 already."""
    from explorer.passes.bf16_conv_retry import convs_of_kernels
    from explorer.precision import with_convs_fp32

    done = workload.precision
    if done is None or done.name != "bf16" or not untiled:
        return None
    per_kernel = convs_of_kernels(fused, untiled, done.packed_from)
    ordinals = frozenset().union(*per_kernel.values()) - set(done.convs_fp32)
    if not ordinals:
        return None
    by_reason: dict[str, list[str]] = {}  # one reason, the kernels it stopped (the first few named)
    for name in per_kernel:
        by_reason.setdefault(untiled[name], []).append(task_names.get(name, name))
    why = "; ".join(f"{', '.join(names[:3])}{f' and {len(names) - 3} more' if len(names) > 3 else ''} ({reason})"
                    for reason, names in by_reason.items())
    return with_convs_fp32(workload, target, ordinals, why)[0]


def model_params(workload: Workload, target: Target | None = None,
                 schedules: Mapping[str, TaskSchedule] | None = None) -> tuple[list[ParamSpec], list[np.ndarray]]:
    """The parameters a bundle of ``workload`` takes, without generating code: for new weights of
    an exported model (same graph, other values), see :func:`export.bundle.replace_params`. Give
    the target and schedules of the export: weights are stored in the layout its kernels read."""
    if workload.kind != "model":
        return [], []
    from explorer.target import host_target

    prepared = prepare(workload, target or host_target(), schedules)
    return prepared.params, prepared.values


def build(workload: Workload, target: Target, schedules: Mapping[str, TaskSchedule] | None = None, *,
          progress: Progress | None = None, precision: str = "fp32") -> Built:
    """Build ``workload`` for ``target`` with ``schedules`` (by task name or workload key), at
    ``precision`` (fp32, bf16, int8: :mod:`explorer.precision`; made once here, or given made by
    :func:`as_built`)."""
    say = progress or (lambda stage, frac: None)
    seconds: dict[str, float] = {}
    workload = as_built(workload, target, precision)[0]  # once: a rebuild of failing kernels reuses it
    prepared = prepare(workload, target, schedules, seconds, say, precision=precision)
    workload, schedules = prepared.workload, prepared.schedules  # (its untiled bf16 convolutions in fp32)
    mod, params, values, outcomes = prepared.mod, prepared.params, prepared.values, prepared.outcomes
    tvm_target = target.tvm()

    start = time.perf_counter()
    say("generating code", 0.35)
    rescued: list[str] = []
    try:
        lowered, executable = _codegen(mod, target, tvm_target)
    except Exception as err:
        reraise_interrupt(err)
        failing = _kernels_that_do_not_compile(mod, tvm_target) if target.rescues_kernels else {}
        if not failing:
            raise ExportError(f"TVM could not build {workload.name} for {target.label}: {short_tvm_message(err)}") \
                from err
        say("building again the kernels that did not compile", 0.4)
        prepared = prepare(workload, target, schedules, seconds, say, safe=frozenset(failing), precision=precision)
        mod, params, values, outcomes = prepared.mod, prepared.params, prepared.values, prepared.outcomes
        workload = prepared.workload
        try:
            lowered, executable = _codegen(mod, target, tvm_target)
        except Exception as again:
            raise ExportError(f"TVM could not build {workload.name} for {target.label}: "
                              f"{short_tvm_message(again)}") from again
        rescued = [f"kernel {name} did not compile with its schedule ({why}); it was built with the simplest "
                   f"rule instead (slower): please report it" for name, why in failing.items()]
    seconds["codegen"] = time.perf_counter() - start

    warnings = [f"record {o.record_id} for {o.task.name} did not apply ({o.error}); the default schedule is used"
                for o in outcomes if o.schedule == "failed"]
    cover = coverage_warning(outcomes, target.default_schedule)
    if cover:
        warnings.append(cover)
    warnings.extend(prepared.notes)
    untiled = prepared.precision.untiled_line if prepared.precision is not None else ""  # convolutions in fp32 after all
    warnings.extend([untiled] if untiled else [])
    warnings.extend(rescued)
    warnings.extend(target.notes)
    return Built(workload=workload, target=target, executable=executable, lowered=lowered, params=params,
                 param_values=values, outcomes=outcomes, warnings=warnings, seconds=seconds,
                 precision=prepared.precision, fallbacks=list(prepared.notes))


def _codegen(mod: tvm.IRModule, target: Target, tvm_target) -> tuple[tvm.IRModule, object]:
    with tvm_target:
        lowered = tvm.transform.Sequential(target.lowering_passes(tvm_target))(mod)
    return lowered, relax.build(lowered, target=tvm_target, relax_pipeline=None)


def _kernels_that_do_not_compile(mod: tvm.IRModule, tvm_target) -> dict[str, str]:
    """The PrimFuncs of ``mod`` that TVM cannot compile on their own, with why (one line each):
    the kernels a schedule made unbuildable, when a whole module failed."""
    failing = {}
    for gv, func in mod.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            try:
                tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target=tvm_target)
            except Exception as err:  # noqa: BLE001 - each one's reason goes into the warning
                failing[gv.name_hint] = short_tvm_message(err, 160)
    return failing


__all__ = ["Built", "Prepared", "apply_schedule", "as_built", "build", "model_params", "prepare", "workload_tasks"]
