"""One latency measurement (issue 24, "One of each"): the profiler, the precision variants and the
quantization passes all time through :func:`profilers.latency.timed_rounds`, and its result
(:class:`profilers.latency.LatencyRun`) gives the percentiles and the ratio's bootstrap interval.

The mechanism is asserted, not a speed: the same function is called by every path (counted), the
order of calls is the interleaving asked for (recorded by fake callables, timed on a virtual clock,
so no figure depends on this machine's speed or load), the percentiles are numpy.percentile of the
recorded samples and the interval is scipy.stats.bootstrap's for the same seed.
"""

from __future__ import annotations

import itertools
import types

import numpy as np
import pytest

import profilers.latency as latency
from profilers.latency import LatencyRun, RunPlan, timed_rounds, variant_args, warm_up
from profilers.variants import parse_engine
from studio.core.jobs import JobContext
from tests.conftest import parse_model, save

TINY = """
<ir_version: 8, opset_import: ["" : 17]>
tiny (float[1, 4] x) => (float[1, 4] y) {
    y = Relu(x)
}
"""


class _VirtualClock:
    """``perf_counter_ns`` that moves only when a fake callable says how long it took."""

    def __init__(self) -> None:
        self.now = 0

    def perf_counter_ns(self) -> int:
        return self.now


def _fake_time(monkeypatch, clock: _VirtualClock) -> None:
    # Only profilers.latency sees the virtual clock; deadlines (monotonic) and pauses keep real time.
    import time as real

    monkeypatch.setattr(latency, "time", types.SimpleNamespace(perf_counter_ns=clock.perf_counter_ns,
                                                               monotonic=real.monotonic, sleep=real.sleep))


def _fake(name: str, log: list[str], clock: _VirtualClock, durations_ns: list[int] | None = None):
    """A callable that logs its name and, on the virtual clock, lasts the next of ``durations_ns``."""
    it = iter(durations_ns) if durations_ns is not None else itertools.repeat(1_000)

    def call() -> None:
        log.append(name)
        clock.now += next(it)
    return call


# -- the interleaving --------------------------------------------------------------------------------

def test_rounds_interleave_a_b_a_b(monkeypatch):
    clock, log = _VirtualClock(), []
    _fake_time(monkeypatch, clock)
    calls = {"A": (_fake("A", log, clock), ()), "B": (_fake("B", log, clock), ())}
    run = timed_rounds(calls, {"A": [1] * 4, "B": [1] * 4}, seed=None, block_warmup=False)
    assert log == ["A", "B"] * 4
    assert run.order == (("A", "B"),) * 4 and run.rounds_planned == run.rounds_run == 4
    assert run.rounds_of["A"].tolist() == run.rounds_of["B"].tolist() == [0, 1, 2, 3]

    # Blocks of 2 with one untimed call before each block: A A A, B B B per round; only 2 of each timed.
    log.clear()
    run = timed_rounds(calls, {"A": [2] * 3, "B": [2] * 3}, seed=None, block_warmup=True)
    assert log == (["A"] * 3 + ["B"] * 3) * 3
    assert run.samples_ms["A"].size == run.samples_ms["B"].size == 6


def test_shuffled_rounds_follow_the_seeded_permutations(monkeypatch):
    """With a seed each round's order is a fresh permutation (numpy's generator, that seed), every
    variant once per round, and the calls happen in exactly the logged order."""
    clock, log = _VirtualClock(), []
    _fake_time(monkeypatch, clock)
    ids = ["A", "B", "C"]
    calls = {k: (_fake(k, log, clock), ()) for k in ids}
    run = timed_rounds(calls, {k: [1] * 12 for k in ids}, seed=7, block_warmup=False)
    rng = np.random.default_rng(7)
    expected = [tuple(ids[int(i)] for i in rng.permutation(3)) for _ in range(12)]
    assert list(run.order) == expected
    assert log == [k for order in expected for k in order]
    assert len(set(run.order)) > 1                            # the order does change between rounds


def test_the_deadline_stops_after_the_minimum_rounds(monkeypatch):
    clock, log = _VirtualClock(), []
    _fake_time(monkeypatch, clock)
    calls = {"A": (_fake("A", log, clock), ()), "B": (_fake("B", log, clock), ())}
    run = timed_rounds(calls, {"A": [1] * 20, "B": [1] * 20}, seed=None, block_warmup=False, deadline=0.0,
                       min_rounds=3)
    assert run.rounds_run == 3 and log == ["A", "B"] * 3
    assert run.stopped == "time budget reached after 3 of 20 rounds"


