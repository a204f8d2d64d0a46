"""CLI commands of the search: ``schedx sketches``, ``schedx tune``, ``schedx jobs``."""

from __future__ import annotations

import click

from app.cli_common import echo_json, fail_cleanly, target_option
from app.cli_types import Count, DbPath
from app.cli_precision import INT8_HELP, calibration_of, calibration_options
from explorer.precision import PRECISIONS



def _db(path: str | None):
    from store import Store, default_db_path

    return Store(path or default_db_path())


@click.command()
@click.argument("kernel")
@click.option("--rules", default=None, help="Comma-separated schedule rules to use (default: all of the target's).")
@click.option("--sample", "samples", default=0, type=click.IntRange(0, 20), help="Also draw N concrete schedules.")
@click.option("--microkernel", is_flag=True,
              help="Also the sketches tiled around the target's fp32 FMA micro-kernel (as schedx tune --microkernel).")
@target_option(scope="searchable")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@fail_cleanly
def sketches(kernel: str, rules: str | None, samples: int, microkernel: bool, target_spec: str, as_json: bool) -> None:
    """Show KERNEL's sketches: the design spaces MetaSchedule's schedule rules generate (Ansor's
    sketch generation), with sampled values shown as ?N (the decision this sketch holds)."""
    from explorer.workload import load_kernel
    from explorer.target import parse_target
    from search.sketches import default_rule_names, generate_sketches, sample_schedule

    target = parse_target(target_spec)
    k = load_kernel(kernel)
    chosen = [r.strip() for r in rules.split(",")] if rules else None
    found = generate_sketches(k, target, chosen, microkernel=microkernel)
    drawn = {s.index: [[st.to_dict() for st in sample_schedule(k, s, target, seed=100 * s.index + i,
                                                               microkernel=microkernel)]
                       for i in range(samples)]
             for s in found}
    if as_json:
        echo_json({"kernel": k.info.spec, "rules": chosen or default_rule_names(target),
                   "sketches": [{**s.to_dict(), "samples": drawn[s.index]} for s in found]})
        return
    click.echo(f"{k.info.spec}: {len(found)} sketches from rules {', '.join(chosen or default_rule_names(target))}")
    for s in found:
        click.echo(f"\nsketch {s.index}  ({s.decisions} open decisions; rules: {', '.join(s.rules) or '-'})")
        for i, step in enumerate(s.open_steps):
            click.echo(f"  {i:>2}. {step.describe()}")
        for j, sample in enumerate(drawn[s.index]):
            click.echo(f"  sample {j}: " + "; ".join(f"{x['primitive']}({', '.join(f'{k}={v}' for k, v in x['args'].items())})"
                                                     for x in sample[:6]) + (" ..." if len(sample) > 6 else ""))


@click.command()
@click.argument("workload")
@click.option("--trials", default=None, type=Count(1, 10_000_000),
              help="Total candidates to measure [default: 64; unlimited with --minutes].")
@click.option("--minutes", default=None, type=click.FloatRange(0, 7 * 24 * 60, min_open=True),
              help="Time budget: stop after the batch in progress once it is spent (with --trials: whichever "
                   "comes first).")
@click.option("--per-batch", default=16, show_default=True, type=Count(1, 4096), help="Candidates per batch.")
@click.option("--population", default=256, show_default=True, type=Count(2, 1_000_000))
@click.option("--generations", default=3, show_default=True, type=Count(0, 1000), help="Genetic iterations per batch.")
@click.option("--mutate-prob", default=0.85, show_default=True, type=click.FloatRange(0, 1))
@click.option("--eps-greedy", default=0.05, show_default=True, type=click.FloatRange(0, 1))
@click.option("--seed", default=0, show_default=True, type=Count(0, 2**31 - 1))
@click.option("--cost-model", default="xgb", show_default=True, type=click.Choice(["xgb", "random"]))
@click.option("--timeout", "timeout_s", default=30, show_default=True, type=Count(1, 24 * 3600),
              help="Seconds one candidate's build, or one candidate's run, may take before it counts as hung.")
