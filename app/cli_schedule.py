"""CLI commands of the schedule editor: ``schedx kernels`` and ``schedx measure``."""

from __future__ import annotations

from pathlib import Path

import click


from app.cli_common import echo_json, fail_cleanly, target_option
from app.cli_types import DbPath, FilePath


@click.command()
@click.option("--model", default=None, help="List the fused kernels of this model (after the tuning pipeline).")
@click.option("--shapes", default=None, help="Input shapes of --model for symbolic dims, e.g. 'input:1x3x224x224' or 'batch=1'.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@fail_cleanly
def kernels(model: str | None, shapes: str | None, as_json: bool) -> None:
    """List the built-in kernels (or a model's fused kernels) with shapes and FLOPs."""
    from explorer.kernels import BUILTINS, builtin_kernel

    if model:
        from explorer.workload import model_kernels
        from explorer.models import load_model

        found = [k.info for k in model_kernels(load_model(model, shapes))]
    else:
        if shapes:
            raise click.UsageError("--shapes applies to --model")
        found = [builtin_kernel(name).info for name in BUILTINS]
    if as_json:
        echo_json([k.to_dict() for k in found])
        return
    click.echo(f"{'kernel spec':<58} {'GFLOP':>8} {'AI':>7}  buffers")
    for k in found:
        buffers = ", ".join(f"{b.name}{'*' if b.is_output else ''} {'x'.join(map(str, b.shape))}" for b in k.buffers)
        click.echo(f"{k.spec:<58} {k.flops / 1e9:>8.3f} {k.arithmetic_intensity:>7.1f}  {buffers[:70]}")
    click.echo("(* = output; AI = FLOPs per byte of compulsory traffic; override shapes: matmul:M=1024,N=1024,K=1024)")


@click.command()
@click.argument("kernel")
@click.option("--steps", "steps_file", type=FilePath(dir_okay=False, path_type=Path), default=None,
              help="JSON list of schedule steps to apply first (see assets/steps/).")
@click.option("--repeat", default=5, show_default=True, type=click.IntRange(1, 100), help="Timed repeats.")
@click.option("--timeout", default=300, show_default=True, type=click.IntRange(1, 24 * 3600),
              help="Seconds before a build and measurement counts as hung.")
@target_option(scope="here")
@click.option("--db", "db_path", default=None, type=DbPath(),
              help="Also save the measurement to this leaderboard database (as the Schedule page does).")
@click.option("--no-isolate", is_flag=True, help="Measure in this process instead of a child process.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@fail_cleanly
def measure(kernel: str, steps_file: Path | None, repeat: int, timeout: int, target_spec: str, db_path: str | None,
            no_isolate: bool, as_json: bool) -> None:
    """Build, verify and time KERNEL (a spec such as matmul:M=512) with an optional steps file.

    Prints latency, GFLOPS and % of this machine's measured peak; exits 1 if the kernel fails
    to build, run or verify."""
    from explorer.workload import load_kernel
    from explorer.measure import measure as run_measure
    from explorer.schedule.session import ScheduleSession
    from explorer.schedule.steps import load_steps
    from explorer.target import parse_target

    target = parse_target(target_spec)
    target.require_runnable("measure")
    k = load_kernel(kernel)
    session = ScheduleSession(k.func)
    if steps_file is not None:
        session.apply_all(load_steps(steps_file))
    with click.progressbar(length=1, label=f"measuring {k.info.spec}", file=click.get_text_stream("stderr")) as bar:
        result = run_measure(k, session.mod, repeat=repeat, isolate=not no_isolate, target=target, timeout=timeout)
        bar.update(1)
    record_id = _save(db_path, k, session, result) if db_path else None
    if as_json:
        echo_json({"kernel": k.info.to_dict(), "target": target.to_dict(), "steps": [s.to_dict() for s in session.steps],
                   "result": result.to_dict(), "record": record_id})
    else:
        click.echo(f"{k.info.spec}  ({len(session.steps)} steps, {k.info.flops / 1e9:.3f} GFLOP) on {target.label}")
        if result.ok:
            click.echo(f"  median {result.median_s * 1e3:.3f} ms  mean {result.mean_s * 1e3:.3f} ms  "
                       f"std {result.std_s * 1e3:.3f} ms  ({result.number} runs x {len(result.latencies)} repeats)")
            unit, fam = ("GOPS" if result.peak_family == "int8" else "GFLOPS"), result.peak_family
            peak = "the measured peak" if fam == "fp32" else f"the measured {fam} peak"  # its instruction family's
            share = f"{result.percent_of_peak:.1f}% of {peak} {result.peak_gflops:.0f} {unit}" \
                if result.percent_of_peak is not None else (f"% of {peak} left blank (below)" if result.peak_gflops
                                                            else f"no {fam} peak measured on this machine")
            click.echo(f"  {result.gflops:.1f} {unit} = {share}; verified (max error {result.max_rel_error:.1e})")
            if result.peak_note:
                click.echo(f"  {result.peak_note}")
        else:
            click.echo(f"  {result.status}: {result.error}")
        if record_id is not None:
            click.echo(f"  saved as record {record_id} in {db_path}")
    if not result.ok:
        raise SystemExit(1)


def _save(db_path: str, kernel, session, result) -> int:
    """The measurement as a manual record (the unscheduled kernel's as a default one)."""
    from explorer.target.environment import hardware_fingerprint
    from explorer.ir.plain import to_plain
    from search.records import manual_record
    from store import Store

    steps = [s.to_dict() for s in session.steps]
    trace = to_plain(session.schedule.trace.as_json()) if steps else None
    workload, record = manual_record(kernel, steps, trace, result, hardware=hardware_fingerprint(),
                                     source="manual")
    with Store(db_path) as store:
        store.add_workload(workload, replace=False)
        return store.add_record(record)


__all__ = ["kernels", "measure"]
