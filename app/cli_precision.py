"""The int8 calibration options ``schedx export``, ``bench``, ``profile`` and ``tune`` take beside
``--precision``: the same names and defaults as ``schedx quantize``'s (``--calibrate``, ``--data``),
read into one :class:`explorer.precision.Calibration`."""

from __future__ import annotations

from pathlib import Path

import click

from app.cli_types import FilePath
from explorer.precision import DEFAULT_SAMPLES, Calibration

INT8_HELP = ("int8: the model quantized by `schedx quantize`'s flow (ONNX Runtime's quantizer, QDQ, calibrated "
             "with --calibrate/--data; cached, so the next command reuses it) and built as that QDQ model is "
             "(int8 kernels, AMX-INT8 where the CPU has it)")


def calibration_options(fn):
    """``--calibrate N`` and ``--data FILE.npz`` (int8's calibration, as ``schedx quantize`` takes them)."""
    fn = click.option("--data", "data_file", type=FilePath(exists=True, dir_okay=False, path_type=Path), default=None,
                      help="--precision int8: an .npz with one array per input name, [N, *shape]: the first "
                           "--calibrate samples calibrate, the rest measure the accuracy int8 loses.")(fn)
    return click.option("--calibrate", default=DEFAULT_SAMPLES, show_default=True, type=click.IntRange(1, 100000),
                        help="--precision int8: calibration samples (random ones unless --data gives real "
                             "ones).")(fn)


def calibration_of(precision: str, calibrate: int, data_file: Path | None) -> Calibration | None:
    """The calibration of an int8 command (None at another precision; --calibrate or --data given
    there is refused, not ignored)."""
    if precision == "int8":
        return Calibration(samples=calibrate, data=str(data_file) if data_file is not None else None)
    given = click.get_current_context().get_parameter_source("calibrate") == click.core.ParameterSource.COMMANDLINE
    if given or data_file is not None:
        raise click.UsageError(f"--calibrate and --data calibrate an int8 build: add --precision int8 (this command "
                               f"builds at {precision})")
    return None


__all__ = ["INT8_HELP", "calibration_of", "calibration_options"]
