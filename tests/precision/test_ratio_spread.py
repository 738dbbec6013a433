"""Latency ratios with their spread: the statistics on synthetic samples, the recommendation
on constructed measurements (no test here depends on timing)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from profilers.latency import LatencyRun
from profilers.stats import paired_ratio
from studio.precision.recommend import recommend, recommendable
from studio.precision.report import VariantResult


def _run(samples_ms: dict[str, list[float]], rounds_of: dict[str, list[int]]) -> LatencyRun:
    return LatencyRun({k: np.asarray(v, dtype=np.float64) for k, v in samples_ms.items()},
                      {k: np.asarray(v, dtype=np.int32) for k, v in rounds_of.items()},
                      {k: np.zeros(0) for k in samples_ms}, (),
                      max((max(v) + 1 for v in rounds_of.values() if v), default=0))


def test_round_medians_split_samples_into_rounds():
    run = _run({"a": [1, 2, 3, 10, 20, 30, 5]}, {"a": [0, 0, 0, 1, 1, 1, 2]})
    assert run.round_medians("a").tolist() == [2.0, 20.0, 5.0]
    assert np.isnan(run.round_medians("a", 4)[3])             # a round it has no sample in


def _rounds(ratio_per_round, base=10.0):
    b = [base * (1 + 0.3 * np.sin(i)) for i in range(len(ratio_per_round))]       # drifting machine
    return b, [x * r for x, r in zip(b, ratio_per_round)]


def test_a_consistent_speedup_has_an_interval_below_one():
    b, o = _rounds([0.40, 0.38, 0.41, 0.39, 0.40, 0.42])
    run = _run({"fp32": b, "int8": o}, {"fp32": list(range(6)), "int8": list(range(6))})
    est = run.ratio("fp32", "int8")
    assert est is not None and est.faster and est.significant
    assert 0.38 <= est.ci_low <= est.ratio <= est.ci_high <= 0.42
    assert "over 6 rounds" in est.interval_text()


def test_a_noisy_ratio_whose_interval_includes_one_is_no_difference():
    """The CNN measured twice: 0.39x one run, 0.93x the next. Rounds that spread like that
    give an interval containing 1.0: no significant difference, no speed claim."""
    b, o = _rounds([0.39, 1.10, 0.93, 1.05, 0.45, 1.2])
    est = paired_ratio(b, o)
    assert est.ci_low < 1.0 < est.ci_high and not est.faster and not est.significant
    assert est.verdict("int8", "fp32").startswith("no significant difference")


@pytest.mark.parametrize("seed", range(5))
def test_the_interval_is_scipys_percentile_bootstrap_of_the_median(seed):
    """The interval is scipy.stats.bootstrap's (percentile method, the seeded generator): equal to the bit."""
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 12))
    b = rng.uniform(8, 12, n)
    o = b * rng.uniform(0.4, 1.2, n)
    est = paired_ratio(b, o, resamples=2000, seed=seed)
    oracle = stats.bootstrap((o / b,), np.median, n_resamples=2000, confidence_level=0.95, method="percentile",
                             vectorized=True, axis=-1, rng=np.random.default_rng(seed)).confidence_interval
    assert (est.ci_low, est.ci_high) == (float(oracle.low), float(oracle.high))
    assert est.ratio == float(np.median(o / b))


def test_too_few_rounds_give_no_interval():
    est = paired_ratio([10.0, 10.0], [4.0, 4.0])
    assert est.ci_low is None and not est.faster
    assert _run({"a": [], "b": [1.0]}, {"a": [], "b": [0]}).ratio("a", "b") is None     # "a" timed nothing


def _v(name, ratio, ci, meets=True):
    return VariantResult(name, name, "onnxruntime", "int8", "ok", latency_p10_ms=10 * ratio, ratio=ratio,
                         ratio_ci=ci, ratio_rounds=6 if ci else 0, meets_target=meets)


def test_recommendation_needs_an_interval_below_one():
    fp32 = _v("fp32", 1.0, None)
    noisy = _v("int8-ov", 0.39, (0.30, 1.05))        # best point estimate, but not significant
    solid = _v("int8", 0.80, (0.75, 0.86))
    assert not recommendable(noisy) and recommendable(solid)
    assert recommend([fp32, noisy, solid]).name == "int8"
    assert recommend([fp32, noisy]).name == "fp32"
    assert "no significant difference" in noisy.speed_text and "0.39x" in noisy.speed_text
    assert solid.speed_text.startswith("0.80x of fp32 (95 % CI 0.75–0.86 over 6 rounds)")


def test_no_interval_or_missed_target_or_small_gain_is_never_recommended():
    fp32 = _v("fp32", 1.0, None)
    assert recommend([fp32, _v("a", 0.5, None)]).name == "fp32"                 # no interval
    assert recommend([fp32, _v("b", 0.5, (0.45, 0.55), meets=False)]).name == "fp32"
    assert recommend([fp32, _v("c", 0.97, (0.96, 0.98))]).name == "fp32"        # < 5 % faster
    assert recommend([fp32, _v("d", 0.6, (0.5, 0.7)), _v("e", 0.5, (0.45, 0.55))]).name == "e"


def test_quantization_passes_claim_speed_only_on_an_interval_below_one():
    from passes.quant_tools import speed_vs_fp32

    base = [10.0, 12.0, 9.0, 11.0, 10.0]
    rounds = {"fp32": base, "fast": [x * 0.5 for x in base], "slow": [x * 1.5 for x in base],
              "noisy": [b * r for b, r in zip(base, [0.6, 1.3, 0.9, 1.2, 0.7])]}
    assert speed_vs_fp32(rounds, "fast", "fast") is None
    assert "is slower than fp32" in speed_vs_fp32(rounds, "slow", "slow")
    noisy = speed_vs_fp32(rounds, "noisy", "noisy")
    assert noisy.startswith("noisy: no significant difference from fp32") and "95 % CI" in noisy
    assert speed_vs_fp32({}, "fast", "fast") is None                       # not measured: nothing claimed


def test_latency_columns_are_named_for_what_they_are():
    """The p10 is ``latency_p10_ms`` (``latency_ms``: the same p10, its former name, kept for old
    readers); the median is ``median_ms``."""
    v = dataclasses.replace(_v("int8", 0.5, None), latency_p10_ms=4.0, median_ms=5.0, p90_ms=7.0)
    d = v.to_dict()
    assert (d["latency_p10_ms"], d["median_ms"], d["p90_ms"]) == (4.0, 5.0, 7.0)
    assert d["latency_ms"] == d["latency_p10_ms"] and v.latency_ms == 4.0
