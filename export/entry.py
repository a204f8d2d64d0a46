"""The front ends' entries: what the command line and the pages run, one spec -> run -> result
per command. Each says what it wants in a spec and calls its run; the front end only presents the
result. Every one of them ships the schedules :func:`export.shipping.shipped_schedules` answers
(records chosen, the in-model decision kept in the database applied, defaults elsewhere):

- :func:`run_export` (:class:`ExportSpec`): the bundle built, written and verified
  (:func:`export.flow.export_workload`), then signed;
- :func:`run_bench` (:class:`BenchSpec`): the build that ships beside the default build and the
  other engines, in alternated rounds (:func:`export.bench.bench_workload`);
- :func:`run_profile` (:class:`ProfileSpec`): time per kernel of the build that ships
  (:func:`export.profile.profile_workload`);
- :func:`run_sweep` (:class:`SweepSpec`): the build that ships at each batch size
  (:func:`export.sweep.sweep`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from explorer.precision import Calibration
from explorer.target import Target, parse_target
from explorer.workload import Workload, load_workload
from export.build import Progress, as_built
from export.flow import ExportReport, export_workload
from export.folders import check_destination
from export.schedules import TaskSchedule
from export.shipping import ShipSpec, Shipped, shipped_schedules

if TYPE_CHECKING:
    from export.bench import BenchReport
    from export.profile import Profile
    from export.sweep import Sweep


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
    the decision ``db`` keeps for these records is reused (:mod:`export.shipping`), ``recheck`` takes it again;
    ``sign_key`` signs the bundle (an ed25519 private key file); ``force`` writes the bundle into a
    non-empty folder that holds no bundle, beside its files (see :mod:`export.folders`);
    ``precision``: fp32, bf16 or int8 (:mod:`explorer.precision`; int8 calibrates as ``calibration``
    says, :class:`explorer.precision.Calibration`, default 16 random samples)."""

    workload: str | Workload
    out_dir: str | Path
    target: str | Target = "cpu"
    shapes: str | None = None
    use_records: bool = True
    db: str | None = None
    hardware: str | None = None
    schedules: Mapping[str, TaskSchedule] | None = None
    check_in_model: bool | None = None
    recheck: bool = False
    threads: int | None = None
    verify: bool = True
    layers: bool = True
    nvcc: bool = True
    sign_key: Path | None = None
    force: bool = False
    precision: str = "fp32"  # fp32, bf16 or int8 (explorer.precision)
    calibration: Calibration | None = None  # int8's


@dataclass(frozen=True)
class ExportResult:
    """The export's report (:class:`export.flow.ExportReport`: bundle, checks, verdict), the
    signature file when the bundle was signed, and which schedules shipped and why."""

    report: ExportReport
    signature: Path | None = None
    shipped: Shipped | None = None

    @property
    def ok(self) -> bool:
        return self.report.ok


def _loaded(workload: str | Workload, shapes: str | None) -> Workload:
    return workload if isinstance(workload, Workload) else load_workload(workload, shapes)


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
    workload = as_built(_loaded(spec.workload, spec.shapes), target, spec.precision, spec.calibration)[0]  # once
    shipped = shipped_schedules(ShipSpec(workload, target, db=spec.db, use_records=spec.use_records,
                                         hardware=spec.hardware, schedules=spec.schedules, precision=spec.precision,
                                         check_in_model=spec.check_in_model, recheck=spec.recheck,
                                         threads=spec.threads), say)
    report = export_workload(workload, target, spec.out_dir, schedules=shipped.schedules, verify=spec.verify,
                             layers=spec.layers, threads=spec.threads, nvcc=spec.nvcc, progress=say,
                             notes=shipped.notes, force=spec.force, precision=spec.precision)
    signature = None
    if spec.sign_key is not None:
        from export.signing import sign_bundle

        signature = sign_bundle(report.folder, spec.sign_key)
    return ExportResult(report, signature, shipped)


def _runnable(spec: BenchSpec | ProfileSpec, action: str) -> tuple[Target, Workload]:
    """The spec's target (refused unless it runs here, for ``action``) and its workload, loaded."""
    target = parse_target(spec.target)
    target.require_runnable(action)
    return target, _loaded(spec.workload, spec.shapes)


def _ship_spec(spec: BenchSpec | ProfileSpec, workload: Workload, target: Target) -> ShipSpec:
    """The question a bench or a profile asks the chooser (fp32: a bench's bf16 row is a default build)."""
    return ShipSpec(workload, target, db=spec.db, use_records=spec.use_records, check_in_model=spec.check_in_model,
                    recheck=spec.recheck, threads=spec.threads)


@dataclass(frozen=True)
class BenchSpec:
    """What to benchmark on this machine: ``workload`` (a spec or a loaded workload) built for
    ``target`` (it must run here), with the schedules that ship (records from ``db`` unless
    ``use_records`` is off; ``check_in_model`` and ``recheck`` as :class:`ExportSpec`'s, on by
    default), beside the default build and the other engines, ``runs`` runs and ``budget_s``
    seconds per contender in ``rounds`` alternated rounds. ``precision="bf16"`` or ``"int8"`` adds
    the default build at that precision (int8: and ONNX Runtime running the int8 model; the tuned
    build stays fp32: its records, and their decision, are fp32's)."""

    workload: str | Workload
    target: str | Target = "cpu"
    shapes: str | None = None
    use_records: bool = True
    db: str | None = None
    check_in_model: bool = True
    recheck: bool = False
    threads: int | None = None
    runs: int = 50
    budget_s: float = 20.0
    rounds: int = 3
    precision: str = "fp32"
    busy: int = 0  # time beside this many busy processes the benchmark starts (export.busy_load)
    calibration: Calibration | None = None  # int8's


