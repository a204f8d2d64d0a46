"""A search job as plain values: what to search (:class:`JobSpec`) and how far it got
(:class:`JobProgress`). :mod:`search.jobs` runs, lists and stops jobs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from explorer.precision import Calibration
from search.params import UNLIMITED_TRIALS, SearchParams
from store.values import DictValue

if TYPE_CHECKING:  # (parsed types only: this module loads without TVM, as every front end lists jobs)
    from explorer.target import Target
    from explorer.workload import Task, Workload
    from search.runner import RpcSpec


@dataclass(frozen=True)
class JobSpec:
    """What a search job searches: a workload spec (and ``shapes`` for a model's symbolic
    dimensions), a target spelling (see :func:`explorer.target.parse_target`), the search
    parameters, an RPC tracker to measure through (``HOST:PORT`` and device key) or none, and the
    ``precision`` the workload is searched at (:mod:`explorer.precision`: at ``bf16`` the tasks are
    the bf16 kernels ``schedx export --precision bf16`` builds, so its records are the ones it ships;
    at ``int8`` those of the model quantized as ``calibration`` says, the quantized model cached by
    content, so the export at int8 with the same calibration builds the same kernels)."""

    workload: str
    target: str = "cpu"
    params: SearchParams = field(default_factory=SearchParams)
    shapes: str | None = None
    rpc_tracker: str | None = None
    rpc_key: str | None = None
    precision: str = "fp32"
    calibration: Calibration | None = None  # int8's (None: the default, 16 random samples)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["params"] = self.params.to_dict()
        d["calibration"] = self.calibration.to_dict() if self.calibration is not None else None
        return d

    @classmethod
    def from_dict(cls, data: dict) -> JobSpec:
        """Read a job's params (also those older schedx versions wrote: a target dict, an rpc dict, no
        precision: fp32)."""
        data = dict(data)
        target = data.get("target", "cpu")
        if isinstance(target, dict):
            target = json.dumps(target, sort_keys=True)
        rpc = data.get("rpc") or {}
        return cls(workload=str(data["workload"]), target=str(target),
                   params=SearchParams.from_dict(data.get("params") or {}), shapes=data.get("shapes"),
                   rpc_tracker=data.get("rpc_tracker", rpc.get("tracker")), rpc_key=data.get("rpc_key", rpc.get("key")),
                   precision=str(data.get("precision") or "fp32"),
                   calibration=Calibration.from_dict(data["calibration"]) if data.get("calibration") else None)

    def validate(self) -> ValidJob:
        """Parse what the spec names before any work starts (:class:`ValidJob`); raises the
        rooms' own errors (unknown workload, target, bad RPC address, a precision the target or the
        workload cannot have: :class:`explorer.precision.PrecisionError`) with their messages."""
        from explorer.precision import check_precision, for_precision
        from explorer.workload import load_workload
        from search.runner import RpcSpec

        target = _search_target(self.target)
        rpc = RpcSpec.parse(self.rpc_tracker, self.rpc_key or "") if self.rpc_tracker else None
        if rpc is None:
            target.require_runnable("measure")
        check_precision(self.precision, target)  # before the model loads: a target without bf16 fails at once
        workload, _ = for_precision(load_workload(self.workload, self.shapes), target, self.precision, self.calibration)
        workload = workload.for_target(target)  # its tasks those of the CPU searched, as an export for it finds them
        tasks = workload.tasks()
        searched = _searched(tasks)
        if tasks and not searched:
            from explorer.errors import ExplorerError

            raise ExplorerError(f"{workload.name}: its kernel is written whole by schedx for each target "
                                "(a recurrent layer's steps); there is nothing to search")
        return ValidJob(target, searched, rpc, workload.source, workload.input_shapes, spec=self, workload=workload)


@dataclass(frozen=True)
class ValidJob:
    """A search with everything it names parsed and checked, made once at the search's boundary
    (:meth:`JobSpec.validate`, or :meth:`of_tasks` for tasks picked by hand): a CPU target this
    machine runs (or that ``rpc``'s devices run), the tasks to search (without the kernels schedx
    writes whole), where to measure (None: this machine), and what the workload rows of its
    tasks say (``source``, ``shapes``). ``spec`` and ``workload`` are None for hand-picked tasks."""

    target: Target
    tasks: tuple[Task, ...]
    rpc: RpcSpec | None = None
    source: str = ""
    shapes: str | None = None
    spec: JobSpec | None = None
    workload: Workload | None = None

    @classmethod
    def of_tasks(cls, tasks: Sequence[Task], target: Target | str = "cpu", *, rpc: RpcSpec | None = None,
                 source: str = "", shapes: str | None = None) -> ValidJob:
        """A job over ``tasks`` as given (a library caller's, a test's; those schedx writes whole
        left out), its target checked as :meth:`JobSpec.validate` checks a spec's."""
        target = _search_target(target)
        if rpc is None:
            target.require_runnable("measure")
        return cls(target, _searched(tasks), rpc, source, shapes)


def _search_target(spelling: Target | str) -> Target:
    from explorer.target import parse_target
    from search.errors import SearchError

    target = parse_target(spelling)
    if not target.searchable:
        raise SearchError(f"schedx searches CPU targets (here or on RPC devices); {target.label} uses dlight's "
                          f"GPU schedules: `schedx export --target {target.spec}`")
    return target


def _searched(tasks: Sequence[Task]) -> tuple[Task, ...]:
    """The tasks a search explores: all but the kernels schedx writes whole (nothing to search)."""
    return tuple(t for t in tasks if not t.hand_written)


@dataclass(frozen=True)
class JobProgress(DictValue):
    """How far a search got, as the job row and every front end read it. ``failures`` counts
    failed candidates by outcome (``run_error``, ``verify_failed``, ...), ``reasons`` keeps one
    message per outcome; ``tasks`` maps task name to its trials, best GFLOPS, weight and FLOPs."""

    trials: int = 0
    total: int = 0
    measured: int = 0
    cached: int = 0
    failed: int = 0
    best_gflops: float | None = None
    elapsed_s: float = 0.0
    eta_s: float | None = None
    tasks: dict = field(default_factory=dict)
    failures: dict = field(default_factory=dict)
    reasons: dict = field(default_factory=dict)
    summary: dict | None = None
    phase: str = "search"  # "confirm" while the confirmation round times the bests again
    confirm_done: int = 0  # tasks it has finished, of confirm_total
    confirm_total: int = 0


def estimate_eta_s(*, elapsed_s: float, trials: int, total_trials: int,
                   time_left_s: float | None = None) -> float | None:
    """Seconds a search has left: at its pace so far (``elapsed_s`` per ``trials``) for the trials
    left, where the trials are limited; the rest of its time budget (``time_left_s``), where it has
    one; the sooner of the two where both bind. A time budget with unlimited trials
    (:data:`search.params.UNLIMITED_TRIALS`) is the clock's alone: the pace against ten million
    trials would read months for a 1-minute search. None when neither is known yet."""
    known = []
    if trials and total_trials < UNLIMITED_TRIALS:
        known.append(elapsed_s / trials * max(0, total_trials - trials))
    if time_left_s is not None:
        known.append(max(0.0, time_left_s))
    return min(known) if known else None


__all__ = ["JobProgress", "JobSpec", "ValidJob", "estimate_eta_s"]