def test_the_hard_deadline_cuts_a_block_that_would_overrun_the_job(monkeypatch):
    """A block planned from a too-low estimate stops at the hard limit, inside the block, with the
    samples it has (a job killed at its time limit would return none). Virtual time: each call
    lasts 0.3 s, the limit is 1 s away, so A's fourth call is the last and B never runs."""
    import time as real

    clock, log = _VirtualClock(), []
    _fake_time(monkeypatch, clock)
    calls = {"A": (_fake("A", log, clock, [300_000_000] * 100), ()),
             "B": (_fake("B", log, clock, [300_000_000] * 100), ())}
    run = timed_rounds(calls, {"A": [10] * 3, "B": [10] * 3}, seed=None, block_warmup=False,
                       hard_deadline=real.monotonic() + 1.0)
    assert log == ["A"] * 4
    assert run.samples_ms["A"].tolist() == [300.0] * 4 and run.samples_ms["B"].size == 0
    assert run.order == (("A",),)
    assert run.stopped == "time limit reached during round 1 of 3; the run was cut there"
    # A limit that is never reached changes nothing.
    log.clear()
    run = timed_rounds(calls, {"A": [2] * 3, "B": [2] * 3}, seed=None, block_warmup=False,
                       hard_deadline=real.monotonic() + 3600)
    assert log == ["A", "A", "B", "B"] * 3 and run.stopped is None


def test_uneven_rounds_are_refused():
    with pytest.raises(ValueError, match="same number of rounds"):
        timed_rounds({"A": (print, ()), "B": (print, ())}, {"A": [1, 1], "B": [1]})


# -- the statistics --------------------------------------------------------------------------------

