"""Evolutionary search (MetaSchedule, Ansor's successor) on a kernel or a whole model, straight
into the store.

What schedx adds to ``ms.tune_tasks``:
- start-up in seconds: only the target's tensor intrinsics, no torch, one warm worker pool for
  building and measuring, started before anything else (see :mod:`search.pool`);
- every candidate measured locally is first checked against its task's reference (the
  unscheduled kernel): a wrong schedule is a ``verify_failed`` record and never ranks;
- every batch lands in the store as records in one transaction, with the cost model's
  prediction beside the measurement, failures included (error and steps), plus a job row;
- true resume: candidates the store already measured for this workload, target and hardware
  are neither built nor run again, and the cost model is trained on the stored records before
  the first batch;
- searches side by side: candidates are claimed in the database before they are measured, so two
  searches on one workload and database never measure the same one, and every timed run holds
  the machine's measuring lock (see :mod:`search.claims`, :mod:`explorer.measure.lock`);
- measurement on this machine or through a TVM RPC tracker;
- a clean stop (see :mod:`search.stopping`): Ctrl-C, SIGTERM or the time budget (``minutes``) end
  the search at the next batch boundary, with every finished batch in the store, and a batch
  the store cannot write (disk full, a read-only database) stops it with that batch rolled back
  and one error (:class:`search.errors.SearchError`), never a crash or a traceback from C++.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, replace

from explorer.target.environment import current_environment, hardware_fingerprint
from explorer.target import Target, host_target
from explorer.tvm_fast import light_tensor_intrin
from explorer.workload import Task, tag_task
from search import pool as warm_pool
from search.builder import FastBuilder
from search.callbacks import BatchReport, SearchState, report_progress, write_records
from search.claims import ClaimBook
from search.job_spec import ValidJob
from search.ledger import CandidateLedger, LedgerBuilder, LedgerRunner
from search.ms_database import StoreDatabase
from search.params import SearchParams
from search.records import task_workload
from search.runner import COLD_TIMING, PoolRunner
from search.stopping import StopRequest, signals_stop
from search.strategy import StoppableSearch
from search.work_dirs import work_dir
from store import Store
from store.outcome import Outcome


@dataclass
class TuneSummary:
    """What a search did: trials (new measurements), measured, answered from the store, failed
    (by outcome, with one reason each), bests per task, and tasks that could not be verified."""

    trials: int = 0
    measured: int = 0
    cached: int = 0
    failed: int = 0
    seconds: float = 0.0
    first_measured_s: float | None = None
    best: dict = field(default_factory=dict)  # task -> best GFLOPS
    unverified: dict = field(default_factory=dict)  # task -> why its candidates could not be checked
    failures: dict = field(default_factory=dict)  # outcome -> failed candidates
    reasons: dict = field(default_factory=dict)  # outcome -> one message of that kind
    stopped: str = ""  # why the search ended before its budget: interrupted, terminated, time budget
    confirmed: list = field(default_factory=list)  # per task re-timed: search.confirm_round.Confirmation dicts
    unconfirmed: dict = field(default_factory=dict)  # task -> why its confirmation was not made
    confirm_s: float = 0.0  # seconds the confirmation round took (part of the budget)
    startup_s: float = 0.0  # seconds from the command's start to the search's first step (part of the budget)

    @property
    def problem(self) -> str:
        """Why the search measured nothing ("" when some candidate was measured or answered)."""
        if self.measured or self.cached or not self.failed:
            return ""
        worst = max(self.failures, key=self.failures.get) if self.failures else Outcome.RUN_ERROR
        return (f"no candidate could be measured: {self.failed} failed, {self.failures.get(worst, 0)} of them "
                f"with {worst} ({self.reasons.get(worst, 'no message')})")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["problem"] = self.problem
        return d


@dataclass(frozen=True)
class SearchHooks:
    """How a caller follows and stops a search: ``on_batch`` gets each written batch's
    :class:`BatchReport`; ``stop`` is a :class:`search.stopping.StopRequest` the caller's own signal
    handlers set (None: the search handles SIGINT and SIGTERM itself while it runs in the main
    thread); ``job_id`` names the job row its progress and records go to (None: no job row)."""

    on_batch: Callable[[BatchReport], None] | None = None
    stop: StopRequest | None = None
    job_id: int | None = None


def tune(job: ValidJob, store: Store, params: SearchParams, hooks: SearchHooks | None = None, *,
         builder=None, runner=None) -> TuneSummary:
    """Search schedules for ``job``'s tasks (see the module docstring); returns what it did.

    ``job`` was checked once at the boundary (:meth:`search.job_spec.JobSpec.validate` or
    :meth:`ValidJob.of_tasks <search.job_spec.ValidJob.of_tasks>`); ``params`` are the search's knobs.
    ``builder``/``runner`` replace the real ones (tests use deterministic fakes: any MetaSchedule
    builder and runner); candidates the store already measured never reach them.

    The search ends at the first of: ``params.trials`` new measurements, ``params.minutes`` (0: no
    time limit) of wall time from the command's start (``hooks.stop``'s birth, else this call), with
    the confirmation round inside it, or a stop request (see :class:`SearchHooks`). ``summary.stopped``
    says which early end it was. A batch that cannot be written raises
    :class:`search.errors.SearchError` once the search has wound down (that batch rolled back)."""
    hooks = hooks or SearchHooks()
    stop = hooks.stop or StopRequest()
    with nullcontext() if hooks.stop is not None else signals_stop(stop):
        budget = _Budget.of(params, len(job.tasks), stop)
        space = _space_generator(job.target, params)  # refuses --microkernel on a target without one, before any work
        if runner is None:  # references run here, and local candidates too: refuse what cannot fit
            _require_memory(job.tasks)
        logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
        with _set_up(job, store, params, hooks, stop, builder, runner) as search:
            _search(search, params, space, budget)
        state = search.state
        state.summary.seconds = state.elapsed()
        if state.failure is not None:
            raise _failure(state) from state.failure
        state.summary.stopped = stop.reason if stop.should_stop() and state.summary.trials < params.trials else ""
        return state.summary


@dataclass(frozen=True)
class _Budget:
    """A time budget's end (``deadline``, ``time.monotonic()``; None: no time limit) and the
    seconds of it kept for the confirmation round; the search itself stops that much earlier."""

    deadline: float | None = None
    reserve: float = 0.0

    @classmethod
    def of(cls, params: SearchParams, n_tasks: int, stop: StopRequest) -> _Budget:
        if not params.minutes:
            return cls()
        reserve = _confirm_reserve_s(params.minutes, n_tasks, params)
        # wall time from the command's start (the StopRequest's birth), start-up included; the search
        # leaves the confirmation round its share
        stop.set_minutes(params.minutes - reserve / 60, since=stop.started)
        return cls(stop.started + params.minutes * 60, reserve)


@dataclass
class _Search:
    """What a search runs with, set up once: its book-keeping, the ledger, the builder and runner
    (the caller's or the warm pool's) and the ledger's builder and runner that wrap them."""

    tasks: list[Task]
    target: Target
    tgt: object  # tvm.target.Target
    hardware: str
    work_dir: str  # the search's scratch folder (MetaSchedule's work_dir)
    state: SearchState
    ledger: CandidateLedger
    builder: object
    runner: object
    ledger_builder: LedgerBuilder
    ledger_runner: LedgerRunner
    database: StoreDatabase


