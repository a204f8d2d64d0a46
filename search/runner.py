"""Runners: schedx's verifying runner, behind a cache of what was already measured.

Measurement (:class:`PoolRunner`) happens in the search's warm worker pool: on this machine one
candidate at a time (nothing else runs meanwhile), or through TVM's RPC tracker on remote
devices, several at once. Either way each candidate's outputs are first checked against its
task's reference (see :mod:`search.worker_jobs`).

True resume: a candidate whose scheduled module this database already measured (same
workload, target and hardware) is neither built nor run again; its stored latencies come back
at once (:data:`search.builder.CACHED_PREFIX` marks it between builder and runner).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from search import worker_jobs
from search.builder import CACHED_PREFIX
from search.pool import WarmPool, failure


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
        if not sep or not port.isdigit():
            raise SearchError(f"--rpc-tracker must be HOST:PORT, got {tracker!r}")
        if not key:
            raise SearchError("--rpc-key is required with --rpc-tracker (the key the RPC servers registered)")
        return cls(host or "127.0.0.1", int(port), key)


# How each candidate is timed: MetaSchedule's local-runner defaults (no cache flush).
EVALUATOR = {"number": 3, "repeat": 1, "min_repeat_ms": 40}


@derived_object
class _Done(ms.runner.PyRunnerFuture):
    def __init__(self, result: ms.runner.RunnerResult) -> None:
        super().__init__()
        self._result = result

    def done(self) -> bool:
        return True

    def result(self) -> ms.runner.RunnerResult:
        return self._result


@derived_object
class CachingRunner(ms.runner.PyRunner):
    """Runs new candidates with ``inner``; answers cached ones from ``lookup(record_id)``."""

    def __init__(self, inner: ms.runner.Runner, lookup) -> None:
        super().__init__()
        self.inner = inner
        self.lookup = lookup

    def run(self, runner_inputs: list) -> list:
        out: list = [None] * len(runner_inputs)
        fresh = []
        for i, inp in enumerate(runner_inputs):
            path = str(inp.artifact_path)
            if path.startswith(CACHED_PREFIX):
                secs = self.lookup(path[len(CACHED_PREFIX):])
                out[i] = _Done(ms.runner.RunnerResult(secs, None) if secs else
                               ms.runner.RunnerResult(None, "cached candidate without a latency"))
            else:
                fresh.append(i)
        if fresh:
            for i, fut in zip(fresh, self.inner.run([runner_inputs[i] for i in fresh])):
                out[i] = fut
        return out


# A candidate whose first (verification) run is this many times slower than its task's best
# verified time so far (and over 1 ms slower) keeps that run as its time instead of being timed
# properly: it cannot win, and slow candidates are most of a search's measuring time.
REJECT_FACTOR = 10.0


@dataclass
class _Reference:
    path: str | None = None
    why_not: str = ""
    done: bool = False


@derived_object
class PoolRunner(ms.runner.PyRunner):
    """Measures candidates one at a time in ``pool``, each checked first against the reference of
    its task (``task_mods[artifact_task[path]]`` run unscheduled); ``details`` keeps, per
    artifact, the largest error seen and whether it was verified."""

    def __init__(self, pool: WarmPool, *, task_mods: list, task_specs: list, artifact_task: dict, work_dir: str,
                 check_artifact: dict | None = None, timeout_sec: float = 30, verify: bool = True,
                 best_s: list | None = None,
                 reject_factor: float | None = REJECT_FACTOR, rpc: RpcSpec | None = None,
                 reference_target: dict | None = None) -> None:
        super().__init__()
        self.pool, self.task_mods, self.task_specs = pool, task_mods, task_specs
        self.reference_target = reference_target or {"kind": "llvm"}  # references run on this machine's CPU
        self.rpc = None if rpc is None else {"host": rpc.tracker_host, "port": rpc.tracker_port, "key": rpc.key,
                                             "session_timeout": rpc.session_timeout_s}
        self.artifact_task, self.work_dir, self.timeout_sec, self.verify = artifact_task, work_dir, timeout_sec, verify
        self.check_artifact = check_artifact if check_artifact is not None else {}
        self.evaluator = dict(EVALUATOR)
        self.references = [_Reference() for _ in task_mods]
        self._locks = [threading.Lock() for _ in task_mods]
        self.details: dict[str, dict] = {}
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
                ref.done = True
            return ref

    def run(self, runner_inputs: list) -> list:
        """Local candidates one at a time (nothing else may run while one is timed); remote ones
        in parallel, one per pool worker, on whatever devices the tracker hands out."""
        if self.rpc is None:
            return [_Done(self._measure(inp)) for inp in runner_inputs]
        return [_Done(r) for r in self._threads.map(self._measure, runner_inputs)]

    def close(self) -> None:
        """Release the threads remote measurements used (the pool belongs to the caller)."""
        if self._threads is not None:
            self._threads.shutdown(wait=True)

    def _measure(self, inp) -> ms.runner.RunnerResult:
        path = str(inp.artifact_path)
        task = self.artifact_task.pop(path, None)
        check = self.check_artifact.pop(path, None)
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
        outcome = self.pool.call(worker_jobs.measure, path, specs, self.evaluator, ref.path if ref else None, reject,
                                 self.rpc, str(inp.device_type), None if same else check, own, timeout=timeout)
        value = outcome.value if outcome.ok else {"error": _run_failure(outcome, timeout)}
        verified = _verified(ref, value)
        self.details[path] = {"max_error": value.get("max_error"), "verified": verified,
                              "early": bool(value.get("early"))}
        if task is not None and verified and not value.get("early"):  # verified implies timed
            median = sorted(value["secs"])[len(value["secs"]) // 2]
            with self._best_lock:
                current = self.best_s[task]
                self.best_s[task] = median if current is None else min(current, median)
        if "secs" in value:
            return ms.runner.RunnerResult(value["secs"], None)
        return ms.runner.RunnerResult(None, value["error"])


def _verified(ref: _Reference | None, value: dict) -> bool | None:
    if ref is None or ref.path is None:
        return None  # nothing to compare with
    if "secs" in value:
        return True
    return False if value.get("error", "").startswith(worker_jobs.VERIFY_FAILED) else None


def _run_failure(outcome, timeout_sec: float) -> str:
    if outcome.status == "timeout":
        return f"run timed out after {timeout_sec:.0f} s"
    return failure("run crashed: " if outcome.status == "crashed" else "run failed: ", outcome)