@dataclass(frozen=True)
class BenchResult:
    """The rows side by side (:class:`export.bench.BenchReport`; its notes say which in-model
    decision the tuned row ships) and which schedules shipped."""

    report: BenchReport
    shipped: Shipped


def run_bench(spec: BenchSpec, progress: Progress | None = None) -> BenchResult:
    """Benchmark as ``spec`` says (see the module docstring)."""
    from export.bench import bench_workload

    say = progress or (lambda stage, frac: None)
    target, workload = _runnable(spec, "benchmark")
    # the precision's build made once, refused before any record is timed in the model
    at_precision = as_built(workload, target, spec.precision, spec.calibration)[0] if spec.precision != "fp32" else None
    shipped = shipped_schedules(_ship_spec(spec, workload, target), say)
    report = bench_workload(workload, schedules=shipped.schedules, threads=spec.threads, runs=spec.runs,
                            budget_s=spec.budget_s, progress=say, target=target, no_schedules_why=shipped.why_none,
                            rounds=spec.rounds, precision=spec.precision, busy=spec.busy,
                            calibration=spec.calibration, at_precision=at_precision)
    if shipped.decision is not None:
        report.notes.extend([shipped.summary(), *shipped.dropped])
    return BenchResult(report, shipped)


@dataclass(frozen=True)
class ProfileSpec:
    """What to profile: ``workload`` built for ``target`` (it must run here) with the schedules
    that ship (records from ``db`` unless ``use_records`` is off; ``check_in_model`` and
    ``recheck`` as :class:`ExportSpec`'s), timed kernel by kernel over ``runs`` runs."""

    workload: str | Workload
    target: str | Target = "cpu"
    shapes: str | None = None
    use_records: bool = True
    db: str | None = None
    check_in_model: bool | None = None
    recheck: bool = False
    runs: int = 10
    threads: int | None = None
    precision: str = "fp32"  # fp32, bf16 or int8 (explorer.precision), built as `schedx export --precision` builds it
    calibration: Calibration | None = None  # int8's


@dataclass(frozen=True)
class ProfileResult:
    """The profile (:class:`export.profile.Profile`; its notes say which in-model decision was
    applied), which schedules shipped (its choices: the tasks that have records), and the
    workload profiled (as built) and its target."""

    profile: Profile
    shipped: Shipped
    workload: Workload
    target: Target


def run_profile(spec: ProfileSpec, progress: Progress | None = None) -> ProfileResult:
    """Profile as ``spec`` says, with this machine's measured peaks (the FLOP peak and the copy
    bandwidth, and the caches' bandwidth) for each kernel's roofline."""
    from explorer.measure.cache_peak import cache_peak
    from explorer.measure.calibration import calibration
    from export.profile import profile_workload

    say = progress or (lambda stage, frac: None)
    target, workload = _runnable(spec, "profile")
    # made once, refused before the peaks are measured (seconds); the chooser and the build take it as it is
    workload = as_built(workload, target, spec.precision, spec.calibration)[0]
    shipped = shipped_schedules(replace(_ship_spec(spec, workload, target), precision=spec.precision), say)
    say("measuring this machine's peaks", 0.3)
    peaks = calibration()
    caches = cache_peak()  # the roofline of kernels whose bytes fit in the L2 caches or the L3
    say(f"profiling {workload.name}", 0.5)
    profile = profile_workload(workload, target, schedules=shipped.schedules, runs=spec.runs, threads=spec.threads,
                               peak_gflops=peaks.peak_gflops, memory=caches.memory_roof(peaks.peak_gbps),
                               precision=spec.precision, family_peaks=peaks.families)
    if shipped.decision is not None:
        profile = replace(profile, notes=(shipped.summary(), *shipped.dropped, *profile.notes))
    say("done", 1.0)
    return ProfileResult(profile, shipped, workload, target)


@dataclass(frozen=True)
class SweepSpec:
    """A batch sweep: ``workload`` (a model spec) at each of ``batches``, each built with the
    schedules that ship at that shape (records from ``db``, tuned first with ``trials`` > 0;
    ``check_in_model`` and ``recheck`` as :class:`ExportSpec`'s), beside ONNX Runtime;
    ``shapes``: the model's symbolic dimensions other than the batch."""

    workload: str
    batches: tuple[int, ...]
    target: str | Target = "cpu"
    db: str | None = None
    trials: int = 0
    threads: int | None = None
    runs: int = 20
    budget_s: float = 10.0
    shapes: str | None = None
    check_in_model: bool | None = None
    recheck: bool = False


def run_sweep(spec: SweepSpec, progress: Progress | None = None) -> Sweep:
    """Sweep as ``spec`` says: the :class:`export.sweep.Sweep` (its notes say which in-model
    decision each batch size applied)."""
    from export.sweep import sweep

    return sweep(spec.workload, list(spec.batches), target=spec.target, db=spec.db, trials=spec.trials,
                 threads=spec.threads, runs=spec.runs, budget_s=spec.budget_s, shapes=spec.shapes,
                 check_in_model=spec.check_in_model, recheck=spec.recheck, progress=progress)


__all__ = ["BenchResult", "BenchSpec", "ExportResult", "ExportSpec", "ProfileResult", "ProfileSpec", "SweepSpec",
           "run_bench", "run_export", "run_profile", "run_sweep"]