@click.option("--microkernel", is_flag=True,
              help="Also tile fp32 matmul-like blocks around an FMA micro-kernel for the target's vector width "
                   "(tensorized; blocks it does not fit keep the default rules).")
@click.option("--default-variants", default=3, show_default=True, type=Count(0, 6),
              help="After each task's default schedule, measure up to this many of its variants (the default "
                   "rules with one choice changed: the next register tiles, rows not fused, no tail tile; for a "
                   "bf16 product other AMX tile grids and vdpbf16ps step sizes), "
                   "heaviest tasks first, at most half the trials (0: none).")
@click.option("--warm-timing", is_flag=True,
              help="Time candidates warm, back to back for 40 ms (MetaSchedule's way) instead of as a model runs "
                   "them (the cache flushed before each of 10 single runs).")
@click.option("--confirm-rounds", default=3, show_default=True, type=Count(0, 50),
              help="After the search, each task's fastest schedules and its default are timed again in turns, "
                   "this many rounds; an export applies the winner (0: no confirmation round; schedules an "
                   "earlier search confirmed still come first).")
@target_option(scope="searchable", note="Without --rpc-tracker, one this machine runs.")
@click.option("--shapes", default=None, help="Input shapes of an ONNX model with symbolic dims.")
@click.option("--db", "db_path", default=None, envvar="SCHEDX_DB", type=DbPath(),
              help="The SQLite database (default: user data dir).")
@click.option("--rpc-tracker", default=None, help="HOST:PORT of a TVM RPC tracker to measure through.")
@click.option("--rpc-key", default=None, help="Device key the RPC servers registered with the tracker.")
@click.option("--precision", type=click.Choice(PRECISIONS), default="fp32", show_default=True,
              help="bf16: search the model's kernels as `schedx export --precision bf16` builds them (convolutions "
                   "and matmuls with constant weights in bf16, fp32 accumulation; needs AVX512-BF16 or AMX-BF16), "
                   f"so that export ships the records found. {INT8_HELP}: its int8 kernels are searched, the "
                   "records an export at int8 with the same calibration ships.")
