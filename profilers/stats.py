"""Statistics for honest latency numbers: percentiles, paired ratios with a
bootstrap confidence interval, and robust growth slopes (leak checks).

No engine: the profilers call these on timings that came back from a worker
(through :class:`profilers.latency.LatencyRun`), and the tests call them on
synthetic timings with known answers. The ratio's interval is
``scipy.stats.bootstrap``'s percentile interval of the median (a hand-written
resampling agreed with it only to the last bit or so: the quantile arithmetic
differs); the regression is a few lines of numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["LatencyStats", "RatioEstimate", "Slope", "bootstrap_interval", "latency_stats", "linear_slope",
           "paired_ratio", "percentile"]

# Percentiles reported for every latency distribution.
PERCENTILES: tuple[float, ...] = (10.0, 50.0, 90.0, 99.0, 99.9)


def percentile(values_ms: Sequence[float] | np.ndarray, q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation (numpy's default,
    the same definition as ``statistics.quantiles(method="inclusive")``)."""
    array = np.asarray(values_ms, dtype=np.float64)
    if array.size == 0:
        raise ValueError("percentile of an empty sample")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    return float(np.percentile(array, q))


@dataclass(frozen=True)
class LatencyStats:
    """Summary of one latency sample, all in milliseconds (QPS in 1/s).

    ``qps`` is the sequential throughput (1000 / mean); the concurrency sweep
    reports measured throughput separately. ``tail_ratio`` = p99 / p50 says how
    heavy the tail is (1.0: none).
    """

    count: int
    mean_ms: float
    std_ms: float
    min_ms: float
    p10_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    qps: float

    @property
    def tail_ratio(self) -> float:
        return self.p99_ms / self.p50_ms if self.p50_ms > 0 else math.inf

    def to_dict(self) -> dict:
        return {"count": self.count, "mean_ms": _r(self.mean_ms), "std_ms": _r(self.std_ms),
                "min_ms": _r(self.min_ms), "p10_ms": _r(self.p10_ms), "p50_ms": _r(self.p50_ms),
                "p90_ms": _r(self.p90_ms), "p99_ms": _r(self.p99_ms), "p999_ms": _r(self.p999_ms),
                "max_ms": _r(self.max_ms), "qps": _r(self.qps, 2),
                "tail_ratio": _r(self.tail_ratio, 3) if math.isfinite(self.tail_ratio) else None}


def _r(value: float, digits: int = 5) -> float:
    return round(float(value), digits)


def latency_stats(values_ms: Sequence[float] | np.ndarray) -> LatencyStats:
    """Summary statistics of per-iteration latencies in milliseconds."""
    array = np.asarray(values_ms, dtype=np.float64)
    if array.size == 0:
        raise ValueError("no latency samples")
    if not np.all(np.isfinite(array)) or np.any(array < 0):
        raise ValueError("latency samples must be finite and non-negative")
    p10, p50, p90, p99, p999 = (float(v) for v in np.percentile(array, PERCENTILES))
    mean = float(array.mean())
    return LatencyStats(
        count=int(array.size), mean_ms=mean, std_ms=float(array.std(ddof=1)) if array.size > 1 else 0.0,
        min_ms=float(array.min()), p10_ms=p10, p50_ms=p50, p90_ms=p90, p99_ms=p99, p999_ms=p999,
        max_ms=float(array.max()), qps=1000.0 / mean if mean > 0 else math.inf)


@dataclass(frozen=True)
class RatioEstimate:
    """``other / baseline`` of median latency, from interleaved rounds.

    Each round ran both variants back to back (in shuffled order), so the ratio
    of their per-round medians cancels slow drifts of the machine (another
    user's job, thermal throttling). ``ratio`` is the median of the per-round
    ratios; ``ci_low..ci_high`` its 95 % bootstrap interval over rounds;
    ``spread`` the interquartile range of the per-round ratios (the noise a
    single run would show). With fewer than 3 rounds there is no interval.
    """

    ratio: float
    ci_low: float | None
    ci_high: float | None
    spread: float
    rounds: int

    @property
    def significant(self) -> bool:
        """True when the interval excludes 1.0 (a real difference, not noise)."""
        return self.ci_low is not None and self.ci_high is not None and (self.ci_low > 1.0 or self.ci_high < 1.0)

    @property
    def faster(self) -> bool:
        """True only when the whole interval lies below 1.0: the one case a speed claim may rest on."""
        return self.ci_high is not None and self.ci_high < 1.0

    def interval_text(self) -> str:
        """"95 % CI 0.35–0.44 over 6 rounds", or why there is none."""
        if self.ci_low is None or self.ci_high is None:
            return f"no interval: {self.rounds} round(s)"
        return f"95 % CI {self.ci_low:.2f}–{self.ci_high:.2f} over {self.rounds} rounds"

    def verdict(self, other: str = "B", baseline: str = "A") -> str:
        if self.ci_low is None:
            return f"{other} / {baseline} = {self.ratio:.3f} (too few rounds for an interval)"
        if not self.significant:
            return f"no significant difference ({other} / {baseline} = {self.ratio:.3f}, 95 % CI " \
                   f"{self.ci_low:.3f}–{self.ci_high:.3f})"
        word = "faster" if self.ratio < 1 else "slower"
        factor = 1 / self.ratio if self.ratio < 1 else self.ratio
        return f"{other} is {factor:.2f}× {word} than {baseline} (95 % CI {self.ci_low:.3f}–{self.ci_high:.3f})"

    def to_dict(self) -> dict:
        return {"ratio": _r(self.ratio, 4), "ci_low": None if self.ci_low is None else _r(self.ci_low, 4),
                "ci_high": None if self.ci_high is None else _r(self.ci_high, 4), "spread": _r(self.spread, 4),
                "rounds": self.rounds, "significant": self.significant}


