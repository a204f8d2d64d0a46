"""The search's two measure callbacks, as MetaSchedule splits its own: :class:`WriteRecords` turns
each measured batch into records in one store transaction (before the cost model learns it), and
:class:`ReportProgress` accounts for the batch (trials, bests, failures by outcome, ETA) in the
job row and for the caller's ``on_batch``. :class:`SearchState` is the book-keeping they share.

Both run inside MetaSchedule's C++ loop, where an exception loses its type (it comes back as a
bare ``RuntimeError``) and unwinds C++ half-way through a batch. So neither raises: a failure
(a batch the store cannot write: disk full, a database gone read-only; an ``on_batch`` that
raised) is kept in ``state.failure`` and stops the search at this batch boundary (see
:mod:`search.stopping`); the batch's transaction was rolled back, nothing of it is remembered,
and :func:`search.tune.tune` raises the failure once MetaSchedule has returned."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from explorer.workload import Task
from search.job_spec import JobProgress, estimate_eta_s
from search.ledger import CandidateLedger
from search.records import candidate_record
from search.runner import REJECT_FACTOR
from search.stopping import FAILED, StopRequest
from store import Record, Store
from store.outcome import Outcome
from store.values import DictValue

EARLY_TIMING = f"one run: over {REJECT_FACTOR:g}x slower than the best so far, not timed further"


@dataclass(frozen=True)
class BatchReport(DictValue):
    """What one measured batch changed: for progress bars, job rows and the UI."""

    task: str
    batch: int
    measured: int
    cached: int
    failed: int
    task_trials: int
    trials: int
    best_gflops: float | None
    task_best_gflops: float | None
    elapsed_s: float
    eta_s: float | None
    phase: str = "search"  # or "confirm": the round after the search (search.confirm_round)
    confirm_done: int = 0  # tasks the confirmation round has finished, of confirm_total
    confirm_total: int = 0


@dataclass
class _Batch:
    """What :class:`WriteRecords` hands to :class:`ReportProgress` for the batch just written."""

    task: int
    records: list[Record]
    cached: int  # answered by the store or by another search's claim: no new record
    size: int
    elsewhere: int = 0  # of ``cached``: claimed by another search on this database (space not used up)


@dataclass
class SearchState:
    """Book-keeping of one search: tasks, where records go, trials and bests so far."""

    store: Store
    tasks: list[Task]
    target_key: str
    hardware: str
    job_id: int | None
    total_trials: int
    environment: dict
    on_batch: Callable[[BatchReport], None] | None = None
    start: float = field(default_factory=time.perf_counter)
    summary: object = None  # search.tune.TuneSummary
    batches: int = 0
    task_trials: dict = field(default_factory=dict)
    saturated: set = field(default_factory=set)  # tasks whose last batch held nothing new
    last: _Batch | None = None
    stop: StopRequest = field(default_factory=StopRequest)
    failure: BaseException | None = None  # why the search stopped early, raised once MetaSchedule returns
    claims: object = None  # search.claims.ClaimBook: candidates another search measures are not recorded here
    deadline: float | None = None  # time.monotonic() at which the time budget (--minutes) is spent; None: none

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def time_left(self) -> float | None:
        """Seconds left of the time budget (None without one)."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    def fail(self, err: BaseException) -> None:
        """Keep the first failure and stop the search at this batch boundary."""
        if self.failure is None:
            self.failure = err
        self.stop.request(FAILED)


def remove_artifact(path) -> None:
    """What MetaSchedule's RemoveBuildArtifact does (its folder under the search's work folder)."""
    if path and os.path.dirname(str(path)) and os.path.isdir(os.path.dirname(str(path))):
        shutil.rmtree(os.path.dirname(str(path)), ignore_errors=True)


def write_records(state: SearchState, ledger: CandidateLedger, cost_model, contexts: list, round_ids: list[int]):
    """The :class:`WriteRecords` callback for one round (``round_ids``: the round's task indices)."""

    @derived_object
    class WriteRecords(ms.measure_callback.PyMeasureCallback):
        """Writes each batch to the store in one transaction, before the cost model learns it."""

        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
            if state.failure is not None:  # the search is stopping: later batches are not written
                return
            try:
                write_batch(state, ledger, cost_model, contexts, round_ids, task_id, measure_candidates)
            except BaseException as err:  # noqa: BLE001 - never across C++ (see the module docstring)
                state.last = None
                state.fail(err)

    return WriteRecords()


