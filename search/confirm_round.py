"""The round after the search: each task's best schedules timed again, in turns with each other
and with the task's default schedule, and written as new records; an export ranks each schedule
by its newest record and takes confirmed ones first (:func:`export.choose.task_choices`), so this
round decides what ships.

Why: during the search a candidate is timed once (one run of about 40 ms), while the search
builds and evolves the next batch on the same cores. The best of hundreds of such timings is
the luckiest as much as the fastest (the winner's curse), and on two cores a build stalls one
of a 2-thread kernel's threads. Measured on ResNet-18 (6 minutes of search, AVX2, 2 cores): 9
tasks had a search record faster than the default; timed again in turns on a quiet machine,
6 of them were slower than the default (1.05x to 1.54x).

Timed cold: a model's kernel finds its weights out of the cache (the kernels between two calls
read other weights), and a schedule that reads a large weight in its original layout wins warm
and loses cold: ResNet-18's 7x7x512 conv, a search record 3.75 ms warm and 6.00 ms cold, its
default (weights packed in panels) 4.63 and 4.57 ms; in the model, with that record, 8.4 ms.
So the runner flushes every argument but the input before each run
(:data:`search.runner.COLD_EVALUATOR`, TVM's ``cache_flush_cpu_non_first_arg``).

Per task, one pass: the ``contenders`` fastest schedules (each at its newest time), the schedule
a confirmation chose before (if any) and the default schedule are rebuilt, then timed ``rounds``
times in turns (A B C D, A B C D, ...), each run checked against the task's reference as in the
search. Each gets a new record holding one time per round (their median ranks it) and
``environment["confirmation"]``; a schedule that failed a round (a wrong result, a crash) gets a
record of that failure instead, and no longer ranks (a round lost to the infrastructure or a
time-out is only left out). When the search timed other schedules faster than it timed the
winner (the winner was the default, say), the next three of them get a pass, up to ``passes``. A later search's single timings never beat a confirmed schedule; a later search that
ends normally confirms again, its new bests against the one chosen before.

The heaviest tasks (time in the model by their best record) are confirmed first; the round ends
between tasks at the search's deadline (``--minutes``) or at any signal.
"""

from __future__ import annotations

import statistics
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass

from explorer.workload import Task, tag_task
from search.callbacks import SearchState, account_confirmation, remove_artifact
from search.ledger import CandidateLedger, LedgerBuilder, LedgerRunner
from search.records import candidate_record
from search.runner import COLD_TIMING
from search.stopping import worth_starting
from store import Record
from store.outcome import Outcome

CONTENDERS = 3  # the fastest schedules re-timed per pass (the default and the previous choice besides)
PASSES = 3  # passes of one task, while the search timed untried schedules faster than the winner


@dataclass(frozen=True)
class Confirmation:
    """One task's confirmation: the record ranked first by the search's timings before it, and
    the one an export applies after it, with their times; ``overturned`` when they are different
    schedules."""

    task: str
    before_id: int
    before_source: str
    before_s: float
    after_id: int
    after_source: str
    after_s: float
    overturned: bool
    timed: int  # records written: schedules re-timed
    default_s: float | None = None  # the default schedule's time in the same round (None: not timed there)
    calls: int = 1  # times the model calls the task's kernel per run
    after_origin: str = ""  # where the chosen schedule came from, in words (a sketch, a default variant, ...)

    @property
    def gain_s(self) -> float | None:
        """Seconds per model run the chosen schedule saves against the default (0 when the default
        was chosen; None when the default was not timed in the round)."""
        if self.default_s is None:
            return None
        return max(0.0, self.default_s - self.after_s) * self.calls

    def to_dict(self) -> dict:
        return asdict(self) | {"gain_s": self.gain_s}


def _schedules(state: SearchState, task: Task, limit: int, **filters) -> list[Record]:
    """The task's schedules with a trace, each at its newest time, fastest first."""
    found = state.store.schedules(workload=task.key, target=state.target_key, hardware=state.hardware, limit=limit,
                                  **filters)
    return [r for r in found if r.trace is not None]


# what a record's environment says of its schedule (not of the measurement): a re-timing keeps it
KEPT_ENVIRONMENT = ("default_variant",)


def _confirmed(r: Record) -> bool:
    return "confirmation" in (r.environment or {})


def _schedule(r: Record) -> str:
    return r.candidate or f"record {r.id}"


def _ended(state: SearchState, deadline: float | None) -> bool:
    """A signal (even after the time budget stopped the search), an urgent stop, a failure (a
    progress report that could not be made), or the deadline."""
    return state.stop.hard or state.stop.signals > 0 or state.failure is not None \
        or (deadline is not None and time.monotonic() >= deadline)