def paired_ratio(baseline_rounds: Sequence[float], other_rounds: Sequence[float], *, resamples: int = 2000,
                 seed: int = 0) -> RatioEstimate:
    """Ratio of two variants from their per-round medians (same round order): the median of
    the per-round ratios and its 95 % bootstrap interval (``resamples``, numpy's generator
    seeded with ``seed``). Rounds where either median is not positive are dropped.
    """
    base = np.asarray(baseline_rounds, dtype=np.float64)
    other = np.asarray(other_rounds, dtype=np.float64)
    if base.shape != other.shape:
        raise ValueError("both variants need the same number of rounds")
    keep = (base > 0) & (other > 0) & np.isfinite(base) & np.isfinite(other)
    ratios = other[keep] / base[keep]
    if ratios.size == 0:
        raise ValueError("no round has timings for both variants")
    estimate = float(np.median(ratios))
    q1, q3 = np.percentile(ratios, [25, 75])
    if ratios.size < 3:
        return RatioEstimate(estimate, None, None, float(q3 - q1), int(ratios.size))
    low, high = bootstrap_interval(ratios, np.median, resamples=resamples, seed=seed)
    return RatioEstimate(estimate, low, high, float(q3 - q1), int(ratios.size))


def bootstrap_interval(values: Sequence[float] | np.ndarray, statistic=np.mean, *, resamples: int = 2000,
                       seed: int = 0, confidence: float = 0.95) -> tuple[float, float]:
    """The ``confidence`` interval of ``statistic`` (a vectorized numpy reduction: np.mean, np.median) over
    ``values``: ``scipy.stats.bootstrap``'s percentile method, numpy's generator seeded with ``seed``. The one
    bootstrap of the studio: latency ratios (:func:`paired_ratio`) and task metrics over samples
    (``studio.data.metrics``: top-1 accuracy, its drop from fp32). Values all equal give that value twice
    (what scipy's percentile method gives too, without its 2,000 resamples)."""
    from scipy.stats import bootstrap     # lazily: only a figure with an interval needs it

    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        raise ValueError("bootstrap interval of an empty sample")
    if np.all(data == data.flat[0]):      # no spread: the interval is the value
        return float(data.flat[0]), float(data.flat[0])
    ci = bootstrap((data,), statistic, n_resamples=resamples, confidence_level=confidence, method="percentile",
                   vectorized=True, axis=-1, rng=np.random.default_rng(seed)).confidence_interval
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class Slope:
    """Least-squares slope of y over x with its standard error and the residual noise."""

    slope: float
    stderr: float
    intercept: float
    noise: float          # standard deviation of the residuals
    points: int

    @property
    def t_value(self) -> float:
        if self.stderr > 0:
            return self.slope / self.stderr
        return math.inf if self.slope > 0 else (-math.inf if self.slope < 0 else 0.0)


def linear_slope(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> Slope:
    """Ordinary least squares y = a + b x; needs at least 3 points."""
    xs = np.asarray(x, dtype=np.float64)
    ys = np.asarray(y, dtype=np.float64)
    if xs.shape != ys.shape or xs.size < 3:
        raise ValueError("a slope needs at least 3 (x, y) points")
    xm, ym = xs.mean(), ys.mean()
    sxx = float(((xs - xm) ** 2).sum())
    if sxx == 0:
        raise ValueError("x values are all equal")
    slope = float(((xs - xm) * (ys - ym)).sum() / sxx)
    intercept = float(ym - slope * xm)
    residuals = ys - (intercept + slope * xs)
    dof = xs.size - 2
    noise = float(math.sqrt((residuals ** 2).sum() / dof)) if dof > 0 else 0.0
    return Slope(slope, noise / math.sqrt(sxx), intercept, noise, int(xs.size))
