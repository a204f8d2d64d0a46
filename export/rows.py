"""One contender's timing as a row (:class:`BenchRow`): the seconds to compile, the first run, the
steady state's median, p90 and 95% interval, and where measured (OpenVINO's rows) the error of its
outputs against the reference (:class:`OutputError`). Shared by :mod:`export.bench` (TVM, ONNX
Runtime, PyTorch) and :mod:`export.openvino_row`, which :mod:`export.bench` calls in turn."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from export.noise import spread, spread_rounds
from export.runner.compare import compare_outputs, describe_worst
from store.values import DictValue


@dataclass(frozen=True)
class OutputError(DictValue):
    """A contender's outputs against the reference on the same inputs, by the rule schedx verifies
    its own builds with (:func:`export.runner.compare.compare_outputs`): the largest error over the
    outputs, absolute and normalised by each output's max |ref| (None where no figure exists: an
    output of another shape; the relative one where max |ref| is 0), whether every output is within
    the rule, whose relative ``bound`` is the one schedx holds a build of the model at ``precision``
    to, and ``why``: over, the output that fails and the rule it fails (a missing output, a shape,
    an integer output compared exactly); within while the error is above ``bound``, the wider rule
    that accepts it (a softmax's, an int8 model's quantization steps)."""

    max_abs_error: float | None
    max_rel_error: float | None
    precision: str  # whose bound: "fp32", "bf16", "fp16" (or OpenVINO's name of one schedx has no bound for)
    bound: float
    within: bool
    reference: str = "ONNX Runtime fp32"
    why: str = ""

    def text(self) -> str:
        """``error 1.70e-02 of max|ref| against ONNX Runtime fp32 (over schedx's bf16 bound 1e-02: output 0 ...)``."""
        if self.max_rel_error is not None:
            figure = f"error {self.max_rel_error:.2e} of max|ref|"
        elif self.max_abs_error is not None:
            figure = f"error {self.max_abs_error:.2e} where max|ref| is 0"
        else:
            figure = "no error figure"
        bound = f"schedx's {self.precision} bound {self.bound:.0e}"
        verdict = (f"over {bound}" if not self.within else
                   f"within schedx's rule, though over its {self.precision} bound {self.bound:.0e}" if self.why
                   else f"within {bound}")
        return f"{figure} against {self.reference} ({verdict}" + (f": {self.why})" if self.why else ")")


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
    error: OutputError | None = None  # its outputs against the reference (None: not measured)

    def remarks(self) -> str:
        """What a table shows after the row's figures: its outputs' error (where measured), then its note."""
        return "; ".join(t for t in (self.error.text() if self.error else "", self.note) if t)


def time_calls(fn: Callable[[], object], runs: int, budget_s: float) -> tuple[float, list[float]]:
    """The first call's seconds, then up to ``runs`` more calls' seconds (stopping when the budget is spent)."""
    return timed_calls(fn, runs, budget_s)[1:]


def timed_calls(fn: Callable[[], object], runs: int, budget_s: float) -> tuple[object, float, list[float]]:
    """What the first call returned, its seconds, then up to ``runs`` more calls' seconds (:func:`time_calls`)."""
    start = time.perf_counter()
    result = fn()
    first = time.perf_counter() - start
    latencies: list[float] = []
    begin = time.perf_counter()
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        latencies.append(time.perf_counter() - t0)
        if time.perf_counter() - begin > budget_s and len(latencies) >= 3:
            break
    return result, first, latencies


def output_error(outputs: Sequence[np.ndarray], references: Sequence[np.ndarray], *, precision: str, bound: float,
                 output_atol: Sequence[float | None] = (), activations: Sequence[str | None] = (),
                 reference: str = "ONNX Runtime fp32") -> OutputError:
    """``outputs`` against ``references`` by :func:`export.runner.compare.compare_outputs` (the rule of
    schedx's verification) with ``bound`` as each float output's relative tolerance; ``output_atol``
    and ``activations``: per output, as :func:`export.verify.verification_rule` gives them."""
    check = compare_outputs(list(outputs), list(references), rtol=bound, output_atol=list(output_atol) or None,
                            activations=list(activations) or None)
    why = check["why"]
    if check["verified"]:  # within, yet maybe above the bound: say which wider rule accepts it
        wider = next((r for r in check["outputs"] if r["max_rel_error"] > bound and r["worst"]), None)
        why = describe_worst(wider["worst"]) if wider else ""
    return OutputError(_finite(check["max_abs_error"]), _finite(check["max_rel_error"]), precision, bound,
                       check["verified"], reference, why)


def _finite(value: float) -> float | None:
    """A figure JSON can hold: None for inf or NaN (no figure: ``why`` says why)."""
    return value if math.isfinite(value) else None


def latency_row(name: str, compile_s: float | None, first: float, latencies: list[float], note: str = "",
                by_round: list[list[float]] | None = None, error: OutputError | None = None) -> BenchRow:
    """A contender's row; ``by_round``: its runs round by round (``latencies`` pooled), whose
    interval then counts each round (a fresh process) as one sample (:func:`spread_rounds`);
    ``error``: its outputs against the reference, where measured."""
    rounds = len(by_round) if by_round else 1
    median = statistics.median(latencies) if latencies else None
    p90 = float(np.percentile(latencies, 90)) if latencies else None
    low = high = None
    if len(latencies) >= 3:
        s = spread_rounds(by_round) if rounds > 1 else spread(latencies)
        low, high = s.low_s, s.high_s
    return BenchRow(name, compile_s, first, median, p90, len(latencies), note, low, high, rounds, tuple(latencies),
                    error)


__all__ = ["BenchRow", "OutputError", "latency_row", "output_error", "time_calls", "timed_calls"]