def confirm_task(index: int, state: SearchState, tvm_target, builder, runner, *, rounds: int,
                 contenders: int = CONTENDERS, passes: int = PASSES,
                 deadline: float | None = None) -> Confirmation | None:
    """Confirm task ``index`` (``builder``/``runner``: the search's own, not the ledger's); None
    when it has fewer than two schedules to compare or its first is a confirmed time already."""
    task = state.tasks[index]
    ranked = _schedules(state, task, contenders * 4)
    if len(ranked) < 2 or _confirmed(ranked[0]):
        return None
    before, timed, tried = ranked[0], 0, set()
    warm: dict[str, float] = {}  # schedule -> its time in the search (single, warm), to compare like with like
    chosen = next(iter(_schedules(state, task, 1, confirmed_first=True)), None)  # the choice so far
    now: dict[str, float] = {}  # schedule -> its median in this round (the records it wrote)
    default_key = None
    for _ in range(passes):
        picked = [r for r in ranked if _schedule(r) not in tried and not _confirmed(r)][:contenders]
        if not picked:
            break
        default = next(iter(_schedules(state, task, 1, source="default")), None)
        if default is not None:
            default_key = _schedule(default)
        for extra in (chosen, default):
            if extra is not None and _schedule(extra) not in {_schedule(r) for r in picked}:
                picked.append(extra)
        for r in picked:
            warm.setdefault(_schedule(r), r.median_s)
        tried |= {_schedule(r) for r in picked}
        written = _retime(index, picked, state, tvm_target, builder, runner, rounds)
        timed += len(written)
        now.update({k: v for k, v in written.items() if v is not None})
        chosen = next(iter(_schedules(state, task, 1, confirmed_first=True)), None)
        if _ended(state, deadline):
            break
        # another pass only for schedules the search timed faster than it timed the winner: the
        # confirmation's cold times are no measure for the search's warm ones
        bar = warm.get(_schedule(chosen)) if chosen is not None else None
        ranked = [r for r in _schedules(state, task, contenders * 4) if bar is not None and r.median_s < bar]
    after = chosen or before  # what an export applies
    return Confirmation(task.name, before.id, before.source, before.median_s, after.id, after.source, after.median_s,
                        overturned=_schedule(before) != _schedule(after), timed=timed,
                        default_s=now.get(default_key) if default_key is not None else None,
                        calls=max(1, int(task.weight)), after_origin=origin(after))


def origin(r: Record) -> str:
    """Where a schedule came from, in words: ``default``, ``default rules, tile ranked 2`` (a
    variant of the default), ``MetaSchedule sketch`` (the evolutionary search), or its source."""
    env = r.environment or {}
    if r.source == "search":
        return env.get("default_variant") or "MetaSchedule sketch"
    return r.source


