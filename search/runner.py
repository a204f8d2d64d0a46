"""Runners: MetaSchedule's local or RPC runner, behind a cache of what was already measured.

True resume: a candidate whose scheduled module this database already measured (same
workload, target and hardware) is neither built nor run again; its stored latencies come back
at once (:data:`search.builder.CACHED_PREFIX` marks it between builder and runner).
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm.s_tir import meta_schedule as ms
from tvm.ir.utils import derived_object

from search.builder import CACHED_PREFIX


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


def evaluator(number: int = 3, repeat: int = 1, min_repeat_ms: int = 40) -> ms.runner.EvaluatorConfig:
    return ms.runner.EvaluatorConfig(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms,
                                     enable_cpu_cache_flush=False)


def make_inner_runner(rpc: RpcSpec | None, *, timeout_sec: float = 30, workers: int = 1) -> ms.runner.Runner:
    if rpc is None:
        return ms.runner.LocalRunner(timeout_sec=timeout_sec, evaluator_config=evaluator())
    config = ms.runner.RPCConfig(tracker_host=rpc.tracker_host, tracker_port=rpc.tracker_port,
                                 tracker_key=rpc.key, session_timeout_sec=rpc.session_timeout_s)
    return ms.runner.RPCRunner(rpc_config=config, evaluator_config=evaluator(), max_workers=workers)


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
