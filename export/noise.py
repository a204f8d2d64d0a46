"""Deciding "faster" on a noisy machine, as pyperf, hyperfine and Google Benchmark's compare tool do.

A latency is a sample, not a number: on a shared VM two runs of the same build differ by tens of
per cent. A contender's figure is the median of its runs with a 95% confidence interval (bootstrap
of the median); two contenders differ only when the interval of their ratio of medians excludes 1
(then "faster" or "slower", by how much), else there is "no difference beyond the noise". The
contenders' runs come from rounds alternated in time (see :func:`export.bench.bench_workload`), so a
slow minute of the machine falls on both.

Each round runs a bundle in a fresh process, and a process has its own speed: where its 73 MB of
weights land, huge pages or not, which core it shares. On machine D two builds read 0.93x each
other in one 4-round comparison and 1.08x in the next, each "beyond the noise" when every run was
taken as an independent sample; the runs of one process are not. So where the runs come in rounds,
:func:`compare_rounds` resamples the rounds (paired: round r of both contenders ran side by side)
and then the runs within each: the interval holds the process-to-process spread, as pyperf's
many processes do, and a few rounds that disagree give no verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from store.values import DictValue

RESAMPLES = 2000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Spread(DictValue):
    """The median of a contender's runs and its confidence interval (seconds)."""

    median_s: float
    low_s: float
    high_s: float
    runs: int

    def text(self) -> str:
        return f"{self.median_s * 1e3:.3f} ms (95% CI {self.low_s * 1e3:.3f}-{self.high_s * 1e3:.3f})"


@dataclass(frozen=True)
class Comparison(DictValue):
    """``a`` against ``b``: the ratio of their medians (below 1: ``a`` is faster), its confidence
    interval, and the verdict: ``faster``, ``slower`` or ``same`` (no difference beyond the noise)."""

    a: str
    b: str
    ratio: float
    low: float
    high: float
    verdict: str

    def text(self) -> str:
        ci = f"ratio {self.ratio:.2f}, 95% CI {self.low:.2f}-{self.high:.2f}"
        if self.verdict == "same":
            return f"{self.a} vs {self.b}: no difference beyond the noise ({ci})"
        how = f"{(1 - self.ratio) * 100:.0f}% faster" if self.verdict == "faster" else \
            f"{(self.ratio - 1) * 100:.0f}% slower"
        return f"{self.a} is {how} than {self.b} ({ci})"


def _interval(resampled: np.ndarray) -> tuple[float, float]:
    """The central :data:`CONFIDENCE` interval of bootstrap resamples."""
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(resampled, [tail, 100 - tail])
    return float(low), float(high)


def _comparison(a_name: str, b_name: str, ratio: float, resampled_ratios: np.ndarray) -> Comparison:
    low, high = _interval(resampled_ratios)
    verdict = "faster" if high < 1.0 else "slower" if low > 1.0 else "same"
    return Comparison(a_name, b_name, ratio, low, high, verdict)


def _medians(sample: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    idx = rng.integers(0, len(sample), size=(RESAMPLES, len(sample)))
    return np.median(sample[idx], axis=1)


def spread(latencies: Sequence[float], seed: int = 0) -> Spread:
    """The median of ``latencies`` with its bootstrap confidence interval."""
    sample = np.asarray(latencies, dtype=float)
    if sample.size == 0:
        raise ValueError("no runs to summarise")
    low, high = _interval(_medians(sample, np.random.default_rng(seed)))
    return Spread(float(np.median(sample)), low, high, int(sample.size))


def compare(a: Sequence[float], b: Sequence[float], *, a_name: str = "a", b_name: str = "b",
            seed: int = 0) -> Comparison:
    """``a``'s runs against ``b``'s: faster or slower only when the confidence interval of the
    ratio of medians lies wholly below or above 1."""
    sa, sb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if sa.size == 0 or sb.size == 0:
        raise ValueError("both contenders need runs to be compared")
    rng = np.random.default_rng(seed)
    return _comparison(a_name, b_name, float(np.median(sa) / np.median(sb)),
                       _medians(sa, rng) / _medians(sb, rng))


def _round_medians(rounds: list[np.ndarray], picks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The median of the runs of the rounds ``picks`` (one row per resample), each round's runs
    resampled too."""
    out = np.empty(len(picks))
    for k, row in enumerate(picks):
        runs = [r[rng.integers(0, len(r), size=len(r))] for r in (rounds[i] for i in row)]
        out[k] = np.median(np.concatenate(runs))
    return out


def spread_rounds(rounds: Sequence[Sequence[float]], seed: int = 0) -> Spread:
    """The median of all runs with an interval from resampling the rounds, then their runs (see
    :func:`compare_rounds`); :func:`spread` for one round."""
    kept = [np.asarray(r, dtype=float) for r in rounds if len(r)]
    if len(kept) <= 1:
        return spread(kept[0] if kept else [], seed)
    rng = np.random.default_rng(seed)
    low, high = _interval(_round_medians(kept, rng.integers(0, len(kept), size=(RESAMPLES, len(kept))), rng))
    runs = np.concatenate(kept)
    return Spread(float(np.median(runs)), low, high, int(runs.size))


def compare_rounds(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], *, a_name: str = "a",
                   b_name: str = "b", seed: int = 0) -> Comparison:
    """``a``'s rounds of runs against ``b``'s, round ``r`` of each run side by side: the ratio of
    the pooled medians and an interval from resampling rounds (the same ones for both), then runs
    within them, so that a process that ran fast or slow counts once, not once per run. With one
    round, :func:`compare` on its runs."""
    ra = [np.asarray(r, dtype=float) for r in a]
    rb = [np.asarray(r, dtype=float) for r in b]
    pairs = [(x, y) for x, y in zip(ra, rb) if x.size and y.size]
    if not pairs:
        raise ValueError("both contenders need runs to be compared")
    if len(pairs) == 1:
        return compare(pairs[0][0], pairs[0][1], a_name=a_name, b_name=b_name, seed=seed)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(pairs), size=(RESAMPLES, len(pairs)))
    xs, ys = [x for x, _ in pairs], [y for _, y in pairs]
    ratio = float(np.median(np.concatenate(xs)) / np.median(np.concatenate(ys)))
    return _comparison(a_name, b_name, ratio, _round_medians(xs, picks, rng) / _round_medians(ys, picks, rng))


__all__ = ["CONFIDENCE", "Comparison", "Spread", "compare", "compare_rounds", "spread", "spread_rounds"]
