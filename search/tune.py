"""Evolutionary search (MetaSchedule, Ansor's successor) on a kernel or a whole model, straight
into the store.

What schedx adds to ``ms.tune_tasks``:
- start-up in seconds: only the target's tensor intrinsics, a warm builder pool;
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
from dataclasses import asdict, dataclass, field

import tvm
import tvm_ffi
from tvm.ir.utils import derived_object

from explorer.environment import current_environment, hardware_fingerprint
from explorer.schedule.trace import to_plain, trace_to_steps
from explorer.tvm_fast import light_tensor_intrin
from search.builder import CACHED_PREFIX, FastBuilder
from search.errors import SearchError
from search.ms_database import StoreDatabase, as_task_module, canonical_target, store_workload, workload_key
from search.params import SearchParams
from search.runner import CachingRunner, RpcSpec, make_inner_runner
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

    def to_dict(self) -> dict:
        return asdict(self)


def candidate_hash(mod: tvm.IRModule) -> str:
    return str(tvm_ffi.structural_hash(mod) % (1 << 64))


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
        self.env = current_environment(target_text).to_dict() if hardware == hardware_fingerprint() else {
            "hardware": hardware}
        for t in tasks:
            prior = store.records(workload=t.key, target=target_text, hardware=hardware)
            ok = [r for r in prior if r.ok and r.gflops]
            if ok:
                self.summary.best[t.name] = max(r.gflops for r in ok)
            for r in prior:
                chash = (r.environment or {}).get("candidate")
                if chash and r.id is not None:
                    self.known[chash] = str(r.id)
                    self.latencies[str(r.id)] = list(r.latencies or [])
            self.task_trials[t.name] = len(prior)

    def lookup_mod(self, mod: tvm.IRModule) -> str | None:
        return self.known.get(candidate_hash(mod))

    def lookup_latencies(self, record_id: str) -> list[float] | None:
        return self.latencies.get(record_id)


def _make_callback(progress: _Progress, cost_model, contexts: list):
    from tvm.s_tir import meta_schedule as ms

    @derived_object
    class RecordBatch(ms.measure_callback.PyMeasureCallback):
        """Writes each batch to the store in one transaction, before the cost model learns it."""

        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
            task = progress.tasks[task_id]
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
                progress.known[rec.environment["candidate"]] = str(rid)
                progress.latencies[str(rid)] = list(rec.latencies)
            _account(progress, task, records, cached, failed, len(measure_candidates))

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
    status = "ok" if secs else ("build_error" if built.error_msg else "run_error")
    median = sorted(secs)[len(secs) // 2] if secs else None
    try:
        steps = [s.to_dict() for s in trace_to_steps(task.mod["main"], trace)]
    except Exception:  # a trace schedx cannot show as steps keeps its trace
        steps = []
    return Record(workload_key=task.key, target=progress.target_text, hardware=progress.hardware, source="search",
                  status=status, steps=steps, trace=trace, latencies=secs, median_s=median,
                  gflops=task.flops / median / 1e9 if median and task.flops else None,
                  environment={**progress.env, "candidate": candidate_hash(mod)}, predicted=predicted,
                  job_id=progress.job_id, error=error[:2000],
                  args_info=to_plain([a.as_json() for a in cand.args_info]))


def _account(progress: _Progress, task: Task, records: list[Record], cached: int, failed: int, n: int) -> None:
    s = progress.summary
    now = time.perf_counter() - progress.start
    if s.first_measured_s is None and records:
        s.first_measured_s = now
    s.trials += n
    s.measured += len(records) - failed
    s.cached += cached
    s.failed += failed
    progress.batches += 1
    progress.task_trials[task.name] += n
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


def _start_runner(rpc: RpcSpec | None, params: SearchParams):
    """Create the runner in a thread; ``.result()`` returns it (or raises what creating it raised)."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=1)
    future = pool.submit(make_inner_runner, rpc, timeout_sec=params.timeout_s)
    pool.shutdown(wait=False)
    return future


def tune(tasks: list[Task], *, store: Store, target: dict, params: SearchParams, rpc: RpcSpec | None = None,
         job_id: int | None = None, on_batch: Callable[[BatchReport], None] | None = None,
         source_name: str = "", builder=None, runner=None) -> TuneSummary:
    """Search schedules for ``tasks`` (see the module docstring); returns what it did.

    ``builder``/``runner`` replace the real ones (tests use deterministic fakes); the cache of
    already measured candidates still applies: a fake runner only sees new candidates."""
    from tvm.s_tir import meta_schedule as ms

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    light_tensor_intrin(target.get("kind", "llvm"))
    tgt = target_object(target)
    if builder is None:  # first: its workers import TVM while this process sets the search up
        builder = FastBuilder(max_workers=params.builder_workers or None, timeout_sec=params.timeout_s,
                              target_kind=tgt.kind.name)
    # The runner's constructor waits for its worker process to start (~1.5 s): do it meanwhile.
    started = _start_runner(rpc, params) if runner is None else None
    try:
        target_text = canonical_target(tgt)
        hardware = hardware_fingerprint() if rpc is None else f"rpc:{rpc.key}"
        for t in tasks:
            store.add_workload(store_workload(t.mod, name=t.name, kind="model_task" if "/" in t.name else "kernel",
                                              source=source_name or "search", flops=t.flops), replace=False)
        progress = _Progress(store, tasks, target_text, hardware, job_id, params.trials, on_batch)

        def strategy():  # one per task: a strategy holds the state of its task's search
            return ms.search_strategy.EvolutionarySearch(
                population_size=params.population, init_measured_ratio=params.init_measured_ratio,
                init_min_unmeasured=params.init_min_unmeasured, genetic_num_iters=params.generations,
                genetic_mutate_prob=params.mutate_prob, genetic_max_fail_count=params.max_fail_count,
                eps_greedy=params.eps_greedy)

        contexts = [ms.TuneContext(mod=t.mod, target=tgt, space_generator="post-order-apply",
                                   search_strategy=strategy(), task_name=t.name, rand_state=params.seed + i,
                                   num_threads=2)
                    for i, t in enumerate(tasks)]
        cost_model = ms.cost_model.XGBModel(num_warmup_samples=0) if params.cost_model == "xgb" else \
            ms.cost_model.RandomModel()
        if params.cost_model == "xgb":
            _pretrain(cost_model, contexts, tasks, store, target_text, hardware)
        database = StoreDatabase(store, hardware=hardware, target_filter=target_text, source="search", job_id=job_id)
        builder.known = progress.lookup_mod
        inner = runner if runner is not None else started.result()
        runner = CachingRunner(inner, progress.lookup_latencies)
        callbacks = [_make_callback(progress, cost_model, contexts), ms.measure_callback.UpdateCostModel()]
        with tempfile.TemporaryDirectory(prefix="schedx-tune-") as work_dir:
            ms.tune_tasks(tasks=contexts, task_weights=[t.weight for t in tasks], work_dir=work_dir,
                          max_trials_global=params.trials, max_trials_per_task=params.trials,
                          num_trials_per_iter=params.per_batch, builder=builder, runner=runner, database=database,
                          cost_model=cost_model, measure_callbacks=callbacks, task_scheduler=params.task_scheduler)
    finally:
        if hasattr(builder, "close"):
            builder.close()
    progress.summary.seconds = time.perf_counter() - progress.start
    return progress.summary
