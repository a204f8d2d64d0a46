"""Background searches: each is its own process (``python -m search.job_runner``, the same code
as ``schedx tune``) with a row in the store's jobs table, so it outlives the browser tab that
started it, and anyone can list or stop it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from datetime import datetime, timezone

from explorer.processes import process_alive
from search.errors import SearchError
from search.job_spec import JobProgress, JobSpec
from store import Job, Store

ACTIVE = ("running", "queued")


def log_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "schedx" / "jobs"


def log_path(store: Store, job_id: int) -> Path:
    """Where a background job's output goes: one file per database and job (job ids restart at 1
    in every database, and two databases' job 1 must not share a log)."""
    import hashlib

    database = str(Path(store.path).expanduser().resolve())
    return log_dir() / f"job-{hashlib.sha256(database.encode()).hexdigest()[:10]}-{job_id}.log"


def _instant(text: str) -> datetime | None:
    try:
        at = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)


def job_elapsed_s(job: Job, now: datetime | None = None) -> float | None:
    """Seconds a job has run, on one clock for every front end and every state: from its row's
    creation to ``now`` while it runs, to its row's last change (how it ended) once it has ended,
    so the figure never goes back. (The search's own ``JobProgress.elapsed_s`` starts later, once
    the process has imported TVM and extracted its tasks: a page that showed the row's clock while
    the job ran and that one after went back on a stop.) None for an unreadable time."""
    start = _instant(job.created)
    end = (now or datetime.now(timezone.utc)) if job.status in ACTIVE else _instant(job.updated)
    if start is None or end is None:
        return None
    return max(0.0, (end - start).total_seconds())


def job_eta_s(job: Job, progress: JobProgress, now: datetime | None = None) -> float | None:
    """Seconds a running job has left: its last batch's estimate
    (:func:`search.job_spec.estimate_eta_s`), less the time since that batch was written (the row
    changes once a batch), so it counts down between batches. None for a job that has ended or
    has no estimate (the confirmation round)."""
    if job.status not in ACTIVE or progress.eta_s is None:
        return None
    written = _instant(job.updated)
    since = ((now or datetime.now(timezone.utc)) - written).total_seconds() if written else 0.0
    return max(0.0, progress.eta_s - max(0.0, since))


def start_job(store: Store, spec: JobSpec) -> Job:
    """Record a job and start its process; returns the job (status running, pid set). The spec
    should have been validated (:meth:`JobSpec.validate`): a bad one fails in the background."""
    job = store.create_job("tune", spec.to_dict())
    log = log_path(store, job.id)
    log.parent.mkdir(parents=True, exist_ok=True)
    database = Path(store.path).expanduser().resolve()  # the job runs in another working directory
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "search.job_runner", "--db", str(database), "--job",
                                 str(job.id)], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=str(Path(__file__).resolve().parent.parent))
    return store.update_job(job.id, status="running", pid=proc.pid)


def refresh(store: Store) -> list[Job]:
    """All jobs, with running ones whose process is gone marked failed."""
    jobs = []
    for job in store.jobs():
        if job.status in ACTIVE and job.pid and not process_alive(job.pid):
            job = store.update_job(job.id, status="failed",
                                   error=job.error or "the process ended without finishing (killed?); "
                                                      "run the same search again to resume it")
        jobs.append(job)
    return jobs


def stop_job(store: Store, job_id: int, timeout: float = 15.0) -> Job:
    """Stop a running job: SIGTERM (it stops after the batch in progress), a second SIGTERM after
    a third of ``timeout`` (it abandons what that batch has not measured), SIGKILL at the end;
    what it committed stays."""
    job = store.job(job_id)
    if job is None:
        raise SearchError(f"no job {job_id} in {store.path}")
    if job.status not in ACTIVE:
        return job
    if job.pid and process_alive(job.pid):
        start = time.time()
        for signum, until in ((signal.SIGTERM, timeout / 3), (signal.SIGTERM, timeout), (signal.SIGKILL, None)):
            try:
                os.killpg(job.pid, signum)
            except ProcessLookupError:
                break
            while until is not None and process_alive(job.pid) and time.time() < start + until:
                time.sleep(0.2)
            if not process_alive(job.pid):
                break
    return store.update_job(job_id, status="stopped")


def run_job(store: Store, spec: JobSpec, *, job_id: int | None = None,
            on_batch: Callable[[object], None] | None = None, prepared=None, stop=None):
    """Run a search job in this process, with its row in ``store`` (created unless ``job_id``
    names one): running, then done, failed or stopped (a stop request from a signal, see
    :mod:`search.stopping`; or KeyboardInterrupt, SystemExit). Returns the
    :class:`search.tune.TuneSummary`. ``prepared`` is ``spec.validate()``'s :class:`ValidJob` when the
    caller has it already; ``stop`` a :class:`search.stopping.StopRequest` the caller's signal
    handlers set (None: the search handles SIGINT and SIGTERM itself)."""
    from search.tune import SearchHooks, tune

    if job_id is None:
        job_id = store.create_job("tune", spec.to_dict()).id
    store.update_job(job_id, status="running", pid=os.getpid())
    last_words = lambda: record_end(store, job_id, status="stopped")  # noqa: E731 - a forced exit's
    if stop is not None:
        stop.on_exit.append(last_words)
    try:
        job = prepared or spec.validate()
        summary = tune(job, store, spec.params, SearchHooks(on_batch=on_batch, stop=stop, job_id=job_id))
    except (KeyboardInterrupt, SystemExit):
        record_end(store, job_id, status="stopped")
        raise
    except BaseException as err:  # any failure is the job's: record it for the UI and the CLI
        record_end(store, job_id, status="failed", error=(str(err) or type(err).__name__)[:2000])
        raise
    finally:
        if stop is not None:
            stop.on_exit.remove(last_words)
    progress = JobProgress.from_dict(store.job(job_id).progress)
    done = JobProgress(**{**progress.to_dict(), "summary": summary.to_dict()})
    status = "stopped" if summary.stopped in ("interrupted", "terminated") else "done"
    store.update_job(job_id, status=status, progress=done.to_dict(),
                     error=summary.problem if summary.problem else "")
    return summary


def record_end(store: Store, job_id: int, **fields) -> None:
    """Record how a job ended, if the database still takes writes (a full disk may refuse this
    too: the error being raised matters more)."""
    from store import StoreError

    try:
        store.update_job(job_id, **fields)
    except StoreError:
        pass