@contextmanager
def _set_up(job: ValidJob, store: Store, params: SearchParams, hooks: SearchHooks, stop: StopRequest, builder,
            runner) -> Iterator[_Search]:
    """The warm pool (taken first: its workers start while this process sets up), the workload
    rows, the search's state, the ledger, the builder and runner, the claims; all of it closed
    and released when the search ends, however it ends."""
    tasks, target, job_id = list(job.tasks), job.target, hooks.job_id
    own_pool = None
    if builder is None or runner is None:
        own_pool = warm_pool.take(params.builder_workers or None, target.intrinsics)
    with ExitStack() as cleanup:  # (closed in reverse: runner, claims, pool, scratch folder)
        work = cleanup.enter_context(work_dir())
        if own_pool is not None:
            cleanup.callback(own_pool.close)
            stop.on_hard.append(own_pool.abandon)  # a second Ctrl-C: the batch in flight ends at once
            cleanup.callback(stop.on_hard.remove, own_pool.abandon)
        light_tensor_intrin(target.intrinsics)
        hardware = hardware_fingerprint() if job.rpc is None else f"rpc:{job.rpc.key}"
        for t in tasks:
            store.add_workload(task_workload(t, source=job.source or "search", shapes=job.shapes), replace=False)
        state = _state(store, tasks, target, hardware, job_id, params.trials, hooks.on_batch)
        if params.cold_timing and runner is None:  # how the records were timed (our own runner's evaluator)
            state.environment["timing"] = COLD_TIMING
        state.stop = stop
        state.start = time.perf_counter() - (time.monotonic() - stop.started)  # elapsed: from the command's start
        ledger = CandidateLedger({t.key: i for i, t in enumerate(tasks)}, _known(store, tasks, target.key, hardware))
        if builder is None:
            builder = FastBuilder(own_pool, timeout_sec=params.timeout_s, work_dir=work)
        if runner is None:
            state.claims = ClaimBook(store, target_key=target.key, hardware=hardware,
                                     task_keys=[t.key for t in tasks], job_id=job_id)
            cleanup.callback(state.claims.release)
            runner = PoolRunner(own_pool, task_mods=[t.mod for t in tasks],
                                task_specs=[_arg_specs(t.mod) for t in tasks],
                                best_s=[_best_verified_s(store, t, target.key, hardware) for t in tasks],
                                work_dir=work, timeout_sec=params.timeout_s, rpc=job.rpc,
                                reference_target=host_target().config,  # references run here
                                claims=state.claims, cold=params.cold_timing,
                                holder={"what": ", ".join(t.name for t in tasks[:3]) +
                                        (" ..." if len(tasks) > 3 else ""), "job": job_id, "db": str(store.path)})
            cleanup.callback(runner.close)
            runner.prefetch(0)  # the first task's reference, while the first batch is searched for
        yield _Search(tasks, target, target.tvm(), hardware, work, state, ledger, builder, runner,
                      LedgerBuilder(builder, ledger, work), LedgerRunner(runner, ledger, work),
                      StoreDatabase(store, hardware=hardware, target_filter=target.key, source="search", job_id=job_id))


