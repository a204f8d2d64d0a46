"""Entry point of a background search process: ``python -m search.job_runner --db PATH --job ID``."""

from __future__ import annotations

import argparse
import signal
import sys


class Stopped(Exception):
    """SIGTERM arrived: stop after the batch in progress."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--db", required=True)
    ap.add_argument("--job", type=int, required=True)
    args = ap.parse_args(argv)

    from store import Store

    store = Store(args.db)
    job = store.job(args.job)
    if job is None:
        sys.stderr.write(f"no job {args.job} in {args.db}\n")
        return 2

    def on_term(*_):
        raise Stopped()

    signal.signal(signal.SIGTERM, on_term)
    p = job.params
    if not p.get("rpc"):  # the measuring workers start now, while TVM loads here
        from search.pool import prestart

        prestart(None, p["target"].get("kind", "llvm"), p["target"].get("mtriple"))
    try:
        from search.params import SearchParams
        from search.runner import RpcSpec
        from search.tune import tune
        from search.workloads import resolve_tasks

        rpc = RpcSpec.parse(p["rpc"]["tracker"], p["rpc"]["key"]) if p.get("rpc") else None
        tasks, source = resolve_tasks(p["workload"], p["target"], p.get("shapes"))
        summary = tune(tasks, store=store, target=p["target"], params=SearchParams.from_dict(p["params"]), rpc=rpc,
                       job_id=job.id, source_name=source)
        progress = dict(store.job(job.id).progress)
        progress["summary"] = summary.to_dict()
        store.update_job(job.id, status="done", progress=progress)
    except Stopped:
        store.update_job(job.id, status="stopped")
    except BaseException as err:  # any failure is the job's: record it for the UI and the CLI
        store.update_job(job.id, status="failed", error=f"{type(err).__name__}: {err}"[:2000])
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
