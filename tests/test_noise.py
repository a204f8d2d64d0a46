"""Deciding "faster" under noise (export.noise) and the alternated rounds of `schedx bench`
(export.bench.alternate): a difference inside the noise is called no difference, a clear one is
called with its size, and no contender always runs first."""

import numpy as np
import pytest

from export.bench import BenchRow, alternate
from export.noise import compare, spread


def _sample(center, spread_=0.05, n=40, seed=0):
    return list(center * (1 + spread_ * np.random.default_rng(seed).standard_normal(n)))


def test_the_median_comes_with_an_interval_that_holds_it():
    s = spread(_sample(2e-3))
    assert s.low_s < s.median_s < s.high_s and s.runs == 40
    assert s.high_s - s.low_s < 0.1 * s.median_s  # 40 runs at 5% noise: a tight interval


def test_a_clear_difference_is_called_and_sized():
    c = compare(_sample(1.0, seed=1), _sample(1.3, seed=2), a_name="tuned", b_name="default")
    assert c.verdict == "faster" and c.high < 1.0 and c.ratio == pytest.approx(1 / 1.3, rel=0.05)
    assert c.text().startswith("tuned is 2") and "faster than default" in c.text()
    assert compare(_sample(1.3, seed=2), _sample(1.0, seed=1)).verdict == "slower"


def test_a_difference_inside_the_noise_is_no_difference():
    """The issue's case: three bench runs of the same two builds gave 1.51x, 0.80x and 1.12x; with
    20% noise and few runs a 5% gap cannot be told apart."""
    c = compare(_sample(1.0, 0.2, n=10, seed=3), _sample(1.05, 0.2, n=10, seed=4), a_name="tuned", b_name="default")
    assert c.verdict == "same" and c.low < 1.0 < c.high
    assert "no difference beyond the noise" in c.text()


def test_no_runs_is_an_error_not_a_number():
    with pytest.raises(ValueError):
        spread([])
    with pytest.raises(ValueError):
        compare([1.0], [])


def test_contenders_alternate_and_their_runs_are_pooled():
    order = []

    def contender(name, seconds):
        def run(runs, budget_s):
            order.append(name)
            lat = [seconds] * runs
            return BenchRow(name, 0.5, seconds * 2, seconds, seconds, runs, "", latencies=tuple(lat))
        return run

    rows, comparisons = alternate({"a": contender("a", 1e-3), "b": contender("b", 2e-3)}, rounds=4, runs=12,
                                  budget_s=1.0)
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a"]  # reversed every other round
    assert rows["a"].runs == 12 and rows["a"].rounds == 4 and rows["a"].median_s == 1e-3
    assert rows["a"].compile_s == 0.5 and rows["a"].first_s == 2e-3  # the first round's
    assert [c.verdict for c in comparisons] == ["faster"] and comparisons[0].a == "a"


def _rounds(speeds, n=40, noise=0.01, seed=0):
    """One list of runs per round (a fresh process each), each round at its own speed."""
    rng = np.random.default_rng(seed)
    return [list(s * (1 + noise * rng.standard_normal(n))) for s in speeds]


def test_rounds_whose_processes_disagree_give_no_verdict_however_many_runs():
    """Machine D: two builds read 0.93x each other in one comparison and 1.08x in the next, each
    'beyond the noise' with every run an independent sample. A process has its own speed; runs
    within it do not average that out."""
    from export.noise import compare_rounds

    a = _rounds([1.00, 0.92, 1.06, 0.95], seed=1)  # the same build in four processes
    b = _rounds([0.97, 1.04, 0.93, 1.02], seed=2)
    flat = compare([t for r in a for t in r], [t for r in b for t in r])
    by_round = compare_rounds(a, b)
    assert flat.high - flat.low < by_round.high - by_round.low  # the runs alone claim a tight interval
    assert by_round.verdict == "same" and by_round.low < 1.0 < by_round.high


def test_rounds_that_agree_give_the_verdict():
    from export.noise import compare_rounds, spread_rounds

    a = _rounds([0.90, 0.88, 0.91, 0.89, 0.90, 0.87], seed=3)
    b = _rounds([1.00, 0.99, 1.01, 1.00, 0.98, 1.00], seed=4)
    c = compare_rounds(a, b, a_name="records", b_name="defaults")
    assert c.verdict == "faster" and c.ratio == pytest.approx(0.895 / 1.0, rel=0.02)
    assert compare_rounds(b, a).verdict == "slower"
    s = spread_rounds(a)
    assert s.low_s < s.median_s < s.high_s and s.runs == 6 * 40
    assert compare_rounds([a[0]], [b[0]]).verdict == compare(a[0], b[0]).verdict  # one round: its runs