def _search(search: _Search, params: SearchParams, space, budget: _Budget) -> None:
    """The search proper: the cost model trained on what the store holds, the defaults round,
    the evolutionary rounds, then the confirmation round."""
    from tvm.s_tir import meta_schedule as ms

    tasks, state, stop = search.tasks, search.state, search.state.stop
    state.summary.startup_s = state.elapsed()  # TVM, the workload, the workers: from the command's start
    state.deadline = budget.deadline  # the ETA of a time budget is its rest
    cost_model = ms.cost_model.XGBModel(num_warmup_samples=0) if params.cost_model == "xgb" else \
        ms.cost_model.RandomModel()
    trained = _pretrain(cost_model, _contexts(tasks, search.tgt, params, space=space), tasks, state.store,
                        search.target.key, search.hardware, stop) if params.cost_model == "xgb" else 0
    if params.defaults_first:  # the baseline a record must beat: what an export would use without one
        from search.defaults_round import measure_defaults, measure_variants

        rounds = (tasks, search.target, search.tgt, state, search.ledger, search.ledger_builder, search.ledger_runner)
        default_s = measure_defaults(*rounds)
        if params.default_variants:  # the default rules' own design space, heaviest tasks first
            measure_variants(*rounds, per_task=params.default_variants, default_s=default_s,
                             budget=len(tasks) * params.default_variants if params.by_time else
                             max(0, params.trials - state.summary.trials) // 2)
    _run_rounds(tasks, search.tgt, params, state, search.ledger, cost_model,
                fresh=params.cost_model == "xgb" and not trained, space=space, work_dir=search.work_dir,
                builder=search.ledger_builder, runner=search.ledger_runner, database=search.database)
    if params.confirm_rounds and state.failure is None and not (stop.interrupted or stop.signals or stop.hard):
        from search.confirm_round import confirm_bests

        started, deadline = state.elapsed(), budget.deadline
        if deadline is not None:  # the search's last batch may end past its stop: the round keeps its share
            deadline = max(deadline, time.monotonic() + budget.reserve)
        confirmed, state.summary.unconfirmed = confirm_bests(state, search.tgt, search.builder, search.runner,
                                                             rounds=params.confirm_rounds, deadline=deadline)
        state.summary.confirmed = [c.to_dict() for c in confirmed]
        state.summary.confirm_s = state.elapsed() - started
    if isinstance(search.runner, PoolRunner):
        state.summary.unverified = {tasks[i].name: r.why_not for i, r in enumerate(search.runner.references)
                                    if r.done and r.path is None and not (r.infra and stop.interrupted)}


# Seconds of a time budget kept for the confirmation round, per task (a pass of 4 schedules, 3
# rounds, builds included: 3-5 s on 2 cores), and at most this share of the budget.
CONFIRM_S_PER_TASK = 5.0
CONFIRM_SHARE = 0.1


def _confirm_reserve_s(minutes: float, tasks: int, params: SearchParams) -> float:
    if not params.confirm_rounds:
        return 0.0
    return min(CONFIRM_SHARE * minutes * 60, CONFIRM_S_PER_TASK * tasks)


def _failure(state: SearchState) -> Exception:
    """The one error a search that could not go on raises: what failed, and what was kept."""
    from search.errors import SearchError
    from store import StoreError

    err, kept = state.failure, state.summary.trials
    why = str(err) or type(err).__name__
    if isinstance(err, StoreError):
        return SearchError(f"the search stopped: a batch could not be written ({why}); that batch was rolled "
                           f"back, the {kept} trials before it are in the database. Fix that and run the same "
                           f"search again to resume")
    return SearchError(f"the search stopped after {kept} trials: {type(err).__name__}: {why}")


def _state(store: Store, tasks: list[Task], target: Target, hardware: str, job_id, total: int, on_batch) -> SearchState:
    env = current_environment(target.key).to_dict() if hardware == hardware_fingerprint() else {"hardware": hardware}
    state = SearchState(store=store, tasks=tasks, target_key=target.key, hardware=hardware, job_id=job_id,
                        total_trials=total, environment=env, on_batch=on_batch, summary=TuneSummary())
    for t in tasks:
        best = store.best(workload=t.key, target=target.key, hardware=hardware)
        if best and best[0].gflops:
            state.summary.best[t.name] = best[0].gflops
        state.task_trials[t.name] = store.count(workload=t.key, target=target.key, hardware=hardware)
    return state


def _known(store: Store, tasks: list[Task], target_key: str, hardware: str) -> dict[str, tuple[str, list[float]]]:
    """Candidates the store measured for these tasks, target and machine: hash -> (record id, latencies)."""
    known = {}
    for t in tasks:
        for chash, (rid, latencies) in store.measured_candidates(t.key, target_key, hardware).items():
            known[chash] = (str(rid), list(latencies))
    return known


def _pretrain(cost_model, contexts: list, tasks: list[Task], store: Store, target_key: str, hardware: str,
              stop: StopRequest) -> int:
    """Train the cost model on what the store already measured, before the first batch (no
    more once a stop is requested)."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from explorer.schedule.trace import replay

    n = 0
    for ctx, task in zip(contexts, tasks):
        if stop.should_stop():
            break
        cands, results = [], []
        for r in store.records(workload=task.key, target=target_key, hardware=hardware, has_trace=True):
            if r.status != Outcome.OK or not r.latencies:
                continue
            try:
                sch = replay(task.mod["main"], r.trace)
            except Exception:  # noqa: BLE001 - a trace this TVM cannot replay teaches nothing
                continue
            cands.append(ms.MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True)))
            results.append(ms.runner.RunnerResult([float(x) for x in r.latencies], None))
        if cands:
            cost_model.update(ctx, cands, results)
            n += len(cands)
    return n


# Rounds added when candidates the store already held used up part of a round's budget.
MAX_TOP_UPS = 6


def _run_rounds(tasks: list[Task], tgt, params: SearchParams, state: SearchState, ledger: CandidateLedger,
                cost_model, *, fresh: bool, space, **tune_args) -> None:
    """The search as rounds (see :func:`_rounds`), then top-up rounds while candidates the store
    already held took part of the budget. Tasks whose last batch held nothing new (a search
    space used up, such as a reshape's single schedule) sit the top-ups out. ``trials`` is
    MetaSchedule's budget: on a model it ends on a whole batch, so up to one batch more."""
    from tvm.s_tir import meta_schedule as ms

    everyone = list(range(len(tasks)))
    left = params.trials - state.summary.trials  # the defaults round may have used some already
    if left <= 0:
        return
    plan = [(p, n, everyone) for p, n in _rounds(replace(params, trials=left), len(tasks), fresh=fresh)]
    # a top-up fills a few slots with random samples: a new strategy would propose the model's
    # favourites again, and those are what was measured already
    top_up = replace(params, init_measured_ratio=0.0, eps_greedy=1.0, generations=0,
                     population=max(2 * params.per_batch, params.init_min_unmeasured))
    for number in range(len(plan) + MAX_TOP_UPS):
        if not plan or state.stop.should_stop():
            break
        round_params, trials, ids = plan.pop(0)
        contexts = _contexts([tasks[i] for i in ids], tgt, replace(round_params, seed=params.seed + 7919 * number),
                             state.stop, space=space)
        callbacks = [write_records(state, ledger, cost_model, contexts, ids), report_progress(state),
                     ms.measure_callback.UpdateCostModel()]
        ms.tune_tasks(tasks=contexts, task_weights=[tasks[i].weight for i in ids], max_trials_global=trials,
                      max_trials_per_task=trials, num_trials_per_iter=round_params.per_batch, cost_model=cost_model,
                      measure_callbacks=callbacks, task_scheduler=params.task_scheduler, **tune_args)
        left = params.trials - state.summary.trials
        open_ids = [i for i in everyone if i not in state.saturated]
        if not plan and left > 0 and open_ids:
            plan = [(top_up, left, open_ids)]


def _space_generator(target: Target, params: SearchParams):
    """What makes each task's design space (a fresh generator per task):
    :func:`search.sketches.space_generator` with the default rules, with the int8 dot-product
    intrinsics' for a task holding a quantized model's int8 kernel, with the FMA micro-kernel's
    when ``params.microkernel`` (checked here, before any work: a target without one is a
    :class:`search.errors.SearchError`)."""
    from explorer.schedule.int8_dot import has_int8_kernel
    from search.sketches import space_generator

    space_generator(target, None, microkernel=params.microkernel)
    return lambda task: space_generator(target, None, microkernel=params.microkernel,
                                        int8=any(has_int8_kernel(f) for f in _prim_funcs(task.mod)))


def _prim_funcs(mod) -> list:
    from tvm import tirx

    return [f for f in mod.functions.values() if isinstance(f, tirx.PrimFunc)]


def _contexts(tasks: list[Task], tgt, params: SearchParams, stop: StopRequest | None = None, *,
              space=lambda task: "post-order-apply") -> list:
    """One TuneContext per task, each with its own evolutionary search (a strategy holds the
    state of its task's search) and its own space generator (``space(task)``, see
    :func:`_space_generator`), which proposes nothing once ``stop`` is set; the module is
    tagged so that candidates name their task."""
    from tvm.s_tir import meta_schedule as ms

    def strategy():
        evolutionary = ms.search_strategy.EvolutionarySearch(
            population_size=params.population, init_measured_ratio=params.init_measured_ratio,
            init_min_unmeasured=params.init_min_unmeasured, genetic_num_iters=params.generations,
            genetic_mutate_prob=params.mutate_prob, genetic_max_fail_count=params.max_fail_count,
            eps_greedy=params.eps_greedy)
        return evolutionary if stop is None else StoppableSearch(evolutionary, stop)

    return [ms.TuneContext(mod=tag_task(t.mod, t.key), target=tgt, space_generator=space(t),
                           search_strategy=strategy(), task_name=t.name, rand_state=params.seed + i, num_threads=2)
            for i, t in enumerate(tasks)]


def _rounds(params: SearchParams, n_tasks: int, *, fresh: bool) -> list[tuple[SearchParams, int]]:
    """The search as rounds of ``(parameters, trials)``. A fresh search (a cost model that has
    seen nothing) first measures one batch per task drawn straight from the sketches: evolving a
    population under an untrained model only ranks it at random, and costs seconds before the
    first measurement; its batches are small (8) so that results show within seconds. Then the
    evolutionary search proper, with the model trained on what the first round measured."""
    if not fresh or params.generations == 0:
        return [(params, params.trials)]
    probe_trials = min(params.trials, params.per_batch * n_tasks)
    probe = replace(params, generations=0, population=2 * params.per_batch, per_batch=min(params.per_batch, 8),
                    init_min_unmeasured=min(params.init_min_unmeasured, params.per_batch))
    # A new round's strategy does not know what the last one measured, and would propose the
    # best of it again (answered from the store, but a wasted slot): it starts from new samples.
    rest = replace(params, init_measured_ratio=0.0)
    return [(probe, probe_trials)] + ([(rest, params.trials - probe_trials)] if params.trials > probe_trials else [])


def _best_verified_s(store: Store, task: Task, target_key: str, hardware: str) -> float | None:
    """The task's best verified time in the store: what early rejection compares with."""
    best = store.best(workload=task.key, target=target_key, hardware=hardware, verified_only=True)
    return best[0].median_s if best else None


def _require_memory(tasks: list[Task]) -> None:
    """Refuse a search whose task would not fit in the free memory to be verified and timed (see
    :mod:`explorer.measure.memory`), before any worker allocates it."""
    from explorer.measure.memory import MemoryLimitError, buffer_bytes, check_memory, measure_bytes

    from search.errors import SearchError

    for task in tasks:
        try:
            check_memory(measure_bytes(*buffer_bytes(_arg_specs(task.mod))), f"searching {task.name}")
        except MemoryLimitError as err:
            raise SearchError(str(err)) from None


def _arg_specs(mod) -> list:
    from explorer.kernels.kernel import buffer_specs

    return [(b.shape, b.dtype, b.is_output) for b in buffer_specs(mod["main"])]


__all__ = ["BatchReport", "SearchHooks", "TuneSummary", "tune"]
