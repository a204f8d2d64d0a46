"""The rounds before the search: each task's default schedule (what an export uses for a task
without a record, see :mod:`explorer.schedule.defaults`) built, verified and timed as a candidate,
and recorded with source ``default``; then the default rules' own design space
(:mod:`explorer.schedule.defaults.variants`: the next register tiles, rows not fused, no tail
tile), the heaviest tasks first, recorded as search candidates whose ``environment`` names the
variant. Records the search finds must then beat the default in the same conditions to be the
ones an export applies: a short search on a loaded machine no longer ships a schedule slower
than the default; and the variants give the search the points MetaSchedule's sketches lack
(weights packed in panels, tails of rows), as measured candidates that also seed its population.
"""

from __future__ import annotations

from explorer.target import Target
from explorer.workload import Task, tag_task
from search.callbacks import EARLY_TIMING, SearchState, account, write_batch
from search.ledger import CandidateLedger
from store.outcome import Outcome


def _candidate(task: Task, trace):
    """A schedule's trace (plain JSON) replayed on the task as a MetaSchedule candidate, or None
    when it does not replay."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from explorer.schedule.steps import ScheduleError
    from explorer.schedule.trace import replay

    try:
        sch = replay(tag_task(task.mod, task.key), trace)
    except ScheduleError:  # a schedule that does not replay is simply not measured
        return None
    return ms.MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))


def default_candidate(task: Task, target: Target):
    """The task's default schedule as a MetaSchedule candidate (None when the default rules left
    the kernel unchanged or their schedule has no replayable trace)."""
    from explorer.schedule.defaults import default_schedule

    _, choice = default_schedule(task.mod["main"], target.cpu_spec())
    if choice.rule == "none" or choice.trace is None:
        return None
    return _candidate(task, choice.trace)


def variant_candidates(task: Task, target: Target, limit: int) -> list[tuple[dict, object]]:
    """Up to ``limit`` variants of the task's default schedule as candidates, each with what the
    record says of it (``{"default_variant": label}``)."""
    from explorer.schedule.defaults.variants import default_variants

    found = []
    for variant in default_variants(task.mod["main"], target.cpu_spec(), limit):
        cand = _candidate(task, variant.trace)
        if cand is not None:
            found.append(({"default_variant": variant.variant.label}, cand))
    return found


def _measure(found: list[tuple[int, dict, object]], tasks: list[Task], tvm_target, state: SearchState,
             ledger: CandidateLedger, builder, runner, source: str) -> dict[int, float]:
    """Build, run and record ``found`` (task index, what the record adds to the environment,
    candidate) as one batch; the median seconds of each task's fastest verified candidate."""
    from tvm.s_tir import meta_schedule as ms

    if not found or state.stop.should_stop():
        return {}
    built = builder.build([ms.builder.BuilderInput(c.sch.mod, tvm_target) for *_, c in found])
    runnable = [(k, r) for k, r in enumerate(built) if r.error_msg is None]
    futures = runner.run([ms.runner.RunnerInput(r.artifact_path, "cpu", found[k][2].args_info) for k, r in runnable])
    for future in futures:
        future.result()  # the ledger holds the outcome; the record is written from it
    every, times = list(range(len(tasks))), {}
    for i, extra, cand in found:  # one candidate at a time (each its own environment), claims kept till the last
        write_batch(state, ledger, None, [], every, i, [cand], source=source, environment=extra, release=False)
        if state.last is not None:
            for rec in state.last.records:  # (a run cut short after one timing says little)
                if rec.median_s and rec.verified is not False and rec.status == Outcome.OK and \
                        rec.environment.get("timing") != EARLY_TIMING:
                    times[i] = min(times.get(i, rec.median_s), rec.median_s)
            account(state, state.last)
            state.last = None
    if state.claims is not None:  # every candidate of the batch has its record now
        state.claims.release()
    return times


def measure_defaults(tasks: list[Task], target: Target, tvm_target, state: SearchState, ledger: CandidateLedger,
                     builder, runner) -> dict[int, float]:
    """Build and run every task's default schedule (``builder``/``runner``: the search's ledger
    builder and runner); write them as records with source ``default``. Returns the default's
    median seconds per task index (the tasks it timed)."""
    found = [(i, {}, c) for i, c in ((i, default_candidate(t, target)) for i, t in enumerate(tasks)) if c is not None]
    times = _measure(found, tasks, tvm_target, state, ledger, builder, runner, "default")
    for i, *_ in found:  # measured before (a resumed search): the store's time
        if i not in times:
            known = state.store.schedules(workload=tasks[i].key, target=state.target_key, hardware=state.hardware,
                                          source="default", limit=1)
            if known and known[0].median_s:
                times[i] = known[0].median_s
    return times


def measure_variants(tasks: list[Task], target: Target, tvm_target, state: SearchState, ledger: CandidateLedger,
                     builder, runner, *, per_task: int, budget: int, default_s: dict[int, float]) -> int:
    """Measure up to ``per_task`` variants of each task's default schedule, ``budget`` in all,
    the tasks in order of their default's time in the model (seconds x calls; untimed tasks last),
    one batch per task so that a stop ends the round between tasks. Returns how many were measured."""
    order = sorted(range(len(tasks)), key=lambda i: -default_s.get(i, 0.0) * tasks[i].weight)
    before = state.summary.trials
    for i in order:
        left = budget - (state.summary.trials - before)
        if left <= 0 or state.stop.should_stop():
            break
        found = [(i, extra, c) for extra, c in variant_candidates(tasks[i], target, min(per_task, left))]
        _measure(found, tasks, tvm_target, state, ledger, builder, runner, "search")
    return state.summary.trials - before


__all__ = ["default_candidate", "measure_defaults", "measure_variants", "variant_candidates"]
