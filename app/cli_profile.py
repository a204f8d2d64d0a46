"""``schedx profile``: time per fused kernel of a built model, beside ONNX Runtime's per-node time."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from app.cli_common import echo_json, fail_cleanly, progress_bar, recheck_option, target_option
from app.cli_types import DbPath
from app.cli_precision import INT8_HELP, calibration_of, calibration_options
from explorer.precision import PRECISIONS


@click.command()
@click.argument("model")
@target_option(scope="here")
@click.option("--shapes", default=None, help="Input shapes for symbolic dims, e.g. 'input:1x3x224x224'.")
@click.option("--db", default=None, type=DbPath(),
              help="schedx database with records (default: the default database, if any).")
@click.option("--no-db", is_flag=True, help="No records: profile the default schedules.")
@click.option("--check-in-model/--no-check-in-model", default=None,
              help="Apply the in-model decision, as `schedx export` ships the records (default: on when records "
                   "apply): the one the database keeps for these records and this machine, else one taken now "
                   "(about a minute on ResNet-18).")
@recheck_option()
@click.option("--runs", default=10, show_default=True, type=click.IntRange(1, 1000), help="Profiled runs.")
@click.option("--threads", type=click.IntRange(1, 1024), default=None, help="CPU threads (default: the usable cores).")
@click.option("--top", "top_k", default=10, show_default=True, type=click.IntRange(1, 1000),
              help="Kernels to list (and to suggest tuning).")
@click.option("--precision", type=click.Choice(PRECISIONS), default="fp32", show_default=True,
              help="bf16: profile the model as `schedx export --precision bf16` builds it (convolutions and weight "
                   "products in bf16, fp32 accumulation; needs AVX512-BF16 or AMX-BF16). "
                   f"{INT8_HELP}; ONNX Runtime beside it runs the int8 model.")
@calibration_options
@click.option("--json", "as_json", is_flag=True, help="Print the profile as JSON.")
@fail_cleanly
def profile(model: str, target_spec: str, shapes: str | None, db: str | None, no_db: bool,
            check_in_model: bool | None, recheck: bool, runs: int, threads: int | None, top_k: int,
            precision: str, calibrate: int, data_file: Path | None, as_json: bool) -> None:
    """Build MODEL as `schedx export` would (the records it ships applied, defaults elsewhere),
    run it in a fresh process and time every kernel call: seconds per run, share, GFLOPS and % of
    this machine's measured peak, where each schedule came from; ONNX Runtime's slowest nodes
    beside it. Ends with the commands that tune the hottest kernels."""
    from export.entry import ProfileSpec, run_profile
    from export.profile import headroom_line

    spec = ProfileSpec(workload=model, target=target_spec, shapes=shapes, use_records=not no_db, db=db,
                       check_in_model=check_in_model, recheck=recheck, runs=runs, threads=threads,
                       precision=precision, calibration=calibration_of(precision, calibrate, data_file))
    with progress_bar(f"profiling {model}") as progress:
        profiled = run_profile(spec, progress=progress)
    result = profiled.profile
    # tasks with records (a search ran on them; where the default won, its record is the best):
    # "tune the hottest kernels that have no record" leaves them out
    searched = {c.task.name for c in profiled.shipped.choices if c.best is not None}
    if as_json:
        echo_json(result.to_dict())
        return
    ort = f", ONNX Runtime {result.ort_s * 1e3:.2f} ms ({result.end_to_end_s / result.ort_s:.2f}x)" \
        if result.ort_s else ""
    click.echo(f"{profiled.workload.name} on {result.target}: {result.end_to_end_s * 1e3:.2f} ms per run{ort}; kernels "
               f"{result.kernels_s * 1e3:.2f} ms, VM builtins {result.other_s * 1e3:.2f} ms")
    # each kernel reads against its instruction family's peak (bf16 and int8 units apart from fp32's FMAs)
    families = {k.family for k in result.kernels if k.ran}
    mixed = families != {"fp32"} and bool(families)
    click.echo(result.peaks_text() + ("; int8 rows count GOPS" if "int8" in families else ""))
    headroom = headroom_line(result)  # which peaks and memory tiers the rooflines read against
    if headroom:
        click.echo(headroom)
    prec = f"{'prec':<5}" if mixed else ""  # the family column, where the model mixes them
    click.echo(f"{'ms':>9} {'share':>6} {'calls':>5} {'GFLOPS':>8} {'%peak':>6} {'%roof':>6}  {prec}"
               f"{'schedule':<10} task")
    for k in result.top(top_k):
        c = k.cells(result.kernels_s)  # a kernel below the instrument's resolution: "< ms", "≥ GFLOPS"
        source = f"record {k.record_id}" if k.schedule == "record" else k.schedule
        click.echo(f"{c['ms']:>9} {c['share']:>6} {k.calls:>5} {c['GFLOPS']:>8} {c['% peak']:>6} "
                   f"{c['% roofline']:>6}  " + (f"{k.family:<5}" if mixed else "") + f"{source:<10} {k.task}")
    if result.ort:
        click.echo("ONNX Runtime's slowest nodes:")
        for n in result.ort[:min(top_k, 8)]:
            click.echo(f"{n.seconds * 1e3:9.3f} ms  {n.op_type:<14} {n.node}")
    # a bundle built again with every matmul in fp32: a bf16 search's records never reach its fp32 matmuls
    hot = suggested_kernels(result, searched | set(result.unreached))
    if result.unreached:
        funcs = sorted(t.rpartition("/")[2] for t in result.unreached)
        names = ", ".join(funcs[:4]) + (" and more" if len(funcs) > 4 else "")
        click.echo(f"this bundle was built again with every matmul in fp32: its fp32 matmul kernels ({names}) run "
                   "their default schedules (the records of a bf16 search do not reach them)")
    if hot:
        click.echo("tune the kernels with the most to gain that have no record:" if result.headroom_s else
                   "tune the hottest kernels that have no record:")
        for line in tune_lines(profiled, hot):
            click.echo(f"  {line}")
    for note in result.notes:
        click.echo(f"note: {note}")


def tune_lines(profiled, hot: list) -> list[str]:
    """One ``schedx tune`` line per command that searches the ``hot`` kernels, as a fallback warning names it
    (:func:`export.tune_command.tune_command`): a kernel of a float model by its function; a kernel that exists only
    in the model as rewritten (bf16, int8) through the model's own search, one line for all of them. Five minutes a
    kernel, and the kernels and their headroom in a comment."""
    from export.tune_command import tune_command

    by_command: dict[str, list] = {}
    for k in hot:
        by_command.setdefault(tune_command(profiled.workload, profiled.target, k.task), []).append(k)
    lines = []
    for command, kernels in by_command.items():
        gain = sum(k.headroom_s or 0.0 for k in kernels)
        funcs = [k.task.rpartition("/")[2] for k in kernels]
        by_kernel = shlex.split(command)[2].endswith(f"/{funcs[0]}")  # the command names the kernel itself
        names = "" if len(funcs) == 1 and by_kernel else ", ".join(funcs)  # (a model's search: which kernels)
        comment = names + (": " if names and gain else "") + (f"up to {gain * 1e3:.3g} ms to gain" if gain else "")
        lines.append(f"{command} --minutes {5 * len(kernels)}" + (f"  # {comment}" if comment else ""))
    return lines


def suggested_kernels(result, searched: set[str], count: int = 3) -> list:
    """The kernels worth a search: no record yet (nor in ``searched``) and not written whole for the target,
    those with the most headroom first (a kernel at its roofline has nothing to give, however hot); by time
    where the profile has no rooflines or no kernel any headroom."""
    # "written": a kernel schedx writes whole for the target (a recurrent layer's): nothing to search
    open_ = [k for k in result.kernels if k.schedule not in ("record", "written") and k.task not in searched]
    gaining = sorted((k for k in open_ if k.headroom_s > 0), key=lambda k: -k.headroom_s)
    return gaining[:count] if gaining else open_[:count]
