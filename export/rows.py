"""One contender's timing as a row (:class:`BenchRow`): the seconds to compile, the first run, the
steady state's median, p90 and 95% interval. Shared by :mod:`export.bench` (TVM, ONNX Runtime,
PyTorch) and :mod:`export.openvino_row`, which :mod:`export.bench` calls in turn."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from export.noise import spread, spread_rounds
from store.values import DictValue


@dataclass(frozen=True)
class BenchRow(DictValue):
    """One contender: seconds to compile (or create the session), the first run, then the steady state."""

    name: str
    compile_s: float | None
    first_s: float | None
    median_s: float | None
    p90_s: float | None
    runs: int = 0
    note: str = ""
    ci_low_s: float | None = None  # the median's 95% confidence interval (export.noise.spread)
    ci_high_s: float | None = None
    rounds: int = 1  # rounds alternated with the other contenders that the runs came from
    latencies: tuple[float, ...] = field(default=(), repr=False)  # every timed run's seconds


def time_calls(fn: Callable[[], object], runs: int, budget_s: float) -> tuple[float, list[float]]:
    """The first call's seconds, then up to ``runs`` more calls' seconds (stopping when the budget is spent)."""
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    latencies: list[float] = []
    begin = time.perf_counter()
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        latencies.append(time.perf_counter() - t0)
        if time.perf_counter() - begin > budget_s and len(latencies) >= 3:
            break
    return first, latencies


def latency_row(name: str, compile_s: float | None, first: float, latencies: list[float], note: str = "",
                by_round: list[list[float]] | None = None) -> BenchRow:
    """A contender's row; ``by_round``: its runs round by round (``latencies`` pooled), whose
    interval then counts each round (a fresh process) as one sample (:func:`spread_rounds`)."""
    rounds = len(by_round) if by_round else 1
    median = statistics.median(latencies) if latencies else None
    p90 = float(np.percentile(latencies, 90)) if latencies else None
    low = high = None
    if len(latencies) >= 3:
        s = spread_rounds(by_round) if rounds > 1 else spread(latencies)
        low, high = s.low_s, s.high_s
    return BenchRow(name, compile_s, first, median, p90, len(latencies), note, low, high, rounds, tuple(latencies))


__all__ = ["BenchRow", "latency_row", "time_calls"]