def write_batch(state: SearchState, ledger: CandidateLedger, cost_model, contexts: list, round_ids: list[int],
                 task_id: int, measure_candidates, source: str = "search", environment: dict | None = None,
                 release: bool = True) -> None:
    """Write one batch's records (``environment``: what they say besides the search's own,
    e.g. which variant of the default a candidate is). ``release``: drop this search's claims
    afterwards (the records answer for them now); a caller writing one measured batch in several
    parts releases after the last (an early release frees candidates measured and not yet
    recorded: another search would measure them again)."""
    index = round_ids[task_id]  # task_id counts the tasks of this round
    task = state.tasks[index]
    try:
        predicted = [float(x) for x in cost_model.predict(contexts[task_id], measure_candidates)] \
            if cost_model else []
    except Exception:  # noqa: BLE001 - a cost model that cannot predict yet predicts nothing
        predicted = []
    records, cached, elsewhere = [], 0, 0
    for i, cand in enumerate(measure_candidates):
        c = ledger.settle(cand.sch.mod)
        # answered by the store, or measured by another search on this database
        claimed = c.cached is None and state.claims is not None and c.hash in state.claims.skipped
        if c.cached is not None or claimed:
            cached += 1
            elsewhere += claimed
            continue
        if c.artifact:
            remove_artifact(c.artifact)
        if state.stop.hard and c.status == Outcome.INFRA_ERROR:  # abandoned by an urgent stop: never measured
            continue
        records.append(candidate_record(
            task, c, cand.sch, cand.args_info, predicted=predicted[i] if i < len(predicted) else None,
            target_key=state.target_key, hardware=state.hardware,
            environment={**state.environment, **environment} if environment else state.environment,
            job_id=state.job_id, early_note=EARLY_TIMING, source=source))
    ids = state.store.add_records(records) if records else []  # one transaction: all or nothing
    if release and state.claims is not None:  # the records answer for this batch now
        state.claims.release()
    for rec, rid in zip(records, ids):
        if rec.status != Outcome.INFRA_ERROR:  # not the candidate's fault: tried again on resume
            ledger.remember(rec.candidate, str(rid), rec.latencies)
    state.last = _Batch(index, records, cached, len(measure_candidates), elsewhere)


def report_progress(state: SearchState):
    """The :class:`ReportProgress` callback: accounts for the batch :class:`WriteRecords` wrote."""

    @derived_object
    class ReportProgress(ms.measure_callback.PyMeasureCallback):
        """Trials, bests, failures by outcome and ETA, into the job row and ``on_batch``."""

        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
            batch, state.last = state.last, None
            if batch is not None:
                try:
                    account(state, batch)
                except BaseException as err:  # noqa: BLE001 - never across C++ (see the module docstring)
                    state.fail(err)

    return ReportProgress()


def account(state: SearchState, batch: _Batch) -> None:
    task, s = state.tasks[batch.task], state.summary
    state.stop.batch_done()  # the time budget's pace (search.stopping.StopRequest.batch_starting)
    new = len(batch.records)  # measured here now (not answered by the store, not abandoned by a stop)
    # a batch the store answered whole: the space is used up (a reshape's single schedule); one
    # another search claimed is not (it drew the same seeded candidates): top-ups draw others
    if batch.size and batch.cached == batch.size and not batch.elsewhere:
        state.saturated.add(batch.task)
    else:
        state.saturated.discard(batch.task)
    now = state.elapsed()
    failed = [r for r in batch.records if r.status != Outcome.OK]
    if s.first_measured_s is None and batch.records:
        s.first_measured_s = now
    s.trials += new  # the budget counts new measurements: a candidate from the store is free
    s.measured += len(batch.records) - len(failed)
    s.cached += batch.cached
    s.failed += len(failed)
    for r in failed:
        s.failures[r.status] = s.failures.get(r.status, 0) + 1
        s.reasons.setdefault(r.status, r.error[:300])
    state.batches += 1
    state.task_trials[task.name] = state.task_trials.get(task.name, 0) + new
    good = [r.gflops for r in batch.records if r.status == Outcome.OK and r.gflops and r.verified is not False]
    if good:
        s.best[task.name] = max(good + ([s.best[task.name]] if task.name in s.best else []))
    eta = estimate_eta_s(elapsed_s=now, trials=s.trials, total_trials=state.total_trials,
                         time_left_s=state.time_left())
    report = BatchReport(task=task.name, batch=state.batches, measured=len(batch.records) - len(failed),
                         cached=batch.cached, failed=len(failed), task_trials=state.task_trials[task.name],
                         trials=s.trials, best_gflops=max(s.best.values()) if s.best else None,
                         task_best_gflops=s.best.get(task.name), elapsed_s=now, eta_s=eta)
    _publish(state, report)


def account_confirmation(state: SearchState, task: Task, done: int, total: int) -> None:
    """Progress of the confirmation round: ``done`` of ``total`` tasks timed again (``task`` the
    one it starts or finished), into the job row and ``on_batch``, like a search batch."""
    s = state.summary
    report = BatchReport(task=task.name, batch=state.batches, measured=0, cached=0, failed=0,
                         task_trials=state.task_trials.get(task.name, 0), trials=s.trials,
                         best_gflops=max(s.best.values()) if s.best else None, task_best_gflops=s.best.get(task.name),
                         elapsed_s=state.elapsed(), eta_s=None, phase="confirm", confirm_done=done,
                         confirm_total=total)
    _publish(state, report)


def _publish(state: SearchState, report: BatchReport) -> None:
    s = state.summary
    if state.job_id is not None:
        progress = JobProgress(
            trials=s.trials, total=state.total_trials, measured=s.measured, cached=s.cached, failed=s.failed,
            best_gflops=report.best_gflops, elapsed_s=report.elapsed_s, eta_s=report.eta_s,
            failures=dict(s.failures), reasons=dict(s.reasons), phase=report.phase,
            confirm_done=report.confirm_done, confirm_total=report.confirm_total,
            tasks={t.name: {"trials": state.task_trials.get(t.name, 0), "best_gflops": s.best.get(t.name),
                            "weight": t.weight, "flops": t.flops} for t in state.tasks})
        state.store.update_job(state.job_id, progress=progress.to_dict())
    if state.on_batch is not None:
        state.on_batch(report)


__all__ = ["BatchReport", "EARLY_TIMING", "SearchState", "account", "account_confirmation", "report_progress",
           "write_batch", "write_records"]
