"""The store's records and workloads made from search and measurement results: one factory per
source (a search candidate, a manual measurement on the Schedule page or ``schedx measure``, a
record MetaSchedule commits through :class:`search.ms_database.StoreDatabase`), and the workload
a task is filed under (imports of MetaSchedule JSON files are made in ``store.interop``). Here because they join TVM objects and store values,
and neither room may import the other."""

from __future__ import annotations

from tvm.ir import IRModule
from tvm.tirx import PrimFunc

from explorer.ir.plain import to_plain
from explorer.workload import as_task_module, describe_module, module_from_b64, module_to_b64
from search.ledger import Candidate
from store import Record, Workload
from store.outcome import Outcome


def store_workload(mod: IRModule | PrimFunc, *, name: str | None = None, kind: str = "kernel",
                   source: str = "search", shapes: dict | None = None, flops: int | None = None) -> Workload:
    """The store's Workload for ``mod`` (a PrimFunc is normalised as ``tune_tir`` does): key and
    module exactly as MetaSchedule writes them; name, shapes and FLOPs computed unless given (given
    shapes still say whether its FLOPs are largely element-wise work: ``beside_products``)."""
    mod = as_task_module(mod) if isinstance(mod, PrimFunc) else mod
    key, mod_b64 = module_to_b64(mod)
    info = describe_module(mod)
    beside = {k: v for k, v in info["shapes"].items() if k == "beside_products"}
    return Workload(key=key, name=name or info["name"], kind=kind, source=source,
                    shapes={**shapes, **beside} if shapes is not None else info["shapes"],
                    flops=flops if flops is not None else info["flops"], mod_b64=mod_b64)


def task_workload(task, *, source: str, shapes: str | None = None) -> Workload:
    """The store's Workload for a search task (:class:`explorer.workload.Task`); ``shapes`` (the
    model's ``--shapes``) is kept: records are valid for the shapes they were tuned at."""
    w = store_workload(task.mod, name=task.name, kind=task.kind, source=source,
                       flops=task.flops)
    if shapes:
        return Workload(**{**w.to_dict(), "shapes": {**w.shapes, "model_shapes": shapes}})
    return w


def describe_b64(key: str, mod_b64: str) -> dict:
    """``describe`` hook for ``Store.import_metaschedule``: read the module, describe it."""
    try:
        return describe_module(module_from_b64(key, mod_b64))
    except Exception:  # noqa: BLE001 - an unreadable module is imported under a generic name
        return {}


def candidate_record(task, candidate: Candidate, sch, args_info, *, predicted: float | None, target_key: str,
                     hardware: str, environment: dict, job_id: int | None, early_note: str = "",
                     source: str = "search") -> Record:
    """A search candidate as the store keeps it: its outcome, every latency, the steps and trace
    of its schedule, the cost model's prediction, the verification. ``source`` is "search", or
    "default" for the default schedule a search measures first (what an export uses without a
    record)."""
    from explorer.schedule.trace import trace_to_steps

    trace = to_plain(sch.trace.as_json())
    secs = list(candidate.secs) if candidate.status == Outcome.OK else []
    median = sorted(secs)[len(secs) // 2] if secs else None
    try:
        steps = [s.to_dict() for s in trace_to_steps(task.mod["main"], trace)]
    except Exception:  # noqa: BLE001 - a trace schedx cannot show as steps keeps its trace
        steps = []
    env = {**environment, **({"timing": early_note} if candidate.early and early_note else {})}
    return Record(workload_key=task.key, target=target_key, hardware=hardware, source=source,
                  status=Outcome(candidate.status or Outcome.RUN_ERROR), steps=steps, trace=trace, latencies=secs,
                  median_s=median, gflops=task.flops / median / 1e9 if median and task.flops else None,
                  environment=env, candidate=candidate.hash, predicted=predicted, max_error=candidate.max_error,
                  verified=candidate.verified, job_id=job_id, error=candidate.error[:2000],
                  args_info=to_plain([a.as_json() for a in args_info]))


def manual_record(kernel, steps: list, trace, result, *, hardware: str, source: str = "manual") -> tuple[Workload, Record]:
    """A measurement of a hand schedule (the unscheduled baseline: no steps, no trace): the
    workload it belongs to and the record (its ``workload_key`` set)."""
    workload = store_workload(kernel.func, name=kernel.info.name,
                              kind=kernel.info.workload_kind, source=kernel.info.source,
                              flops=kernel.info.flops,
                              shapes={**kernel.info.params, "spec": kernel.info.spec, "bytes": kernel.info.min_bytes})
    record = Record(workload_key=workload.key, target=result.target, hardware=hardware, source=source,
                    status=result.status, steps=list(steps), trace=trace, latencies=list(result.latencies),
                    median_s=result.median_s, gflops=result.gflops, environment=result.environment,
                    max_error=result.max_abs_error, verified=result.verified, error=result.error)
    return workload, record


def metaschedule_record(key: str, trace, run_secs, target_text: str, args_info, *, hardware: str, source: str,
                        environment: dict, job_id: int | None) -> Record:
    """A record MetaSchedule commits (its trace and run_secs as it gave them: the failure marker
    1e10 kept in ``run_secs``, only valid times in ``latencies``)."""
    from store.records import median_of, split_run_secs

    valid, exact = split_run_secs(run_secs)  # exact: run_secs as given, when they say more than valid
    return Record(workload_key=key, target=target_text, hardware=hardware, source=source,
                  status=Outcome.OK if valid else Outcome.RUN_ERROR, steps=[], trace=trace, latencies=valid,
                  median_s=median_of(valid), gflops=None, environment=environment, job_id=job_id,
                  error="" if valid else "MetaSchedule reported no valid run time (build or run failed)",
                  args_info=args_info, run_secs=exact)


__all__ = ["candidate_record", "describe_b64", "manual_record", "metaschedule_record", "store_workload",
           "task_workload"]
