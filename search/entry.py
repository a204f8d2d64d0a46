"""A search as the front ends ask for one: :func:`prepare` a :class:`search.job_spec.JobSpec`
(everything it names checked, the measuring workers started when the search will run in this
process), then :func:`start` it as a background job or :func:`run` it here. The command line,
the Search page and the Profile page call these and only present what comes back."""

from __future__ import annotations

from collections.abc import Callable

from search.job_spec import JobSpec, ValidJob
from store import Job, Store


def warm_up(spec: JobSpec) -> None:
    """Start the measuring workers of a search that will run in this process, before TVM loads
    here (they import it meanwhile); the search takes them. Nothing for an RPC search."""
    if spec.rpc_tracker:
        return
    from explorer.target import intrinsics_of
    from search.pool import prestart

    prestart(None, intrinsics_of(spec.target))


def cool_down() -> None:
    """Close workers :func:`warm_up` started that no search took (the command failed first)."""
    from search.pool import release_prestarted

    release_prestarted()


def prepare(spec: JobSpec, *, here: bool = False) -> ValidJob:
    """The spec checked before any job exists: its target, workload and RPC address parsed, the
    tracker reachable (:class:`search.job_spec.ValidJob`); the rooms' own errors raise with their
    messages. ``here``: the search will :func:`run` in this process, so its workers start first."""
    if here:
        from explorer.fault_points import hold

        warm_up(spec)
        hold("tune.start")  # (the fault-injection suite's signals during start-up land here)
    try:
        job = spec.validate()
        if job.rpc is not None:
            from search.rpc import check_tracker

            check_tracker(job.rpc)
    except BaseException:
        cool_down()
        raise
    return job


def start(store: Store, job: ValidJob) -> Job:
    """Start the search as a background job (its own process and a row in ``store``'s jobs)."""
    from search.jobs import start_job

    return start_job(store, job.spec)


def run(store: Store, job: ValidJob, *, on_batch: Callable[[object], None] | None = None, stop=None):
    """Run the search in this process, its job row in ``store``; returns the
    :class:`search.tune.TuneSummary`. ``stop``: a :class:`search.stopping.StopRequest` the caller's
    signal handlers set (None: the search handles SIGINT and SIGTERM itself)."""
    from search.jobs import run_job

    try:
        return run_job(store, job.spec, on_batch=on_batch, prepared=job, stop=stop)
    finally:
        cool_down()


__all__ = ["ValidJob", "cool_down", "prepare", "run", "start", "warm_up"]