def _measured_run(monkeypatch, seed: int = 0) -> tuple[LatencyRun, dict[str, list[int]]]:
    """Two variants over 9 rounds of 5 calls, durations drawn here (B about 0.6x A, noisy)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(900_000, 1_300_000, 45)
    durations = {"A": [int(x) for x in a], "B": [int(x * rng.uniform(0.45, 0.8)) for x in a]}
    clock, log = _VirtualClock(), []
    _fake_time(monkeypatch, clock)
    calls = {k: (_fake(k, log, clock, list(v) + [1] * 9), ()) for k, v in durations.items()}
    run = timed_rounds(calls, {k: [5] * 9 for k in calls}, seed=seed, block_warmup=False)
    return run, durations


def test_samples_and_percentiles_are_numpys(monkeypatch):
    run, durations = _measured_run(monkeypatch)
    for k, ns in durations.items():
        assert run.samples_ms[k].tolist() == [x / 1e6 for x in ns]          # one stamp per call, nothing lost
        s = run.stats(k)
        p10, p50, p90, p99 = np.percentile(np.asarray(ns) / 1e6, [10, 50, 90, 99])
        assert (s.p10_ms, s.p50_ms, s.p90_ms, s.p99_ms) == (p10, p50, p90, p99)
        assert s.count == 45
    # Through the job boundary (nanosecond arrays and JSON) and back: the same run.
    back = LatencyRun.from_job(*run.to_job())
    for k in durations:
        assert back.samples_ms[k].tolist() == run.samples_ms[k].tolist()
        assert back.rounds_of[k].tolist() == run.rounds_of[k].tolist()
    assert back.order == run.order


@pytest.mark.parametrize("seed", [0, 3])
def test_the_ratio_interval_is_scipys_bootstrap(monkeypatch, seed):
    from scipy import stats

    run, durations = _measured_run(monkeypatch, seed)
    per_round = {k: np.median(np.asarray(v, dtype=np.float64).reshape(9, 5) / 1e6, axis=1)
                 for k, v in durations.items()}
    ratios = per_round["B"] / per_round["A"]
    est = run.ratio("A", "B", seed=seed)
    oracle = stats.bootstrap((ratios,), np.median, n_resamples=2000, confidence_level=0.95, method="percentile",
                             vectorized=True, axis=-1, rng=np.random.default_rng(seed)).confidence_interval
    assert est.rounds == 9 and est.ratio == float(np.median(ratios))
    assert (est.ci_low, est.ci_high) == (float(oracle.low), float(oracle.high))


# -- every caller goes through the one loop ---------------------------------------------------------

@pytest.fixture
def counted(monkeypatch):
    """``timed_rounds`` wrapped to record the variant ids of each call; the old loop must not run."""
    seen: list[tuple[str, ...]] = []
    real = latency.timed_rounds

    def wrapper(calls, blocks, **kw):
        seen.append(tuple(calls))
        return real(calls, blocks, **kw)
    monkeypatch.setattr(latency, "timed_rounds", wrapper)
    from studio.core.engines import sessions

    assert not hasattr(sessions, "measure_latency"), "the old second latency loop is back"
    return seen


@pytest.fixture
def tiny(tmp_path):
    return save(parse_model(TINY), tmp_path / "tiny.onnx")


def _ctx(tmp_path) -> JobContext:
    (tmp_path / "scratch").mkdir(exist_ok=True)
    return JobContext(scratch=tmp_path / "scratch", out_dir=tmp_path / "out")


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.linspace(-1, 1, 4, dtype=np.float32).reshape(1, 4)}


def test_profile_precision_and_quant_paths_call_the_same_loop(counted, tiny, tmp_path):
    from passes.quant_tools import measure_latencies
    from studio.accuracy.runs import pack_sets
    from studio.core.engines import RunOptions
    from studio.precision.latency import latency_job as precision_job

    # The profiler's job (api.profile, compare/A-B through profile), two variants on ONNX Runtime.
    arrays: dict = {}
    variants = [variant_args(vid, vid, tiny, parse_engine("ort").to_args(), _feeds(), i, arrays)
                for i, vid in enumerate(["a", "b"])]
    out = latency.latency_job({"variants": variants, "budget_s": 60.0,
                               **RunPlan(warmup=1, iterations=6, rounds=3).to_args()}, arrays, _ctx(tmp_path))
    profile_run = LatencyRun.from_job(out.data, out.arrays)
    assert counted == [("a", "b")]
    assert [profile_run.samples_ms[k].size for k in "ab"] == [6, 6] and len(profile_run.order) == 3

    # The precision variants' job, interleaved and one at a time (budget 0: the minimum 3 rounds).
    items = [{"key": k, "path": str(tiny), "engine": "onnxruntime", "options": RunOptions().to_args()}
             for k in ("fp32", "int8")]
    for interleave, per_round, expected in ((True, 3, [("fp32", "int8")]), (False, 8, [("fp32",), ("int8",)])):
        counted.clear()
        out = precision_job({"items": items, "budget_s": 0.0, "interleave": interleave}, pack_sets([_feeds()]),
                            _ctx(tmp_path))
        run = LatencyRun.from_job(out.data, out.arrays)
        assert counted == expected
        assert [run.samples_ms[k].size for k in ("fp32", "int8")] == [3 * per_round] * 2
        assert run.errors == {} and run.ratio("fp32", "int8").rounds == 3

    # The quantization passes' measurement (convert_fp16, int8 static/dynamic).
    counted.clear()
    rounds: dict[str, list[float]] = {}
    p10 = measure_latencies({"fp32": tiny, "int8": tiny}, _feeds(), _ctx(tmp_path), budget_s=0.0, rounds_out=rounds)
    assert counted == [("fp32", "int8")]
    assert set(p10) == {"fp32", "int8"} and all(v > 0 for v in p10.values())
    assert [len(rounds[k]) for k in ("fp32", "int8")] == [3, 3]


def test_a_variant_that_cannot_open_is_an_error_beside_the_others(counted, tiny, tmp_path):
    from studio.accuracy.runs import pack_sets
    from studio.core.engines import RunOptions
    from studio.precision.latency import latency_job as precision_job

    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    items = [{"key": "fp32", "path": str(tiny), "engine": "onnxruntime", "options": RunOptions().to_args()},
             {"key": "bad", "path": str(broken), "engine": "onnxruntime", "options": RunOptions().to_args()}]
    out = precision_job({"items": items, "budget_s": 0.0, "interleave": True}, pack_sets([_feeds()]), _ctx(tmp_path))
    run = LatencyRun.from_job(out.data, out.arrays)
    assert counted == [("fp32",)]
    assert run.measured("fp32") and not run.measured("bad") and "bad" in run.errors
    assert run.ratio("fp32", "bad") is None


def test_warm_up_is_not_in_the_samples(monkeypatch):
    clock, log = _VirtualClock(), []
    _fake_time(monkeypatch, clock)
    calls = {"A": (_fake("A", log, clock, [7_000_000, 5_000_000, 1_000_000, 1_000_000]), ())}
    warm = warm_up(calls, 2)
    run = timed_rounds(calls, {"A": [2]}, warmup_ns=warm)
    assert warm == {"A": [7_000_000, 5_000_000]}
    assert run.warmup_ms["A"].tolist() == [7.0, 5.0] and run.samples_ms["A"].tolist() == [1.0, 1.0]
