"""CLI commands about model files: ``schedx quantize``."""

from __future__ import annotations

import sys
from pathlib import Path

import click


from app.cli_common import echo_json, fail_cleanly
from app.cli_types import FilePath
from explorer.precision import DEFAULT_SAMPLES


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def _default_output(model: str) -> Path:
    stem = Path(model).stem if model.lower().endswith(".onnx") else model.removeprefix("zoo:").replace(":", "_")
    return Path(f"{stem}.int8.onnx")


@click.command()
@click.argument("model")
@click.option("--calibrate", default=DEFAULT_SAMPLES, show_default=True, type=click.IntRange(1, 100000),
              help="Calibration samples (random ones unless --data gives real ones).")
@click.option("-o", "--output", type=FilePath(dir_okay=False, path_type=Path), default=None,
              help="Where to write the QDQ model (default: MODEL.int8.onnx in this folder).")
@click.option("--shapes", default=None, help="Input shapes for symbolic dims, e.g. 'input:1x3x224x224' or 'batch=1'.")
@click.option("--data", "data_file", type=FilePath(exists=True, dir_okay=False, path_type=Path), default=None,
              help=".npz with one array per input name, [N, *shape]: the first --calibrate samples calibrate, "
                   "the rest measure accuracy.")
@click.option("--eval", "eval_samples", default=8, show_default=True, type=click.IntRange(1, 10000),
              help="Held-out samples the accuracy is measured on.")
@click.option("--activations", type=click.Choice(["uint8", "int8"]), default="uint8", show_default=True,
              help="Type of quantized activations (weights are int8).")
@click.option("--per-tensor", is_flag=True, help="One scale per weight tensor instead of one per output channel.")
@click.option("--no-preprocess", is_flag=True, help="Skip ONNX Runtime's pre-processing (BatchNorm folding, shapes).")
@click.option("--threads", default=None, type=click.IntRange(1, 1024), help="ONNX Runtime threads (default: usable cores).")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the random inputs.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@fail_cleanly
def quantize(model: str, calibrate: int, output: Path | None, shapes: str | None, data_file: Path | None,
             eval_samples: int, activations: str, per_tensor: bool, no_preprocess: bool, threads: int | None, seed: int,
             as_json: bool) -> None:
    """Make an int8 QDQ model from the float MODEL with ONNX Runtime's quantizer, and compare them.

    MODEL is a path to an .onnx file or a zoo name (mobilenet_v2). Reports size, ONNX Runtime
    latency and the accuracy lost on held-out inputs, side by side; the QDQ model imports into
    TVM like any other (schedx passes OUT.onnx)."""

    from explorer.models.int8_precision import read_samples
    from explorer.models import model_onnx
    from explorer.models.quantize import quantize_model

    proto, label = model_onnx(model)
    data = read_samples(data_file) if data_file is not None else None
    output = output or _default_output(model)
    with click.progressbar(length=3, label=f"quantizing {label}", file=sys.stderr) as bar:
        _, report = quantize_model(proto, shapes=shapes, calibrate=calibrate, data=data,
                                   data_label=str(data_file) if data_file else "random", eval_samples=eval_samples,
                                   per_channel=not per_tensor, activations=activations, preprocess=not no_preprocess, seed=seed,
                                   threads=threads, name=label, output=output, progress=lambda _m: bar.update(1))
    if as_json:
        echo_json(report.to_dict())
        return
    r = report
    click.echo(f"{r.model}: int8 QDQ written to {r.output} ({r.quantized_nodes} tensors quantized, "
               f"{'per-channel' if r.per_channel else 'per-tensor'} int8 weights, {r.activations} activations, calibrated on {r.calibration_samples} "
               f"{r.calibration_data} sample(s))")
    click.echo(f"{'':<22} {'float':>12} {'int8':>12} {'ratio':>8}")
    click.echo(f"{'size':<22} {_human(r.float_bytes):>12} {_human(r.int8_bytes):>12} {r.size_ratio:>7.2f}x")
    click.echo(f"{f'ONNX Runtime ({r.threads} thr)':<22} {r.float_ms:>10.3f}ms {r.int8_ms:>10.3f}ms {r.speedup:>7.2f}x")
    top1 = f", top-1 agrees on {r.top1_agreement:.0%}" if r.top1_agreement is not None else ""
    click.echo(f"accuracy lost on {r.eval_samples} held-out input(s): max abs {r.max_abs_error:.4g}, "
               f"max relative {r.max_rel_error:.2%}, mean abs {r.mean_abs_error:.3g}{top1}")
    for note in r.notes:
        click.echo(f"note: {note}")


__all__ = ["quantize"]

