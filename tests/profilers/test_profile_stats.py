"""Statistics on synthetic timings with known answers: percentiles, QPS, paired
ratios under machine drift, slopes."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from profilers.latency import RunPlan, block_sizes, timed_loop
from profilers.stats import latency_stats, linear_slope, paired_ratio, percentile


def test_percentiles_of_known_timings():
    # 1..1000 ms: linear interpolation puts p50 at 500.5, p90 at 900.1, p99 at 990.01, p99.9 at 999.001.
    values = np.arange(1, 1001, dtype=float)
    s = latency_stats(values)
    assert s.count == 1000
    assert s.p50_ms == pytest.approx(500.5)
    assert s.p90_ms == pytest.approx(900.1)
    assert s.p99_ms == pytest.approx(990.01)
    assert s.p999_ms == pytest.approx(999.001)
    assert s.p10_ms == pytest.approx(100.9)
    assert s.min_ms == 1 and s.max_ms == 1000
    assert s.mean_ms == pytest.approx(500.5)
    assert s.std_ms == pytest.approx(statistics.stdev(values.tolist()))
    assert s.qps == pytest.approx(1000 / 500.5)
    # The same definition as the standard library's inclusive quantiles.
    assert s.p90_ms == pytest.approx(statistics.quantiles(values.tolist(), n=10, method="inclusive")[8])


def test_tail_is_visible():
    # 990 fast iterations at 1 ms and 10 slow ones at 50 ms: the median does not see them, p99.9 does.
    values = np.array([1.0] * 990 + [50.0] * 10)
    s = latency_stats(values)
    assert s.p50_ms == 1.0 and s.p90_ms == 1.0
    assert s.p999_ms == pytest.approx(50.0)
    assert s.tail_ratio > 1.0
    assert s.to_dict()["p999_ms"] == pytest.approx(50.0)


def test_single_sample_and_bad_input():
    s = latency_stats([2.0])
    assert s.p50_ms == s.p999_ms == 2.0 and s.std_ms == 0.0
    for bad in ([], [1.0, float("nan")], [-1.0]):
        with pytest.raises(ValueError):
            latency_stats(bad)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_paired_ratio_cancels_drift():
    # The machine slows down 3x over the run; B is always 1.5x A within a round.
    rng = np.random.default_rng(1)
    drift = np.linspace(1.0, 3.0, 30)
    a = 2.0 * drift * (1 + 0.02 * rng.standard_normal(30))
    b = 3.0 * drift * (1 + 0.02 * rng.standard_normal(30))
    r = paired_ratio(a, b)
    assert r.ratio == pytest.approx(1.5, rel=0.02)
    assert r.ci_low < 1.5 < r.ci_high and r.ci_high - r.ci_low < 0.1
    assert r.significant and "slower" in r.verdict("B", "A")
    # Unpaired medians would be off by the drift: the interval is the honest statement.
    assert r.rounds == 30


def test_paired_ratio_no_difference_is_not_significant():
    rng = np.random.default_rng(2)
    a = 1.0 + 0.1 * rng.standard_normal(20)
    b = 1.0 + 0.1 * rng.standard_normal(20)
    r = paired_ratio(a, b)
    assert r.ci_low < 1.0 < r.ci_high
    assert not r.significant
    assert "no significant difference" in r.verdict()


def test_paired_ratio_small_samples_and_errors():
    r = paired_ratio([1.0, 2.0], [2.0, 4.0])
    assert r.ratio == 2.0 and r.ci_low is None and "too few rounds" in r.verdict()
    assert paired_ratio([1.0, np.nan, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0]).rounds == 3
    with pytest.raises(ValueError):
        paired_ratio([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        paired_ratio([np.nan], [1.0])


def test_linear_slope_known_line():
    x = np.arange(10.0)
    fit = linear_slope(x, 3.0 * x + 7.0)
    assert fit.slope == pytest.approx(3.0) and fit.intercept == pytest.approx(7.0)
    assert fit.stderr == pytest.approx(0.0, abs=1e-9) and math.isinf(fit.t_value)
    with pytest.raises(ValueError):
        linear_slope([1.0, 2.0], [1.0, 2.0])


def test_block_sizes_and_plan():
    assert block_sizes(100, 20) == [5] * 20
    assert block_sizes(7, 3) == [3, 2, 2]
    assert block_sizes(3, 20) == [1, 1, 1]
    assert sum(block_sizes(1001, 20)) == 1001
    with pytest.raises(ValueError):
        block_sizes(0, 3)
    with pytest.raises(ValueError):
        RunPlan(iterations=None, duration_s=None)
    with pytest.raises(ValueError):
        RunPlan(iterations=10, duration_s=1.0)
    assert RunPlan(iterations=None, duration_s=2.0).to_args()["duration_s"] == 2.0


def test_timed_loop_times_each_call_and_calls_hooks():
    calls = []
    times = timed_loop(lambda: calls.append(1), 50)
    assert len(times) == 50 and len(calls) == 50 and all(t >= 0 for t in times)
    events = []
    timed_loop(lambda: events.append("run"), 3, (lambda: events.append("push"), lambda: events.append("pop")))
    assert events == ["push", "run", "pop"] * 3
    slow = timed_loop(lambda: sum(range(20000)), 5)
    assert min(slow) > 10_000   # nanoseconds: a real measurement, not zeros
