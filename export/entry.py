"""One export, as the command line and the Export page ask for it: records chosen from the
database (or the picks given), the in-model check when asked, the bundle built, written and
verified (:func:`export.flow.export_workload`), then signed. Front ends describe what they want
in an :class:`ExportSpec` and call :func:`run_export`; they only present the result."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from explorer.target import Target, parse_target
from explorer.workload import Workload, load_workload
from export.build import Progress
from export.flow import ExportReport, export_workload
from export.folders import check_destination
from export.schedules import TaskSchedule


@dataclass(frozen=True)
class ExportSpec:
    """What to export and how. ``workload``: a spec (``resnet18``, ``model.onnx``,
    ``matmul:M=256,N=256,K=256``) or a loaded :class:`explorer.workload.Workload`; ``target``: a
    spelling or a :class:`explorer.target.Target`. Records: ``schedules`` when the caller picked
    them (task name or key -> schedule), else the best per task from ``db`` (None: the default
    database, if any) measured on ``hardware``, or none with ``use_records=False``.
    ``check_in_model`` keeps a record only where it beats the default inside the model (None, the
    default: checked whenever records would be applied and the target runs here, so an export never
    ships a record that loses to the default in the model; False applies the records as chosen);
    ``sign_key`` signs the bundle (an ed25519 private key file); ``force`` writes the bundle into a
    non-empty folder that holds no bundle, beside its files (see :mod:`export.folders`);
    ``precision``: fp32 or bf16 (:mod:`explorer.precision`)."""

    workload: str | Workload
    out_dir: str | Path
    target: str | Target = "cpu"
    shapes: str | None = None
    use_records: bool = True
    db: str | None = None
    hardware: str | None = None
    schedules: Mapping[str, TaskSchedule] | None = None
    check_in_model: bool | None = None
    threads: int | None = None
    verify: bool = True
    layers: bool = True
    nvcc: bool = True
    sign_key: Path | None = None
    force: bool = False
    precision: str = "fp32"  # fp32 or bf16 (explorer.precision)


@dataclass(frozen=True)
class ExportResult:
    """The export's report (:class:`export.flow.ExportReport`: bundle, checks, verdict) and the
    signature file when the bundle was signed."""

    report: ExportReport
    signature: Path | None = None

    @property
    def ok(self) -> bool:
        return self.report.ok


def run_export(spec: ExportSpec, progress: Progress | None = None) -> ExportResult:
    """Export as ``spec`` says (see the module docstring). ``progress(stage, fraction)`` hears
    every stage, the in-model check's included. A key that cannot sign is refused before any
    work; the rooms' own errors (unknown workload or target, a database that cannot be read)
    raise with their messages."""
    say = progress or (lambda stage, frac: None)
    check_destination(Path(spec.out_dir).expanduser().resolve(), force=spec.force)  # before any work
    if spec.sign_key is not None:  # a key that cannot sign fails now, not after the export
        from export.signing import private_key_of

        private_key_of(spec.sign_key)
    target = parse_target(spec.target)
    workload = spec.workload if isinstance(spec.workload, Workload) else load_workload(spec.workload, spec.shapes)
    schedules, notes = _records(spec, workload, target)
    check = spec.check_in_model if spec.check_in_model is not None else target.runs_here
    if check and schedules:
        from export.in_model import checked_schedules

        say(f"timing {len(schedules)} record(s) inside the model against the default schedules", 0.0)
        schedules, dropped = checked_schedules(workload, target, schedules, threads=spec.threads)
        notes += dropped
    report = export_workload(workload, target, spec.out_dir, schedules=schedules, verify=spec.verify,
                             layers=spec.layers, threads=spec.threads, nvcc=spec.nvcc, progress=say, notes=notes,
                             force=spec.force, precision=spec.precision)
    signature = None
    if spec.sign_key is not None:
        from export.signing import sign_bundle

        signature = sign_bundle(report.folder, spec.sign_key)
    return ExportResult(report, signature)


def _records(spec: ExportSpec, workload: Workload, target: Target) -> tuple[dict[str, TaskSchedule], list[str]]:
    """The schedules to apply and the warnings choosing them gave."""
    if spec.schedules is not None:
        return dict(spec.schedules), []
    from export.choose import shape_warnings, workload_schedules

    schedules, choices = workload_schedules(spec.db, workload, target, use_records=spec.use_records,
                                            hardware=spec.hardware)
    return schedules, shape_warnings(choices)


__all__ = ["ExportResult", "ExportSpec", "run_export"]
