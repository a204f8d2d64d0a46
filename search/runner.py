"""schedx's verifying runner: candidates measured in the search's warm worker pool.

Measurement (:class:`PoolRunner`) happens on this machine one candidate at a time, holding the
machine's measuring lock (:mod:`explorer.measure.lock`: no other search or ``schedx measure`` times
anything meanwhile), or through TVM's RPC tracker on remote devices, several at once. Either way
each candidate's outputs are first checked against its task's reference (see
:mod:`search.worker_jobs`). Candidates the store already measured never reach it: the ledger's
runner answers them (see :mod:`search.ledger`); candidates another search running on the same
database has claimed are not measured here (see :mod:`search.claims`).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from explorer.measure.lock import measuring
from search import worker_jobs
from search.ledger import Candidate, CandidateRunner, RunOutcome
from search.pool import CallResult, WarmPool
from store.outcome import Outcome


@dataclass(frozen=True)
class RpcSpec:
    """Where to measure remotely: a TVM RPC tracker and the device key its servers registered."""

    tracker_host: str
    tracker_port: int
    key: str
    session_timeout_s: int = 60

    @classmethod
    def parse(cls, tracker: str, key: str) -> RpcSpec:
        from search.errors import SearchError

        host, sep, port = tracker.rpartition(":")
        if not sep or not (port.isascii() and port.isdigit()):
            raise SearchError(f"--rpc-tracker must be HOST:PORT, got {tracker!r}")
        if len(port.lstrip("0")) > 5 or not 1 <= int(port) <= 65535:  # (else check_tracker would suggest it)
            raise SearchError(f"--rpc-tracker {tracker[:60]!r}: port {port[:12]}{'...' if len(port) > 12 else ''} is "
                              "out of range; a TCP port is 1..65535 (the tracker's --port, e.g. 127.0.0.1:9190)")
        if not key:
            raise SearchError("--rpc-key is required with --rpc-tracker (the key the RPC servers registered)")
        return cls(host or "127.0.0.1", int(port), key)


# How each candidate is timed warm (``schedx tune --warm-timing``): MetaSchedule's local-runner
# defaults, no cache flush: the kernel's weights stay in the cache between runs, as they never do
# in a model.
EVALUATOR = {"number": 3, "repeat": 1, "min_repeat_ms": 40}

# How a search times its candidates by default, and how the confirmation round (search.confirm_round)
# times a schedule on a CPU: as a model runs it,
# its weights and output out of the cache (TVM's cache_flush_cpu_non_first_arg before each run:
# every argument but the first, the input the previous kernel just wrote), one run per repeat.
# Timed warm, a schedule that reads a large weight in its original layout wins while the weight
# stays in the cache and loses in the model (docs/notes/measurements.md).
CACHE_FLUSH = "cache_flush_cpu_non_first_arg"
COLD_EVALUATOR = {"number": 1, "repeat": 10, "min_repeat_ms": 0, "f_preproc": CACHE_FLUSH}
COLD_TIMING = "cold: weights and output flushed from the cache before each run, as in a model"  # records say so


# A candidate whose first (verification) run is this many times slower than its task's best
# verified time so far (and over 1 ms slower) keeps that run as its time instead of being timed
# properly: it cannot win, and slow candidates are most of a search's measuring time.
REJECT_FACTOR = 10.0


@dataclass
class _Reference:
    path: str | None = None
    why_not: str = ""
    done: bool = False
    infra: bool = False  # it failed for want of a worker (a closed pool), not by the kernel


class PoolRunner(CandidateRunner):
    """Measures candidates in ``pool``, each checked first against the reference of its task
    (``task_mods[candidate.task]`` run unscheduled, built for ``reference_target``: a target this
    machine runs)."""

    def __init__(self, pool: WarmPool, *, task_mods: list, task_specs: list, work_dir: str,
                 reference_target: dict, timeout_sec: float = 30, verify: bool = True,
                 best_s: list | None = None, reject_factor: float | None = REJECT_FACTOR,
                 rpc: RpcSpec | None = None, claims=None, holder: dict | None = None, cold: bool = True) -> None:
        self.pool, self.task_mods, self.task_specs = pool, task_mods, task_specs
        self.claims = claims  # a search.claims.ClaimBook, or None: measure whatever comes
        self.holder = dict(holder or {})  # who this search is, for the measuring lock's status
        self.reference_target = reference_target
        self.rpc = None if rpc is None else {"host": rpc.tracker_host, "port": rpc.tracker_port, "key": rpc.key,
                                             "session_timeout": rpc.session_timeout_s}
        self.work_dir, self.timeout_sec, self.verify = work_dir, timeout_sec, verify
        self.evaluator = dict(COLD_EVALUATOR if cold else EVALUATOR)  # cold: as the model runs the kernel
        self.references = [_Reference() for _ in task_mods]
        self._locks = [threading.Lock() for _ in task_mods]
        self.best_s: list[float | None] = list(best_s) if best_s is not None else [None] * len(task_mods)
        self.reject_factor = reject_factor
        self._best_lock = threading.Lock()
        # remote candidates are measured several at once, one thread per pool worker
        self._threads = ThreadPoolExecutor(max_workers=pool.size, thread_name_prefix="schedx-rpc") if rpc else None

    def prefetch(self, task: int) -> threading.Thread:
        """Compute ``task``'s reference in the background (before anything is timed)."""
        thread = threading.Thread(target=self.reference, args=(task,), daemon=True)
        thread.start()
        return thread

    def reference(self, task: int) -> _Reference:
        """``task``'s reference outputs, computed once (a failure leaves the task unverified)."""
        with self._locks[task]:
            ref = self.references[task]
            if not ref.done:
                path = os.path.join(self.work_dir, f"reference-{task}.npz")
                outcome = self.pool.call(worker_jobs.reference, self.task_mods[task], self.reference_target,
                                         self.task_specs[task], path, timeout=max(120.0, 4 * self.timeout_sec))
                ref.path = path if outcome.ok else None
                ref.why_not = "" if outcome.ok else f"the unscheduled kernel could not run: {outcome.message}"
                ref.infra = outcome.status == Outcome.INFRA_ERROR
                ref.done = True
            return ref

    def run_candidates(self, inputs: list, candidates: list[Candidate | None]) -> list[RunOutcome]:
        """Local candidates one at a time (nothing else may run while one is timed); remote ones
        in parallel, one per pool worker, on whatever devices the tracker hands out."""
        mine = self._claim(candidates)
        pairs = list(zip(inputs, candidates))
        if self.rpc is None:
            return [self._measure(inp, c) if i in mine else _ELSEWHERE for i, (inp, c) in enumerate(pairs)]
        return list(self._threads.map(lambda ipair: self._measure(*ipair[1]) if ipair[0] in mine else _ELSEWHERE,
                                      enumerate(pairs)))

    def _claim(self, candidates: list[Candidate | None]) -> set[int]:
        """Indices of the candidates this search measures: all of them, unless another search on
        the same database has claimed or measured some (one claim transaction per task)."""
        everyone = set(range(len(candidates)))
        if self.claims is None:
            return everyone
        by_task: dict[int, list[int]] = {}
        for i, c in enumerate(candidates):
            if c is not None and c.task is not None:
                by_task.setdefault(c.task, []).append(i)
        per_candidate = self.timeout_sec + (self.rpc["session_timeout"] if self.rpc else 0)
        ttl = max(900.0, 2.0 * len(candidates) * (per_candidate + 5.0))  # outlasts the batch, however slow
        for task, indices in by_task.items():
            granted = self.claims.claim(task, [candidates[i].hash for i in indices], ttl_s=ttl)
            everyone -= {i for i in indices if candidates[i].hash not in granted}
        return everyone

    @contextmanager
    def confirming(self):
        """Within the block, candidates are timed as the confirmation round times them: cold
        (:data:`COLD_EVALUATOR`), never cut short by an early verdict, and without claims (it
        times candidates this database has measured already: claims would refuse them). Runs
        still take the measuring lock."""
        saved = self.claims, self.evaluator, self.reject_factor
        self.claims, self.evaluator, self.reject_factor = None, dict(COLD_EVALUATOR), None
        try:
            yield self
        finally:
            self.claims, self.evaluator, self.reject_factor = saved

    def close(self) -> None:
        """Release the threads remote measurements used (the pool belongs to the caller)."""
        if self._threads is not None:
            self._threads.shutdown(wait=True)

    def _measure(self, inp, candidate: Candidate | None) -> RunOutcome:
        path = str(inp.artifact_path)
        task = candidate.task if candidate is not None else None
        check = candidate.check_artifact if candidate is not None else None
        own = self.task_specs[task] if task is not None else None
        # the timed kernel's arguments (a rewritten weight layout changes one), outputs as the task's
        specs = [(tuple(int(x) for x in a.shape), str(a.dtype), bool(own and i < len(own) and own[i][2]))
                 for i, a in enumerate(inp.args_info)]
        same = own is not None and [s[:2] for s in own] == [s[:2] for s in specs]
        ref = self.reference(task) if self.verify and task is not None and (same or check) else None
        best = self.best_s[task] if task is not None else None
        # over a network a run's wall time is mostly round trips: no early verdicts there
        reject = max(best * self.reject_factor, best + 1e-3) if best and self.reject_factor and not self.rpc else None
        timeout = self.timeout_sec + (self.rpc["session_timeout"] if self.rpc else 0)
        args = (worker_jobs.measure, path, specs, self.evaluator, ref.path if ref else None, reject, self.rpc,
                str(inp.device_type), None if same else check, own)
        if self.rpc is None:  # on this machine: one timed run at a time, whoever runs it
            with measuring(**self.holder):
                outcome = self.pool.call(*args, timeout=timeout)
        else:
            outcome = self.pool.call(*args, timeout=timeout)
        result = _outcome(outcome, checked=ref is not None and ref.path is not None)
        if task is not None and result.verified and not result.early:  # verified implies timed
            median = sorted(result.secs)[len(result.secs) // 2]
            with self._best_lock:
                current = self.best_s[task]
                self.best_s[task] = median if current is None else min(current, median)
        return result


# What a candidate another search claimed comes back as (no record is written for it).
_ELSEWHERE = RunOutcome(Outcome.INFRA_ERROR, error="measured by another search running on this database")


def _outcome(outcome: CallResult, *, checked: bool) -> RunOutcome:
    """A pool result of :func:`search.worker_jobs.measure` as a typed run outcome; ``verified``
    is None when there was no reference to compare with."""
    if not outcome.ok:
        return RunOutcome(outcome.status, error=outcome.message)
    timed: worker_jobs.Timed = outcome.value
    if timed.outcome == Outcome.VERIFY_FAILED:
        return RunOutcome(Outcome.VERIFY_FAILED, error=f"verify failed: {timed.error}", max_error=timed.max_error,
                          verified=False)
    return RunOutcome(Outcome.OK, timed.secs, max_error=timed.max_error, verified=True if checked else None,
                      early=timed.early)
