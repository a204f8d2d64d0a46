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
- measurement on this machine or through a TVM RPC tracker.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

import tvm
from tvm.ir.utils import derived_object

from explorer.environment import current_environment, hardware_fingerprint
from explorer.measure.target import host_target
from explorer.plain import to_plain
from explorer.schedule.trace import trace_to_steps
from explorer.tvm_fast import light_tensor_intrin
from search import pool as warm_pool
from search.pool import INFRASTRUCTURE
from search.builder import CACHED_PREFIX, FastBuilder
from search.errors import SearchError
from search.ms_database import (StoreDatabase, as_task_module, canonical_target, module_hash, store_workload,
                                tag_task, task_tag, workload_key)
from search.params import SearchParams
from search.runner import REJECT_FACTOR, CachingRunner, PoolRunner, RpcSpec
from search.worker_jobs import VERIFY_FAILED
from search.sketches import target_object
from store import Record, Store


@dataclass
class Task:
    """One workload to tune: a TIR module, how often the model runs it, its FLOPs."""

    name: str
    mod: tvm.IRModule
    weight: float = 1.0
    flops: int = 0
    key: str = ""


@dataclass(frozen=True)
class BatchReport:
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

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class TuneSummary:
    trials: int = 0
    measured: int = 0
    cached: int = 0
    failed: int = 0
    seconds: float = 0.0
    first_measured_s: float | None = None
    best: dict = field(default_factory=dict)  # task -> best GFLOPS
    unverified: dict = field(default_factory=dict)  # task -> why its candidates could not be checked

    def to_dict(self) -> dict:
        return asdict(self)


candidate_hash = module_hash  # a search candidate is known by its scheduled module's hash


def kernel_tasks(kernel) -> list[Task]:
    mod = as_task_module(kernel.func)
    return [Task(kernel.info.name, mod, 1.0, kernel.info.flops, workload_key(mod))]


