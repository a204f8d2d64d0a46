"""What the Search page draws, computed from a job's records (pure functions, tested apart from
the drawing in ``app/charts.py``): best-so-far per task, every candidate by trial (overall and
within its task), predicted vs measured with the rank correlation of each batch, trials per task
over time, failures by reason, a summary row per task, the trials as a table (Optuna
Dashboard's trial table), the cost model's points by groups of batches. The decisions of the best
schedules beside the default's (the parameter view) are :mod:`search.decisions`."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from store import Record
from store.outcome import Outcome


def spearman(a: list[float], b: list[float]) -> float | None:
    """Spearman rank correlation (no ties correction needed for plotting); None under 3 points."""
    if len(a) < 3 or len(a) != len(b):
        return None
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    if np.std(ra) == 0 or np.std(rb) == 0:
        return None
    return float(np.corrcoef(ra, rb)[0, 1])


@dataclass
class JobSeries:
    best_so_far: dict = field(default_factory=dict)  # task -> (trial numbers, best GFLOPS)
    points: list = field(default_factory=list)  # (trial, task, GFLOPS or None, status)
    batch_corr: list = field(default_factory=list)  # (batch, spearman(predicted, measured GFLOPS))
    predicted: list = field(default_factory=list)  # (predicted score, measured GFLOPS, batch)
    trials_over_time: dict = field(default_factory=dict)  # task -> (times, cumulative trials)
    failures: list = field(default_factory=list)  # records that failed (by outcome: not ``ok``)
    # task -> [(trial within the task, GFLOPS or None, status)]; GFLOPS is None for a failure and for a
    # kernel with no FLOPs (a transpose: it ran, ``ok``, but has no rate); ``failed`` tells them apart
    task_points: dict = field(default_factory=dict)

    @property
    def failure_counts(self) -> dict[str, int]:
        """Failed candidates by outcome (``run_error``, ``verify_failed``, ...), most first."""
        counts: dict[str, int] = defaultdict(int)
        for r in self.failures:
            counts[r.status] += 1
        return dict(sorted(counts.items(), key=lambda kv: -kv[1]))

    def task_rows(self) -> list[dict]:
        """One row per task: trials, failed (by outcome), best GFLOPS (most trials first)."""
        rows = []
        for task, pts in self.task_points.items():
            good = [g for _, g, _ in pts if g is not None]
            rows.append({"task": task, "trials": len(pts), "failed": sum(failed(s) for _, _, s in pts),
                         "best GFLOPS": max(good) if good else None})
        return sorted(rows, key=lambda r: -r["trials"])


def failed(status: str) -> bool:
    """A candidate failed when its outcome says so, whatever its GFLOPS: a kernel with no FLOPs (a
    transpose, a reshape) that ran is ``ok`` with no rate, and was listed as "failed 1"."""
    return status != Outcome.OK


def job_series(records: list[Record], task_names: dict[str, str], per_batch: int) -> JobSeries:
    """Series for a job's records (in id order); ``task_names`` maps workload keys to names."""
    out = JobSeries()
    best: dict[str, float] = {}
    counts: dict[str, int] = defaultdict(int)
    batches: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for n, r in enumerate(sorted(records, key=lambda r: r.id or 0), 1):
        task = task_names.get(r.workload_key, r.workload_key)
        counts[task] += 1
        times, cum = out.trials_over_time.setdefault(task, ([], []))
        times.append(r.created)
        cum.append(counts[task])
        ok = r.status == Outcome.OK and r.gflops
        out.points.append((n, task, r.gflops if ok else None, r.status))
        out.task_points.setdefault(task, []).append((counts[task], r.gflops if ok else None, r.status))
        if ok:
            best[task] = max(best.get(task, 0.0), r.gflops)
        xs, ys = out.best_so_far.setdefault(task, ([], []))
        if task in best:
            xs.append(n)
            ys.append(best[task])
        batch = (n - 1) // max(1, per_batch) + 1
        if ok and r.predicted is not None:
            out.predicted.append((r.predicted, r.gflops, batch))
            batches[batch].append((r.predicted, r.gflops))
        if failed(r.status):
            out.failures.append(r)
    for batch in sorted(batches):
        pairs = batches[batch]
        out.batch_corr.append((batch, spearman([p for p, _ in pairs], [m for _, m in pairs])))
    return out


def trial_rows(records: list[Record], task_names: dict[str, str]) -> list[dict]:
    """A job's trials, one row per record in the order measured: what the trial table shows (a
    schedule named as :func:`search.decisions.schedule_name` names it: ``default rules, tile
    ranked 4``, not ``search``); a failure's reason is in the failures' own table."""
    from search.decisions import schedule_name

    return [{"record": r.id, "task": task_names.get(r.workload_key, r.workload_key).split("/")[-1],
             "schedule": schedule_name(r), "status": r.status,
             "ms": None if r.median_s is None else round(r.median_s * 1e3, 4),
             "GFLOPS": None if r.gflops is None else round(r.gflops, 1), "verified": r.verified}
            for r in sorted(records, key=lambda r: r.id or 0)]


def batch_groups(predicted: list[tuple[float, float, int]], most: int = 8
                 ) -> list[tuple[str, list[tuple[float, float]]]]:
    """The cost model's points (predicted score, measured GFLOPS, batch) as at most ``most``
    groups of consecutive batches, each a category of its own colour: ``batch 3``, or
    ``batches 1-4`` when there are more batches than groups (a colour bar read 1.2, 1.4... for
    whole batches)."""
    batches = sorted({b for *_, b in predicted})
    if not batches:
        return []
    per = -(-len(batches) // most)  # batches per group
    groups = []
    for start in range(0, len(batches), per):
        chunk = batches[start:start + per]
        label = f"batch {chunk[0]}" if len(chunk) == 1 else f"batches {chunk[0]}-{chunk[-1]}"
        members = set(chunk)
        groups.append((label, [(p, m) for p, m, b in predicted if b in members]))
    return groups