def _retime(index: int, picked: list[Record], state: SearchState, tvm_target, builder, runner,
            rounds: int) -> dict[str, float]:
    """Rebuild ``picked``, time them ``rounds`` times in turns, write one record each; the median
    of each schedule that ran every time it was asked (by :func:`_schedule`), one per record written."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from explorer.schedule.steps import ScheduleError
    from explorer.schedule.trace import replay

    task = state.tasks[index]
    ledger = CandidateLedger({task.key: index})  # knows nothing: every contender is built and run
    work = getattr(runner, "work_dir", None) or getattr(builder, "work_dir", None) or "."
    schedules = []
    for r in picked:
        try:
            sch = replay(tag_task(task.mod, task.key), r.trace)
        except ScheduleError:  # a record whose trace no longer replays is not re-timed
            continue
        schedules.append((r, sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True)))
    if len(schedules) < 2:
        return {}
    built = LedgerBuilder(builder, ledger, work).build(
        [ms.builder.BuilderInput(sch.mod, tvm_target) for _, sch, _ in schedules])
    ready = [(s, b) for s, b in zip(schedules, built) if b.error_msg is None and b.artifact_path]
    try:
        outcomes = _time_in_turns(ready, ledger, runner, work, rounds, state)
    finally:
        for _, b in ready:
            remove_artifact(b.artifact_path)
    records, written = [], {}
    for (r, sch, args), _ in ready:
        c, times, failure = outcomes.get(r.id, (None, [], None))
        if c is None or (failure is None and not times):  # every round lost: nothing to say
            continue
        if failure is not None:  # the failure stands: the schedule no longer ranks at its older time
            (c.status, c.error, c.verified, c.max_error), c.secs = failure, ()
        else:
            c.status, c.secs, c.early = Outcome.OK, tuple(times), False
        kept = {k: v for k, v in (r.environment or {}).items() if k in KEPT_ENVIRONMENT}  # what it is stays said
        environment = {**state.environment, **kept, "confirmation": {"rounds": len(times), "contenders": len(ready),
                                                             "retimes": r.id, "timing": COLD_TIMING}}
        records.append(candidate_record(task, c, sch, args, predicted=None, target_key=state.target_key,
                                        hardware=state.hardware, environment=environment, job_id=state.job_id,
                                        source=r.source))
        written[_schedule(r)] = records[-1].median_s  # None: it failed this round
    if records:
        state.store.add_records(records)
    return written


def _time_in_turns(ready: list, ledger: CandidateLedger, runner, work: str, rounds: int, state: SearchState) -> dict:
    """Run every built contender once per round, in turns: record id -> (candidate, the median of
    each round's runs, its first failure (status, error, verified, max_error) or None). A round
    lost to the infrastructure or a time-out is left out, not held against the schedule."""
    from tvm.s_tir import meta_schedule as ms

    out: dict = {}
    with runner.confirming() if hasattr(runner, "confirming") else nullcontext():  # cold, unclaimed
        ledger_runner = LedgerRunner(runner, ledger, work)
        for _ in range(rounds):
            if state.stop.hard:  # a second Ctrl-C: what was timed so far is written
                break
            for (r, _, args), b in ready:
                ledger_runner.run([ms.runner.RunnerInput(b.artifact_path, "cpu", args)])[0].result()
                c = ledger.by_artifact(str(b.artifact_path))
                if c is None:
                    continue
                _, times, failure = out.get(r.id, (c, [], None))
                if c.status == Outcome.OK and c.secs:
                    times.append(statistics.median(c.secs))
                elif c.status not in (Outcome.INFRA_ERROR, Outcome.TIMEOUT) and failure is None:  # its own fault
                    failure = (c.status, c.error, c.verified, c.max_error)
                out[r.id] = (c, times, failure)
    return out


def _share(state: SearchState, task: Task) -> float:
    """The task's time in the model by its best record so far (calls times seconds; 0: none)."""
    best = next(iter(state.store.schedules(workload=task.key, target=state.target_key, hardware=state.hardware,
                                           limit=1)), None)
    return (best.median_s or 0.0) * max(1, task.weight) if best is not None else 0.0


def confirm_bests(state: SearchState, tvm_target, builder, runner, *, rounds: int, contenders: int = CONTENDERS,
                  deadline: float | None = None) -> tuple[list[Confirmation], dict[str, str]]:
    """Confirm every task of the search (see the module docstring): the confirmations, and per
    task a confirmation could not be made for, why (the search's records stand for it)."""
    out, problems = [], {}
    order = sorted(range(len(state.tasks)), key=lambda i: -_share(state, state.tasks[i]))  # the heaviest first
    last_s = 0.0  # how long the last task's confirmation took: one starts only when it ends nearer the deadline
    for n, i in enumerate(order):
        task = state.tasks[i]
        began = time.monotonic()
        if not _ended(state, deadline):
            _progress(state, task, n, len(order))
        if _ended(state, deadline) or not worth_starting(last_s, deadline):
            problems.update({state.tasks[j].name: "the time budget was spent or the search was stopped"
                             for j in order[n:]})
            break
        try:
            done = confirm_task(i, state, tvm_target, builder, runner, rounds=rounds, contenders=contenders,
                                deadline=deadline)
        except Exception as err:  # noqa: BLE001 - a finished search is not failed by a task's confirmation
            # (its records stand); a progress report that fails does fail it, as in the search (_progress)
            problems[task.name] = f"{type(err).__name__}: {str(err)[:300]}"
            continue
        if done is not None:
            out.append(done)
        last_s = time.monotonic() - began
    else:  # every task had its turn
        if order:
            _progress(state, state.tasks[order[-1]], len(order), len(order))
    return out, problems


def _progress(state: SearchState, task: Task, done: int, total: int) -> None:
    """Report the round's progress; a report that fails (the store, the caller's ``on_batch``)
    stops the search as a failed batch report would (:meth:`SearchState.fail`)."""
    if state.summary is None:  # no search to report on (a round run on its own)
        return
    try:
        account_confirmation(state, task, done, total)
    except Exception as err:  # noqa: BLE001 - raised by tune() once the round has ended
        state.fail(err)


__all__ = ["CONTENDERS", "Confirmation", "confirm_bests", "confirm_task"]
