"""Background searches: each is its own process (``python -m search.job_runner``, the same code
as ``schedx tune``) with a row in the store's jobs table, so it outlives the browser tab that
started it, and anyone can list or stop it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from search.errors import SearchError
from store import Job, Store


def log_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "schedx" / "jobs"


def start_job(store: Store, *, workload: str, target: dict, params: dict, rpc: dict | None = None,
              shapes: str | None = None) -> Job:
    """Record a job and start its process; returns the job (status running, pid set)."""
    job = store.create_job("tune", {"workload": workload, "target": target, "params": params, "rpc": rpc,
                                    "shapes": shapes})
    log = log_dir() / f"job-{job.id}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "search.job_runner", "--db", str(store.path), "--job",
                                 str(job.id)], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=str(Path(__file__).resolve().parent.parent))
    return store.update_job(job.id, status="running", pid=proc.pid)


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a finished child not yet reaped is a zombie: not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def refresh(store: Store) -> list[Job]:
    """All jobs, with running ones whose process is gone marked failed."""
    jobs = []
    for job in store.jobs():
        if job.status in ("running", "queued") and job.pid and not alive(job.pid):
            job = store.update_job(job.id, status="failed",
                                   error=job.error or "the process ended without finishing (killed?); "
                                                      "run the same search again to resume it")
        jobs.append(job)
    return jobs


def stop_job(store: Store, job_id: int, timeout: float = 10.0) -> Job:
    """Stop a running job (SIGTERM, then SIGKILL); what it committed stays."""
    job = store.job(job_id)
    if job is None:
        raise SearchError(f"no job {job_id} in {store.path}")
    if job.status not in ("running", "queued"):
        return job
    if job.pid and alive(job.pid):
        try:
            os.killpg(job.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.time() + timeout
        while alive(job.pid) and time.time() < deadline:
            time.sleep(0.2)
        if alive(job.pid):
            os.killpg(job.pid, signal.SIGKILL)
    return store.update_job(job_id, status="stopped")
