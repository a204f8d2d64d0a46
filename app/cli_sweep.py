"""``schedx sweep``: latency and throughput against batch size, beside ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import click


from app.cli_common import echo_json, fail_cleanly, progress_bar, recheck_option, target_option
from app.cli_types import DbPath, FilePath


def _batches(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.ClickException(f"--batch takes sizes separated by commas, e.g. 1,2,4,8; got {text!r}") from None
    if not values or any(v < 1 or v > 4096 for v in values) or len(set(values)) != len(values):
        raise click.ClickException(f"--batch takes distinct sizes from 1 to 4096, e.g. 1,2,4,8; got {text!r}")
    return sorted(values)


@click.command()
@click.argument("model")
@click.option("--batch", "batch_text", default="1,2,4,8", show_default=True, help="Batch sizes to time.")
@target_option(scope="here")
@click.option("--trials", default=0, show_default=True, type=click.IntRange(0, 10**6),
              help="Tune each shape first with this many trials (0: reuse the records there are).")
@click.option("--db", default=None, type=DbPath(),
              help="schedx database whose records apply (and where tuning goes).")
@click.option("--check-in-model/--no-check-in-model", default=None,
              help="At each batch size, apply the in-model decision, as `schedx export` ships the records "
                   "(default: on when records apply): the one the database keeps, else one taken now.")
@recheck_option()
@click.option("--threads", type=click.IntRange(1, 1024), default=None, help="CPU threads (default: the usable cores).")
@click.option("--runs", default=20, show_default=True, type=click.IntRange(1, 10000), help="Timed runs per point.")
@click.option("--shapes", default=None, help="The model's symbolic dimensions other than the batch, e.g. "
                                            "'height=224,width=224' (a dynamic batch needs nothing).")
@click.option("--out", "out_file", type=FilePath(dir_okay=False, path_type=Path), default=None,
              help="Also write the chart: .html (interactive) or .png.")
@click.option("--json", "as_json", is_flag=True, help="Print the points as JSON.")
@fail_cleanly
def sweep(model: str, batch_text: str, target_spec: str, trials: int, db: str | None, check_in_model: bool | None,
          recheck: bool, threads: int | None, runs: int, shapes: str | None, out_file: Path | None,
          as_json: bool) -> None:
    """Time MODEL at several batch sizes (every input's first dimension), each with the records
    tuned at that shape that `schedx export` would ship (records only apply to the shapes they
    were tuned at), beside ONNX Runtime: latency and throughput, and the batch where each peaks."""
    from export.entry import SweepSpec, run_sweep

    spec = SweepSpec(workload=model, batches=tuple(_batches(batch_text)), target=target_spec, db=db, trials=trials,
                     threads=threads, runs=runs, shapes=shapes, check_in_model=check_in_model, recheck=recheck)
    with progress_bar(f"sweeping {model}") as progress:
        result = run_sweep(spec, progress=progress)
    if out_file is not None:
        _write_chart(result, out_file)
    if as_json:
        echo_json(result.to_dict())
        return
    click.echo(f"{result.workload} on {result.target}, {result.threads} thread(s)")
    click.echo(f"{'batch':>5} {'TVM ms':>9} {'TVM /s':>9} {'ORT ms':>9} {'ORT /s':>9} {'ratio':>6}  records")
    for p in result.points:
        def ms(v):
            return "-" if v is None else f"{v * 1e3:.2f}"

        def per_s(v):
            return "-" if v is None else f"{v:.1f}"

        ratio = f"{p.tvm_s / p.ort_s:.2f}x" if p.tvm_s and p.ort_s else "-"
        click.echo(f"{p.batch:>5} {ms(p.tvm_s):>9} {per_s(p.tvm_throughput):>9} {ms(p.ort_s):>9} "
                   f"{per_s(p.ort_throughput):>9} {ratio:>6}  {p.from_records}/{p.tasks}")
    for note in result.notes:
        click.echo(f"note: {note}")
    if out_file is not None:
        click.echo(f"chart: {out_file}")


def _write_chart(result, path: Path) -> None:
    from app.charts import sweep_figure

    fig = sweep_figure(result)
    path = path.expanduser()
    if path.suffix.lower() == ".png":
        try:
            fig.write_image(str(path))
        except Exception as err:  # noqa: BLE001 - PNG needs plotly's image export (kaleido)
            html = path.with_suffix(".html")
            fig.write_html(str(html), include_plotlyjs=True)
            raise click.ClickException(f"could not write a PNG ({str(err).splitlines()[0][:120]}); wrote {html} "
                                       f"instead") from None
    else:
        fig.write_html(str(path), include_plotlyjs=True)
