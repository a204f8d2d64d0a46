"""Batch size against latency and throughput: the same model built for several batch sizes (each
with the schedules an export ships at that shape, :mod:`export.shipping`: the records tuned at
that shape, optionally tuned first, where they win in the model), timed as deployed beside ONNX
Runtime. Records are only valid for the shapes they were tuned at, and batching trades latency
for throughput differently on every target; this measures the trade on this machine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from explorer.target import Target, parse_target
from explorer.workload import Workload, load_workload


@dataclass(frozen=True)
class SweepPoint:
    """One batch size: TVM's and ONNX Runtime's median latency and throughput (samples/s)."""

    batch: int
    shapes: str
    tvm_s: float | None
    ort_s: float | None
    tasks: int
    from_records: int
    trials: int = 0

    @property
    def tvm_throughput(self) -> float | None:
        return self.batch / self.tvm_s if self.tvm_s else None

    @property
    def ort_throughput(self) -> float | None:
        return self.batch / self.ort_s if self.ort_s else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(tvm_throughput=self.tvm_throughput, ort_throughput=self.ort_throughput)
        return d


@dataclass(frozen=True)
class Sweep:
    workload: str
    target: str
    threads: int
    points: tuple[SweepPoint, ...]
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        return {"workload": self.workload, "target": self.target, "threads": self.threads,
                "points": [p.to_dict() for p in self.points], "notes": list(self.notes)}


def batch_shapes(workload: Workload, batch: int) -> str:
    """The ``--shapes`` text that sets every input's first dimension to ``batch``."""
    return ",".join(f"{name}:{'x'.join(str(d) for d in (batch, *shape[1:]))}" for name, shape, _ in workload.inputs)


def _base_workload(spec: str, shapes: str | None) -> Workload:
    """``spec`` at batch 1 with ``shapes`` for its other dimensions: a symbolic first dimension of
    an ONNX file's inputs (a dynamic batch) is the sweep's to set, so it needs no ``--shapes``."""
    from explorer.models.onnx_import import model_inputs, read_onnx
    from explorer.models.shapes import parse_shape_spec

    spec = spec.strip()
    batch_dims: set[str] = set()
    if Path(spec).is_file():  # as load_model reads a path
        for inp in model_inputs(read_onnx(spec)):
            dims = inp.type.tensor_type.shape.dim
            if dims and dims[0].dim_param and not dims[0].HasField("dim_value"):
                batch_dims.add(dims[0].dim_param)
    given = shapes or ""
    named = parse_shape_spec(given).dims if given else {}
    extra = [f"{d}=1" for d in sorted(batch_dims) if d not in named]
    return load_workload(spec, ",".join(filter(None, (given, *extra))) or None)


def sweep(spec: str, batches: list[int], *, target: str | Target = "cpu", db=None, trials: int = 0,
          threads: int | None = None, runs: int = 20, budget_s: float = 10.0, shapes: str | None = None,
          check_in_model: bool | None = None, recheck: bool = False,
          progress: Callable[[str, float], None] | None = None) -> Sweep:
    """Time ``spec`` (a model) at each batch size in ``batches`` (see the module docstring), each
    built with the schedules that ship at that shape (:func:`export.shipping.shipped_schedules`:
    ``check_in_model`` and ``recheck`` as an export's).

    ``db``: the database whose records apply (and where ``trials`` > 0 tunes each shape first);
    None: the default database, if there is one. ``shapes``: the model's symbolic dimensions other
    than the batch (a dynamic batch itself needs nothing)."""
    from explorer.target.environment import cpu_info
    from explorer.errors import ExplorerError
    from export.bench import export_row, ort_row
    from export.shipping import ShipSpec, shipped_schedules

    say = progress or (lambda stage, frac: None)
    target = parse_target(target)
    target.require_runnable("time")
    threads = int(threads or cpu_info()["usable_cores"])
    base = _base_workload(spec, shapes)
    if base.kind != "model":
        raise ExplorerError(f"{spec} is a kernel: a batch sweep needs a model")
    points, notes = [], []
    for i, batch in enumerate(batches):
        shapes = batch_shapes(base, batch)
        say(f"batch {batch}: loading", i / len(batches))
        # the tasks of the target's CPU (its own vector width's rewrites), as its export looks records up for
        workload = load_workload(spec, shapes).for_target(target)
        tasks = workload.tasks()
        done = 0
        if trials > 0:
            say(f"batch {batch}: tuning {trials} trials", (i + 0.2) / len(batches))
            done = _tune(workload, tasks, target, db, trials)
        no_file = db is not None and not Path(db).expanduser().is_file()  # a database not made yet: no records

        def heard(stage: str, frac: float, batch: int = batch, at: float = (i + 0.4) / len(batches)) -> None:
            say(f"batch {batch}: {stage}", at)
        shipped = shipped_schedules(ShipSpec(workload, target, db=db, use_records=not no_file,
                                             check_in_model=check_in_model, recheck=recheck, threads=threads), heard)
        schedules = shipped.schedules
        if shipped.decision is not None:
            notes += [f"batch {batch}: {line}" for line in (shipped.summary(), *shipped.dropped)]
        say(f"batch {batch}: timing", (i + 0.6) / len(batches))
        row, fallbacks = export_row(workload, target, f"tvm batch {batch}", schedules or None, threads=threads,
                                    runs=runs, budget_s=budget_s)
        notes += [f"batch {batch}: {line}" for line in fallbacks]  # kernels whose default rule fell back
        ort_s = None
        if workload.onnx_model is not None:
            try:
                ort_s = ort_row(workload.onnx_model, workload.sample_inputs(), threads=threads, runs=runs,
                                budget_s=budget_s).median_s
            except Exception as err:  # noqa: BLE001 - a model ONNX Runtime cannot run at this batch
                notes.append(f"ONNX Runtime at batch {batch}: {str(err).splitlines()[0][:200]}")
        points.append(SweepPoint(batch, shapes, row.median_s, ort_s, len(tasks), len(schedules), done))
    say("done", 1.0)
    return Sweep(spec, target.label, threads, tuple(points), tuple(notes))


def _tune(workload: Workload, tasks, target: Target, db, trials: int) -> int:
    from search.job_spec import ValidJob
    from search.params import SearchParams
    from search.tune import tune
    from store import Store, default_db_path

    job = ValidJob.of_tasks(tasks, target, source=workload.source, shapes=workload.input_shapes)
    with Store(db or default_db_path()) as store:
        summary = tune(job, store, SearchParams(trials=trials))
    return summary.trials


__all__ = ["Sweep", "SweepPoint", "batch_shapes", "sweep"]
