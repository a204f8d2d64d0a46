"""The round before the search: each task's default schedule (what an export uses for a task
without a record, see :mod:`explorer.schedule.defaults`) built, verified and timed as a candidate,
and recorded with source ``default``. Records the search finds must then beat it in the same
conditions to be the ones an export applies: a short search on a loaded machine no longer ships
a schedule slower than the default.
"""

from __future__ import annotations

from explorer.target import Target
from explorer.workload import Task, tag_task
from search.callbacks import SearchState, account, write_batch
from search.ledger import CandidateLedger


def default_candidate(task: Task, target: Target):
    """The task's default schedule as a MetaSchedule candidate (None when the default rules left
    the kernel unchanged or their schedule has no replayable trace)."""
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from explorer.schedule.defaults import default_schedule

    _, choice = default_schedule(task.mod["main"], target.cpu_spec())
    if choice.rule == "none" or choice.trace is None:
        return None
    sch = s_tir.Schedule(tag_task(task.mod, task.key))
    try:
        s_tir.Trace.apply_json_to_schedule(choice.trace, sch)
    except Exception:  # noqa: BLE001 - a default that does not replay is simply not measured first
        return None
    return ms.MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))


def measure_defaults(tasks: list[Task], target: Target, tvm_target, state: SearchState, ledger: CandidateLedger,
                     builder, runner) -> int:
    """Build and run every task's default schedule (``builder``/``runner``: the search's ledger
    builder and runner); write them as records with source ``default``. Returns how many were new."""
    from tvm.s_tir import meta_schedule as ms

    found = [(i, c) for i, c in ((i, default_candidate(t, target)) for i, t in enumerate(tasks)) if c is not None]
    if not found or state.stop.should_stop():
        return 0
    built = builder.build([ms.builder.BuilderInput(c.sch.mod, tvm_target) for _, c in found])
    runnable = [(k, r) for k, r in enumerate(built) if r.error_msg is None]
    futures = runner.run([ms.runner.RunnerInput(r.artifact_path, "cpu", found[k][1].args_info) for k, r in runnable])
    for future in futures:
        future.result()  # the ledger holds the outcome; the record is written from it
    before = state.summary.trials
    every = list(range(len(tasks)))
    for i, cand in found:
        write_batch(state, ledger, None, [], every, i, [cand], source="default")
        if state.last is not None:
            account(state, state.last)
            state.last = None
    return state.summary.trials - before


__all__ = ["default_candidate", "measure_defaults"]
