"""Deciding "faster" on a noisy machine, as pyperf, hyperfine and Google Benchmark's compare tool do.

A latency is a sample, not a number: on a shared VM two runs of the same build differ by tens of
per cent. A contender's figure is the median of its runs with a 95% confidence interval (bootstrap
of the median); two contenders differ only when the interval of their ratio of medians excludes 1
(then "faster" or "slower", by how much), else there is "no difference beyond the noise". The
contenders' runs come from rounds alternated in time (see :func:`export.bench.bench_workload`), so a
slow minute of the machine falls on both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

RESAMPLES = 2000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Spread:
    """The median of a contender's runs and its confidence interval (seconds)."""

    median_s: float
    low_s: float
    high_s: float
    runs: int

    def to_dict(self) -> dict:
        return asdict(self)

    def text(self) -> str:
        return f"{self.median_s * 1e3:.3f} ms (95% CI {self.low_s * 1e3:.3f}-{self.high_s * 1e3:.3f})"


@dataclass(frozen=True)
class Comparison:
    """``a`` against ``b``: the ratio of their medians (below 1: ``a`` is faster), its confidence
    interval, and the verdict: ``faster``, ``slower`` or ``same`` (no difference beyond the noise)."""

    a: str
    b: str
    ratio: float
    low: float
    high: float
    verdict: str

    def to_dict(self) -> dict:
        return asdict(self)

    def text(self) -> str:
        ci = f"ratio {self.ratio:.2f}, 95% CI {self.low:.2f}-{self.high:.2f}"
        if self.verdict == "same":
            return f"{self.a} vs {self.b}: no difference beyond the noise ({ci})"
        how = f"{(1 - self.ratio) * 100:.0f}% faster" if self.verdict == "faster" else \
            f"{(self.ratio - 1) * 100:.0f}% slower"
        return f"{self.a} is {how} than {self.b} ({ci})"


def _medians(sample: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    idx = rng.integers(0, len(sample), size=(RESAMPLES, len(sample)))
    return np.median(sample[idx], axis=1)


def spread(latencies: Sequence[float], seed: int = 0) -> Spread:
    """The median of ``latencies`` with its bootstrap confidence interval."""
    sample = np.asarray(latencies, dtype=float)
    if sample.size == 0:
        raise ValueError("no runs to summarise")
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(_medians(sample, np.random.default_rng(seed)), [tail, 100 - tail])
    return Spread(float(np.median(sample)), float(low), float(high), int(sample.size))


def compare(a: Sequence[float], b: Sequence[float], *, a_name: str = "a", b_name: str = "b",
            seed: int = 0) -> Comparison:
    """``a``'s runs against ``b``'s: faster or slower only when the confidence interval of the
    ratio of medians lies wholly below or above 1."""
    sa, sb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if sa.size == 0 or sb.size == 0:
        raise ValueError("both contenders need runs to be compared")
    rng = np.random.default_rng(seed)
    ratios = _medians(sa, rng) / _medians(sb, rng)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = (float(x) for x in np.percentile(ratios, [tail, 100 - tail]))
    ratio = float(np.median(sa) / np.median(sb))
    verdict = "faster" if high < 1.0 else "slower" if low > 1.0 else "same"
    return Comparison(a_name, b_name, ratio, low, high, verdict)


__all__ = ["CONFIDENCE", "Comparison", "Spread", "compare", "spread"]
