"""A search job as plain values: what to search (:class:`JobSpec`) and how far it got
(:class:`JobProgress`). :mod:`search.jobs` runs, lists and stops jobs."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields

from search.params import UNLIMITED_TRIALS, SearchParams


@dataclass(frozen=True)
class JobSpec:
    """What a search job searches: a workload spec (and ``shapes`` for a model's symbolic
    dimensions), a target spelling (see :func:`explorer.target.parse_target`), the search
    parameters, and an RPC tracker to measure through (``HOST:PORT`` and device key) or none."""

    workload: str
    target: str = "cpu"
    params: SearchParams = field(default_factory=SearchParams)
    shapes: str | None = None
    rpc_tracker: str | None = None
    rpc_key: str | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["params"] = self.params.to_dict()
        return d

    @classmethod
    def from_dict(cls, data: dict) -> JobSpec:
        """Read a job's params (also those older schedx versions wrote: a target dict, an rpc dict)."""
        data = dict(data)
        target = data.get("target", "cpu")
        if isinstance(target, dict):
            target = json.dumps(target, sort_keys=True)
        rpc = data.get("rpc") or {}
        return cls(workload=str(data["workload"]), target=str(target),
                   params=SearchParams.from_dict(data.get("params") or {}), shapes=data.get("shapes"),
                   rpc_tracker=data.get("rpc_tracker", rpc.get("tracker")), rpc_key=data.get("rpc_key", rpc.get("key")))

    def validate(self) -> ValidJob:
        """Parse what the spec names before any work starts (:class:`ValidJob`); raises the
        rooms' own errors (unknown workload, target, bad RPC address) with their messages."""
        from explorer.target import parse_target
        from explorer.workload import load_workload
        from search.errors import SearchError
        from search.runner import RpcSpec

        target = parse_target(self.target)
        if not target.searchable:
            raise SearchError(f"schedx searches CPU targets (here or on RPC devices); {target.label} uses dlight's "
                              f"GPU schedules: `schedx export --target {self.target}`")
        rpc = RpcSpec.parse(self.rpc_tracker, self.rpc_key or "") if self.rpc_tracker else None
        if rpc is None:
            target.require_runnable("measure")
        workload = load_workload(self.workload, self.shapes)
        return ValidJob(self, target, workload, rpc)


@dataclass(frozen=True)
class ValidJob:
    """A :class:`JobSpec` with everything it names parsed: the target
    (:class:`explorer.target.Target`), the loaded workload (:class:`explorer.workload.Workload`)
    and the RPC device to measure on (:class:`search.runner.RpcSpec`, None: this machine)."""

    spec: JobSpec
    target: object
    workload: object
    rpc: object = None

    def tasks(self) -> list:
        """The workload's tasks a search explores: all but the kernels schedx writes whole."""
        tasks = self.workload.tasks()
        searched = [t for t in tasks if not t.hand_written]
        if tasks and not searched:
            from explorer.errors import ExplorerError

            raise ExplorerError(f"{self.workload.name}: its kernel is written whole by schedx for each target "
                                "(a recurrent layer's steps); there is nothing to search")
        return searched


@dataclass(frozen=True)
class JobProgress:
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

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> JobProgress:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in names})


def estimate_eta_s(*, elapsed_s: float, trials: int, total_trials: int,
                   time_left_s: float | None = None) -> float | None:
    """Seconds a search has left: at its pace so far (``elapsed_s`` per ``trials``) for the trials
    left, where the trials are limited; the rest of its time budget (``time_left_s``), where it has
    one; the sooner of the two where both bind. A time budget with unlimited trials
    (:data:`search.params.UNLIMITED_TRIALS`) is the clock's alone: the pace against ten million
    trials read 9,790,457 s for a 1-minute search. None when neither is known yet."""
    known = []
    if trials and total_trials < UNLIMITED_TRIALS:
        known.append(elapsed_s / trials * max(0, total_trials - trials))
    if time_left_s is not None:
        known.append(max(0.0, time_left_s))
    return min(known) if known else None


__all__ = ["JobProgress", "JobSpec", "ValidJob", "estimate_eta_s"]