@calibration_options
@click.option("--background", is_flag=True, help="Start as a background job and print its id.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@fail_cleanly
def tune(workload: str, trials: int | None, minutes: float | None, per_batch: int, population: int, generations: int,
         mutate_prob: float, eps_greedy: float, seed: int, cost_model: str, timeout_s: int, microkernel: bool,
         default_variants: int, warm_timing: bool, confirm_rounds: int, target_spec: str,
         shapes: str | None, db_path: str | None, rpc_tracker: str | None, rpc_key: str | None, precision: str,
         calibrate: int, data_file, background: bool, as_json: bool) -> None:
    """Evolutionary search on WORKLOAD (a kernel spec, a model/fused-kernel, or a model), into the
    leaderboard. Running it again on the same database resumes: nothing is measured twice.

    Ctrl-C (or SIGTERM) stops it after the batch in progress, keeping every finished batch (a
    second Ctrl-C stops at once); exit status 130 (143 for SIGTERM). Exits 1 when no candidate
    could be measured, with the failures grouped by reason."""
    from search.stopping import StopRequest, signals_stop

    stop = StopRequest()  # its birth is the command's start: --minutes is wall time from here
    from search.entry import cool_down
    from search.job_spec import JobSpec
    from search.params import UNLIMITED_TRIALS, SearchParams

    by_time = trials is None and bool(minutes)  # the progress bar follows the clock
    if trials is None:
        trials = UNLIMITED_TRIALS if minutes else 64
    params = SearchParams(trials=trials, per_batch=per_batch, population=population, generations=generations,
                          mutate_prob=mutate_prob, eps_greedy=eps_greedy, seed=seed, cost_model=cost_model,
                          timeout_s=timeout_s, minutes=minutes or 0.0, microkernel=microkernel,
                          default_variants=default_variants, cold_timing=not warm_timing,
                          confirm_rounds=confirm_rounds)
    spec = JobSpec(workload=workload, target=target_spec, params=params, shapes=shapes, rpc_tracker=rpc_tracker,
                   rpc_key=rpc_key, precision=precision, calibration=calibration_of(precision, calibrate, data_file))
    with signals_stop(stop):  # from here on Ctrl-C asks for a stop; nothing raises through TVM
        try:
            _tune(spec, by_time, minutes, db_path, background, as_json, stop)
        finally:
            cool_down()  # measuring workers no search took (the command failed or stopped first)


def _tune(spec, by_time: bool, minutes: float | None, db_path: str | None, background: bool, as_json: bool,
          stop) -> None:
    from search.entry import prepare, run, start

    trials = spec.params.trials
    with stop.starting():  # a second Ctrl-C while the search starts: nothing to finish, it ends at once
        job = prepare(spec, here=not background)  # a bad workload, target or address fails here, before any job
    if stop.interrupted:  # Ctrl-C while the model loaded: nothing to stop yet
        click.echo("stopped before the search started; nothing was measured", err=True)
        raise SystemExit(130 if stop.reason == "interrupted" else 143)
    store = _db(db_path)
    if background:
        started = start(store, job)
        echo_json(started.to_dict()) if as_json else click.echo(f"started job {started.id} (pid {started.pid}); "
                                                                f"follow it with: schedx jobs --db {store.path}")
        return
    tasks = job.tasks
    budget = ("no trial limit" if by_time else f"{trials} trials") + (f", {minutes:g} min" if minutes else "")
    at = f" at {job.spec.precision}" if job.spec.precision != "fp32" else ""
    click.echo(f"{len(tasks)} task(s){at} for {job.target.label}, {budget}, database {store.path}", err=True)
    if job.spec.params.defaults_first:
        variants = f", then up to {job.spec.params.default_variants} variants of it per task" \
            if job.spec.params.default_variants else ""
        click.echo(f"timing each task's default schedule first (the baseline a record must beat){variants}, "
                   "then searching; a line per batch", err=True)
    summary = run(store, job, on_batch=lambda report: click.echo(batch_line(report, trials, by_time), err=True),
                  stop=stop)
    if as_json:
        echo_json(summary.to_dict())
    else:
        _print_summary(summary)
    if summary.stopped in ("interrupted", "terminated"):
        how = "Ctrl-C" if summary.stopped == "interrupted" else "SIGTERM"
        click.echo(f"stopped ({how}) after {summary.trials} trials; what was measured is in the database, and "
                   f"running the same command again resumes", err=True)
        raise SystemExit(130 if summary.stopped == "interrupted" else 143)
    if summary.problem:
        raise click.ClickException(summary.problem)


def batch_line(report, trials: int, by_time: bool) -> str:
    """One line per measured batch, as Optuna logs a line per trial: ``[  42 s] batch 5  24/64
    trials  best 51.3 GFLOPS  ETA 80 s  conv2d_add_relu (8 trials, 44.1)``."""
    task = report.task.split("/")[-1][:32]
    if report.phase == "confirm":  # the round after the search: the bests timed again, in turns
        return (f"[{report.elapsed_s:5.0f} s] confirming: {report.confirm_done}/{report.confirm_total} tasks' fastest "
                f"schedules timed again with the default  ({task})")
    done = f"{report.trials} trials" if by_time else f"{report.trials}/{trials} trials"
    best = f"best {report.best_gflops:.1f} GFLOPS" if report.best_gflops else "no valid run yet"
    eta = f"  ETA {report.eta_s:.0f} s" if report.eta_s is not None else ""  # a time budget's: its rest
    mine = f"{report.task_best_gflops:.1f}" if report.task_best_gflops else "-"
    failed = f", {report.failed} failed" if report.failed else ""
    return (f"[{report.elapsed_s:5.0f} s] batch {report.batch:<3} {done}  {best}{eta}  "
            f"{task} ({report.task_trials} trials, {mine}{failed})")


def _print_summary(summary) -> None:
    ended = " (time budget spent)" if summary.stopped == "time budget" else ""
    click.echo(f"{summary.trials} trials in {summary.seconds:.0f} s{ended}: {summary.measured} measured, "
               f"{summary.cached} already in the database (not measured again), {summary.failed} failed")
    search_s = max(0.0, summary.seconds - summary.startup_s - summary.confirm_s)
    click.echo(f"wall time from the command's start: start-up {summary.startup_s:.0f} s (TVM, the workload, the "
               f"workers), search {search_s:.0f} s, confirmation round {summary.confirm_s:.0f} s")
    for outcome, count in sorted(summary.failures.items(), key=lambda kv: -kv[1]):
        click.echo(f"  {count:>5} {outcome:<14} e.g. {summary.reasons.get(outcome, '')[:150]}")
    for task, why in summary.unverified.items():
        click.echo(f"  not verified: {task}: {why[:200]}")
    for task, gflops in sorted(summary.best.items()):
        click.echo(f"  {task:<48} best {gflops:8.1f} GFLOPS")
    if summary.confirmed:
        overturned = [c for c in summary.confirmed if c["overturned"]]
        click.echo(f"confirmation round ({summary.confirm_s:.0f} s): the fastest schedules of {len(summary.confirmed)} "
                   f"task(s) timed again in turns, with the default; the search's first lost for {len(overturned)}"
                   + (" (an export applies the confirmed first):" if overturned else ""))
        for c in overturned:
            click.echo(f"  {c['task']:<48} {c['before_source']} {c['before_s'] * 1e3:.3f} ms in the search -> "
                       f"{c['after_source']} {c['after_s'] * 1e3:.3f} ms (cold, in turns)")
        for line in gain_lines(summary.confirmed):
            click.echo(line)
    if summary.unconfirmed:
        why = next(iter(summary.unconfirmed.values()))
        click.echo(f"{len(summary.unconfirmed)} task(s) not confirmed ({why}): the same command again confirms "
                   f"them, and an export uses their search timings meanwhile")


def gain_lines(confirmed: list[dict], top: int = 12) -> list[str]:
    """Per task, what the search gained, as the confirmation round timed it: the default and the
    chosen schedule each alone, caches flushed before every run, in turns, times the calls per run;
    biggest gain first. An estimate of the gain in the model, not a measurement there: in a model
    the last-level cache still holds part of a kernel's weights, and a default that reads them
    from it runs faster than cold, so a gain estimated cold may not show in the model (see
    docs/notes/measurements.md). ``--check-in-model`` measures in place."""
    timed = [c for c in confirmed if c.get("default_s")]
    if not timed:
        return []
    timed.sort(key=lambda c: (-(c["gain_s"] or 0.0), -c["default_s"] * c["calls"]))
    total = sum(c["gain_s"] or 0.0 for c in timed)
    lines = [f"per task, timed alone with the caches flushed (default and chosen in turns; x calls per run): "
             f"{total * 1e3:.3f} ms per run in all, an estimate (in the model the cache keeps part of the weights: "
             f"--check-in-model measures in place)",
             f"  {'task':<40} {'calls':>5} {'default ms':>10} {'chosen ms':>10} {'gain ms':>8}  chosen from"]
    for c in timed[:top]:
        chosen = c["after_origin"] or c["after_source"]
        lines.append(f"  {c['task'][:40]:<40} {c['calls']:>5} {c['default_s'] * 1e3:>10.3f} {c['after_s'] * 1e3:>10.3f} "
                     f"{(c['gain_s'] or 0.0) * 1e3:>8.3f}  {chosen}")
    if len(timed) > top:
        lines.append(f"  ... {len(timed) - top} more task(s), each gaining less")
    return lines


@click.group(invoke_without_command=True)
@click.option("--db", "db_path", default=None, envvar="SCHEDX_DB", type=DbPath(),
              help="The SQLite database.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@fail_cleanly
def jobs(ctx: click.Context, db_path: str | None, as_json: bool) -> None:
    """List search jobs (running, done, stopped, failed) with their progress."""
    ctx.obj = {**(ctx.obj or {}), "db_path": db_path}
    if ctx.invoked_subcommand is not None:
        return
    from explorer.measure.lock import lock_status
    from search.jobs import refresh

    found = refresh(_db(db_path))
    store_path = _db(db_path).path
    machine = lock_status()
    now = {j.id: _lock_state(j, machine, store_path) for j in found}
    if as_json:
        echo_json([{**j.to_dict(), "measuring": now[j.id]} for j in found])
        return
    if not found:
        click.echo("no jobs yet: schedx tune WORKLOAD [--background]")
    else:
        from search.job_spec import JobProgress, JobSpec

        click.echo(f"{'id':>4}  {'status':<8} {'trials':>11}  {'best GFLOPS':>11}  {'failed':>6}  workload")
        for j in found:
            p, spec = JobProgress.from_dict(j.progress), JobSpec.from_dict(j.params)
            best = "-" if p.best_gflops is None else f"{p.best_gflops:.1f}"
            state = f"  [{now[j.id]}]" if now[j.id] else ""
            if j.status == "running" and p.phase == "confirm":
                state += f"  [confirming {p.confirm_done}/{p.confirm_total} tasks]"
            click.echo(f"{j.id:>4}  {j.status:<8} {_budget(spec.params, p.trials, p.total)}"
                       f"  {best:>11}  "
                       f"{p.failed:>6}  {spec.workload} ({spec.target}{_at(spec.precision)}){state}"
                       + (f"  ({j.error[:80]})" if j.error else ""))
    _print_lock(machine, store_path)


def _at(precision: str) -> str:
    return "" if precision == "fp32" else f", {precision}"


def _budget(params, done: int, total: int) -> str:
    """A job's trials against its budget, 11 wide: ``   12/64   ``, or ``   12/5 min``."""
    return f"{done:>5}/{params.limit(total):<5}"


def _job_of(entry: dict, store_path) -> str:
    """``job 2`` for a lock entry of a job of this database; ``job 2 of /other.db`` for another's
    (job ids restart at 1 in every database); "" for a process that is no job."""
    if not entry.get("job"):
        return ""
    db = entry.get("db")
    same = not db or _same_file(db, store_path)
    return f"job {entry['job']}" + ("" if same else f" of {db}")


def _same_file(a, b) -> bool:
    from pathlib import Path

    try:
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    except (OSError, ValueError):
        return str(a) == str(b)


def _lock_state(job, machine: dict, store_path) -> str:
    """What a running job is doing with the machine's measuring lock: '' (neither), 'measuring',
    or 'waiting Ns for pid P'."""
    import time

    if job.status != "running" or not job.pid:
        return ""
    holder = machine["holder"]
    if holder and holder.get("pid") == job.pid:
        return "measuring"
    for w in machine["waiting"]:
        if w.get("pid") == job.pid:
            held = _job_of(holder, store_path) if holder else ""
            by = (f" for pid {holder['pid']}" + (f" ({held})" if held else "")) if holder else ""
            return f"waiting {time.time() - w.get('since', time.time()):.0f}s to measure{by}"
    return ""


def _print_lock(machine: dict, store_path) -> None:
    """Who times kernels on this machine now, and who waits (one measurement at a time)."""
    import time

    def who(entry: dict) -> str:
        job = _job_of(entry, store_path)
        return (f"pid {entry['pid']} ({job + ', ' if job else ''}{entry.get('what') or 'schedx measure'}) for "
                f"{time.time() - entry['since']:.0f}s")

    if machine["holder"]:
        click.echo(f"measuring on this machine: {who(machine['holder'])}")
    for w in machine["waiting"]:
        click.echo(f"waiting to measure: {who(w)}")


@jobs.command("stop")
@click.argument("job_id", type=Count(1, 2**62))
@click.pass_context
@fail_cleanly
def stop(ctx: click.Context, job_id: int) -> None:
    """Stop a running job; what it measured so far stays in the database."""
    from search.jobs import stop_job

    job = stop_job(_db(ctx.obj.get("db_path")), job_id)
    click.echo(f"job {job.id}: {job.status}")