def model_tasks(loaded, target: dict) -> list[Task]:
    """Tasks of a model: its fused kernels after the tuning pipeline, weighted by call count."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.analysis import estimate_tir_flops

    from explorer.passes import run_pipeline

    run = run_pipeline(loaded.mod, "tuning")
    if run.error:
        raise SearchError(f"the tuning pipeline failed on {loaded.name}: {run.error}")
    mod = run.module(len(run.snapshots) - 1)
    light_tensor_intrin(target.get("kind", "llvm"))
    extracted = ms.relax_integration.extract_tasks(mod, target_object(target))
    tasks = []
    for t in extracted:
        task_mod = as_task_module(t.dispatched[0])
        tasks.append(Task(f"{loaded.name}/{t.task_name}", task_mod, float(t.weight),
                          int(estimate_tir_flops(task_mod)), workload_key(task_mod)))
    if not tasks:
        raise SearchError(f"{loaded.name} has no kernels to tune after the fusion pipeline")
    return tasks


class _Progress:
    """Book-keeping shared by the callback: trials, bests, timing, the measured-candidate index."""

    def __init__(self, store: Store, tasks: list[Task], target_text: str, hardware: str, job_id: int | None,
                 total_trials: int, on_batch: Callable[[BatchReport], None] | None) -> None:
        self.store, self.tasks, self.target_text, self.hardware = store, tasks, target_text, hardware
        self.job_id, self.total_trials, self.on_batch = job_id, total_trials, on_batch
        self.start = time.perf_counter()
        self.summary = TuneSummary()
        self.batches = 0
        self.task_trials = {t.name: 0 for t in tasks}
        self.known: dict[str, str] = {}  # candidate hash -> record id (this workload, target, hardware)
        self.latencies: dict[str, list[float]] = {}
        self.task_index = {t.key: i for i, t in enumerate(tasks)}
        self.saturated: set[int] = set()
        self.checks: dict[str, dict] = {}  # artifact path -> {"max_error", "verified"} (from the runner)
        self.env = current_environment(target_text).to_dict() if hardware == hardware_fingerprint() else {
            "hardware": hardware}
        for t in tasks:
            best = store.best(workload=t.key, target=target_text, hardware=hardware)
            if best and best[0].gflops:
                self.summary.best[t.name] = best[0].gflops
            for chash, (rid, latencies) in store.measured_candidates(t.key, target_text, hardware).items():
                self.known[chash] = str(rid)
                self.latencies[str(rid)] = list(latencies)
            self.task_trials[t.name] = store.count(workload=t.key, target=target_text, hardware=hardware)

    def lookup_mod(self, mod: tvm.IRModule) -> str | None:
        return self.known.get(candidate_hash(mod))

    def task_of(self, mod: tvm.IRModule) -> int | None:
        """Which task a candidate schedules (from the tag its TuneContext's module carries)."""
        return self.task_index.get(task_tag(mod) or "")

    def lookup_latencies(self, record_id: str) -> list[float] | None:
        return self.latencies.get(record_id)


def _make_callback(progress: _Progress, cost_model, contexts: list, round_ids: list[int]):
    from tvm.s_tir import meta_schedule as ms

    @derived_object
    class RecordBatch(ms.measure_callback.PyMeasureCallback):
        """Writes each batch to the store in one transaction, before the cost model learns it."""

        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
            task = progress.tasks[round_ids[task_id]]  # task_id counts the tasks of this round
            ctx = contexts[task_id]
            try:
                predicted = [float(x) for x in cost_model.predict(ctx, measure_candidates)] if cost_model else []
            except Exception:  # a cost model that cannot predict yet predicts nothing
                predicted = []
            records, cached, failed = [], 0, 0
            results = [r.result() if hasattr(r, "result") else r for r in runner_results]
            for i, (cand, built, ran) in enumerate(zip(measure_candidates, builder_results, results)):
                if built.artifact_path and str(built.artifact_path).startswith(CACHED_PREFIX):
                    cached += 1
                    continue
                _remove_artifact(built.artifact_path)
                records.append(_record(task, cand, built, ran, predicted[i] if i < len(predicted) else None,
                                       progress))
                failed += records[-1].status != "ok"
            ids = progress.store.add_records(records) if records else []
            for rec, rid in zip(records, ids):
                if not rec.error.startswith(INFRASTRUCTURE):  # not the candidate's fault: try it again later
                    progress.known[rec.candidate] = str(rid)
                    progress.latencies[str(rid)] = list(rec.latencies)
            _account(progress, round_ids[task_id], records, cached, failed, len(measure_candidates))

    return RecordBatch()


def _remove_artifact(path) -> None:
    """What MetaSchedule's RemoveBuildArtifact does, minus cached candidates (they have none)."""
    import os
    import shutil

    if path and os.path.dirname(str(path)):
        shutil.rmtree(os.path.dirname(str(path)), ignore_errors=True)


def _record(task: Task, cand, built, ran, predicted: float | None, progress: _Progress) -> Record:
    from store.records import MS_FAILED_SECS

    mod = cand.sch.mod
    trace = to_plain(cand.sch.trace.as_json())
    error = built.error_msg or (ran.error_msg if ran is not None else "no run result") or ""
    secs = [float(s) for s in (ran.run_secs or [])] if ran is not None and not error else []
    secs = [s for s in secs if s < MS_FAILED_SECS]
    check = progress.checks.pop(str(built.artifact_path), {}) if built.artifact_path else {}
    status = _status(bool(secs), bool(built.error_msg), error)
    median = sorted(secs)[len(secs) // 2] if secs else None
    try:
        steps = [s.to_dict() for s in trace_to_steps(task.mod["main"], trace)]
    except Exception:  # a trace schedx cannot show as steps keeps its trace
        steps = []
    return Record(workload_key=task.key, target=progress.target_text, hardware=progress.hardware, source="search",
                  status=status, steps=steps, trace=trace, latencies=secs, median_s=median,
                  gflops=task.flops / median / 1e9 if median and task.flops else None,
                  environment={**progress.env, **({"timing": EARLY_TIMING} if check.get("early") else {})},
                  candidate=candidate_hash(mod), predicted=predicted,
                  max_error=check.get("max_error"), verified=check.get("verified"),
                  job_id=progress.job_id, error=error[:2000],
                  args_info=to_plain([a.as_json() for a in cand.args_info]))


EARLY_TIMING = f"one run: over {REJECT_FACTOR:g}x slower than the best so far, not timed further"


def _status(ran_ok: bool, build_failed: bool, error: str) -> str:
    if ran_ok:
        return "ok"
    if "timed out" in error:
        return "timeout"
    if build_failed:
        return "build_error"
    return "verify_failed" if error.startswith(VERIFY_FAILED) else "run_error"


def _account(progress: _Progress, index: int, records: list[Record], cached: int, failed: int, n: int) -> None:
    task = progress.tasks[index]
    if n and cached == n:
        progress.saturated.add(index)  # nothing new in its last batch: it sits out top-up rounds
    else:
        progress.saturated.discard(index)
    s = progress.summary
    now = time.perf_counter() - progress.start
    if s.first_measured_s is None and records:
        s.first_measured_s = now
    s.trials += n - cached  # the budget counts new measurements: a candidate from the store is free
    s.measured += len(records) - failed
    s.cached += cached
    s.failed += failed
    progress.batches += 1
    progress.task_trials[task.name] += n - cached
    good = [r.gflops for r in records if r.status == "ok" and r.gflops]
    if good:
        s.best[task.name] = max(good + ([s.best[task.name]] if task.name in s.best else []))
    eta = now / s.trials * (progress.total_trials - s.trials) if s.trials else None
    report = BatchReport(task=task.name, batch=progress.batches, measured=len(records) - failed, cached=cached,
                         failed=failed, task_trials=progress.task_trials[task.name], trials=s.trials,
                         best_gflops=max(s.best.values()) if s.best else None,
                         task_best_gflops=s.best.get(task.name), elapsed_s=now, eta_s=eta)
    if progress.job_id is not None:
        progress.store.update_job(progress.job_id, progress={
            "trials": s.trials, "total": progress.total_trials, "measured": s.measured, "cached": s.cached,
            "failed": s.failed, "best_gflops": report.best_gflops, "elapsed_s": now, "eta_s": eta,
            "tasks": {t.name: {"trials": progress.task_trials[t.name], "best_gflops": s.best.get(t.name),
                               "weight": t.weight, "flops": t.flops} for t in progress.tasks}})
    if progress.on_batch is not None:
        progress.on_batch(report)


def _pretrain(cost_model, contexts: list, tasks: list[Task], store: Store, target_text: str, hardware: str) -> int:
    """Train the cost model on what the store already measured, before the first batch."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from explorer.schedule.trace import schedule_from_trace

    n = 0
    for ctx, task in zip(contexts, tasks):
        cands, results = [], []
        for r in store.records(workload=task.key, target=target_text, hardware=hardware, has_trace=True):
            if r.status != "ok" or not r.latencies:
                continue
            try:
                sch = schedule_from_trace(task.mod["main"], r.trace)
            except Exception:
                continue
            cands.append(ms.MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True)))
            results.append(ms.runner.RunnerResult([float(x) for x in r.latencies], None))
        if cands:
            cost_model.update(ctx, cands, results)
            n += len(cands)
    return n


def tune(tasks: list[Task], *, store: Store, target: dict, params: SearchParams, rpc: RpcSpec | None = None,
         job_id: int | None = None, on_batch: Callable[[BatchReport], None] | None = None,
         source_name: str = "", builder=None, runner=None) -> TuneSummary:
    """Search schedules for ``tasks`` (see the module docstring); returns what it did.

    ``builder``/``runner`` replace the real ones (tests use deterministic fakes); the cache of
    already measured candidates still applies: a fake runner only sees new candidates."""
    from tvm.s_tir import meta_schedule as ms

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    kind, triple = target.get("kind", "llvm"), target.get("mtriple")
    own_pool = None
    if builder is None or runner is None:  # first: its workers start while this process sets up
        own_pool = warm_pool.take(params.builder_workers or None, kind, triple)
    work = tempfile.TemporaryDirectory(prefix="schedx-tune-")
    try:
        light_tensor_intrin(kind, triple)
        tgt = target_object(target)
        target_text = canonical_target(tgt)
        hardware = hardware_fingerprint() if rpc is None else f"rpc:{rpc.key}"
        for t in tasks:
            store.add_workload(store_workload(t.mod, name=t.name, kind="model_task" if "/" in t.name else "kernel",
                                              source=source_name or "search", flops=t.flops), replace=False)
        progress = _Progress(store, tasks, target_text, hardware, job_id, params.trials, on_batch)
        if builder is None:
            builder = FastBuilder(own_pool, timeout_sec=params.timeout_s, work_dir=work.name, task_of=progress.task_of)
        builder.known = progress.lookup_mod
        if runner is None:
            runner = PoolRunner(own_pool, task_mods=[t.mod for t in tasks], task_specs=[_arg_specs(t.mod) for t in tasks],
                                artifact_task=getattr(builder, "artifact_task", {}),
                                check_artifact=getattr(builder, "check_artifact", {}),
                                best_s=[_best_verified_s(store, t, target_text, hardware) for t in tasks],
                                work_dir=work.name, timeout_sec=params.timeout_s, rpc=rpc,
                                reference_target=host_target() if rpc is None else None)
            runner.prefetch(0)  # the first task's reference, while the first batch is searched for
            progress.checks = runner.details

        cost_model = ms.cost_model.XGBModel(num_warmup_samples=0) if params.cost_model == "xgb" else \
            ms.cost_model.RandomModel()
        trained = _pretrain(cost_model, _contexts(tasks, tgt, params), tasks, store, target_text, hardware) \
            if params.cost_model == "xgb" else 0
        database = StoreDatabase(store, hardware=hardware, target_filter=target_text, source="search", job_id=job_id)
        _run_rounds(tasks, tgt, params, progress, cost_model, fresh=params.cost_model == "xgb" and not trained,
                    work_dir=work.name, builder=builder, runner=CachingRunner(runner, progress.lookup_latencies),
                    database=database)
        if isinstance(runner, PoolRunner):
            progress.summary.unverified = {tasks[i].name: r.why_not for i, r in enumerate(runner.references)
                                           if r.done and r.path is None}
    finally:
        if isinstance(runner, PoolRunner):
            runner.close()
        if own_pool is not None:
            own_pool.close()
        work.cleanup()
    progress.summary.seconds = time.perf_counter() - progress.start
    return progress.summary


# Rounds added when candidates the store already held used up part of a round's budget.
MAX_TOP_UPS = 6


def _run_rounds(tasks: list[Task], tgt, params: SearchParams, progress: _Progress, cost_model, *, fresh: bool,
                **tune_args) -> None:
    """The search as rounds (see :func:`_rounds`), then top-up rounds while candidates the store
    already held took part of the budget. Tasks whose last batch held nothing new (a search
    space used up, such as a reshape's single schedule) sit the top-ups out. ``trials`` is
    MetaSchedule's budget: on a model it ends on a whole batch, so up to one batch more."""
    from tvm.s_tir import meta_schedule as ms

    everyone = list(range(len(tasks)))
    plan = [(p, n, everyone) for p, n in _rounds(params, len(tasks), fresh=fresh)]
    # a top-up fills a few slots with random samples: a new strategy would propose the model's
    # favourites again, and those are what was measured already
    top_up = replace(params, init_measured_ratio=0.0, eps_greedy=1.0, generations=0,
                     population=max(2 * params.per_batch, params.init_min_unmeasured))
    for number in range(len(plan) + MAX_TOP_UPS):
        if not plan:
            break
        round_params, trials, ids = plan.pop(0)
        contexts = _contexts([tasks[i] for i in ids], tgt, replace(round_params, seed=params.seed + 7919 * number))
        callbacks = [_make_callback(progress, cost_model, contexts, ids), ms.measure_callback.UpdateCostModel()]
        ms.tune_tasks(tasks=contexts, task_weights=[tasks[i].weight for i in ids], max_trials_global=trials,
                      max_trials_per_task=trials, num_trials_per_iter=round_params.per_batch, cost_model=cost_model,
                      measure_callbacks=callbacks, task_scheduler=params.task_scheduler, **tune_args)
        left = params.trials - progress.summary.trials
        open_ids = [i for i in everyone if i not in progress.saturated]
        if not plan and left > 0 and open_ids:
            plan = [(top_up, left, open_ids)]


def _contexts(tasks: list[Task], tgt, params: SearchParams) -> list:
    """One TuneContext per task, each with its own evolutionary search (a strategy holds the
    state of its task's search); the module is tagged so that candidates name their task."""
    from tvm.s_tir import meta_schedule as ms

    def strategy():
        return ms.search_strategy.EvolutionarySearch(
            population_size=params.population, init_measured_ratio=params.init_measured_ratio,
            init_min_unmeasured=params.init_min_unmeasured, genetic_num_iters=params.generations,
            genetic_mutate_prob=params.mutate_prob, genetic_max_fail_count=params.max_fail_count,
            eps_greedy=params.eps_greedy)

    return [ms.TuneContext(mod=tag_task(t.mod, t.key), target=tgt, space_generator="post-order-apply",
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


def _best_verified_s(store: Store, task: Task, target_text: str, hardware: str) -> float | None:
    """The task's best verified time in the store: what early rejection compares with."""
    best = store.best(workload=task.key, target=target_text, hardware=hardware, verified_only=True)
    return best[0].median_s if best else None


def _arg_specs(mod: tvm.IRModule) -> list:
    from explorer.kernels.kernel import buffer_specs

    return [(b.shape, b.dtype, b.is_output) for b in buffer_specs(mod["main"])]
