"""Entry point of a background search process: ``python -m search.job_runner --db PATH --job ID``.

SIGTERM (``schedx jobs stop``) and SIGINT stop the search after the batch in progress (a second
one at once, dropping what the batch in flight has not measured; see :mod:`search.stopping`); what
it committed stays, the job row says 'stopped', and running the same search again resumes it."""

from __future__ import annotations

import argparse
import sys


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

    from search.stopping import StopRequest, signals_stop

    stop = StopRequest()
    with signals_stop(stop):  # from here on a signal asks the search to stop; it never raises
        return _run(store, job, stop)


def _run(store, job, stop) -> int:
    from explorer.fault_points import hold
    from search.entry import warm_up
    from search.job_spec import JobSpec
    from search.jobs import record_end, run_job

    stop.on_exit.append(lambda: record_end(store, job.id, status="stopped"))  # a forced exit's last words
    with stop.starting():  # a second signal now: nothing measured, nothing to finish, it ends at once
        hold("tune.start")
        spec = JobSpec.from_dict(job.params)
        warm_up(spec)  # the measuring workers start now, while TVM loads here
    try:
        run_job(store, spec, job_id=job.id, stop=stop)
    except KeyboardInterrupt:
        return 0
    except Exception:  # noqa: BLE001 - run_job recorded it in the job row; the log keeps the traceback
        import traceback

        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
