"""Latency: cold start in a fresh worker, and warm latency of several variants
measured interleaved in one worker.

Why interleaved: on a shared machine the speed of the CPU drifts by 2x within
minutes (another user's job, frequency scaling). Timing A for a minute and
then B for a minute attributes that drift to the models. So every variant is
opened in the same worker, warmed up, and then timed in *rounds*: each round
runs a block of iterations of every variant, in a freshly shuffled order, and
the ratio of two variants is computed round by round
(:func:`profilers.stats.paired_ratio`), which cancels the drift.

The timing loop (:func:`timed_loop`) runs inside the worker with the feeds
bound once: ``perf_counter_ns`` around each ``infer()``, results into a
preallocated list, no IPC and no NVTX call per iteration unless a profiler is
attached. When several variants share a worker, one untimed iteration starts
each block so that a variant does not pay for the caches its predecessor
evicted.

This is the studio's one latency measurement (docs/architecture.md, "One latency
measurement"): :func:`timed_rounds` is the loop, :class:`LatencyRun` its result.
The profiler's job here, the precision variants (:mod:`studio.precision.latency`)
and the quantization passes (:func:`passes.quant_tools.measure_latencies`) each
open their own runners and hand the bare calls to :func:`warm_up` and
:func:`timed_rounds`; percentiles and the ratio's bootstrap interval come from
:mod:`profilers.stats` through :meth:`LatencyRun.stats` and :meth:`LatencyRun.ratio`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from profilers.nvtx import ranges
from profilers.runners import open_runner
from profilers.stats import LatencyStats, RatioEstimate, latency_stats, paired_ratio
from studio.core.engines.base import check_model_file
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, run_job

log = logging.getLogger(__name__)

__all__ = ["Call", "ColdStart", "LatencyRun", "RunPlan", "block_sizes", "budgeted_rounds", "cold_start", "interleaved_latency",
           "runner_loop", "timed_loop", "timed_rounds", "warm_up"]

# Share of the job timeout the timed rounds may use (the rest: session creation, warm-up, reply).
_BUDGET_SHARE = 0.8     # of a job's time limit: what the timed rounds are planned to fill
_HARD_SHARE = 0.9       # of it: where they stop even mid-block (the rest is the reply's margin)


Call = tuple[Callable[..., Any], tuple]          # a bare call: the function and its positional args
Hooks = tuple[Callable[[], None], Callable[[], None]]


def timed_loop(fn: Callable[..., Any], iterations: int,
               hooks: tuple[Callable[[], None], Callable[[], None]] | None = None, args: tuple = (), *,
               stop_ns: int | None = None) -> list[int]:
    """Nanoseconds of each of ``iterations`` back-to-back calls ``fn(*args)`` (``perf_counter_ns``).

    ``stop_ns`` (a ``perf_counter_ns`` reading) ends the loop early, after the call that passes it:
    the caller's hard time limit, so a run whose estimate was too low returns fewer samples
    instead of being killed with none.

    ``hooks`` (NVTX push/pop) wrap each call when a profiler is attached; the
    loops without hooks are kept separate so the common case pays nothing.
    ``args`` are passed positionally (ORT: ``session.run, (None, feeds)``): a
    direct call with two arguments is measurably cheaper than a ``partial``."""
    clock = time.perf_counter_ns
    if stop_ns is not None:
        return _timed_loop_until(fn, iterations, hooks, args, stop_ns)
    out = [0] * iterations
    if hooks is None:
        # One clock read per iteration: iteration i lasts from stamp i to stamp i+1 (the loop's
        # own bookkeeping between them is a few ns; a second clock read would cost ~100 ns here).
        stamps = [0] * (iterations + 1)
        stamps[0] = clock()
        if len(args) == 2:
            a, b = args
            for i in range(1, iterations + 1):
                fn(a, b)
                stamps[i] = clock()
        elif not args:
            for i in range(1, iterations + 1):
                fn()
                stamps[i] = clock()
        else:
            for i in range(1, iterations + 1):
                fn(*args)
                stamps[i] = clock()
        for i in range(iterations):
            out[i] = stamps[i + 1] - stamps[i]
    else:
        push, pop = hooks
        for i in range(iterations):
            push()
            start = clock()
            fn(*args)
            out[i] = clock() - start
            pop()
    return out


def _timed_loop_until(fn: Callable[..., Any], iterations: int, hooks: Hooks | None, args: tuple,
                      stop_ns: int) -> list[int]:
    """:func:`timed_loop` with a stop time (one comparison more per call, kept out of the plain loops)."""
    clock = time.perf_counter_ns
    push, pop = hooks if hooks is not None else (None, None)
    out: list[int] = []
    for _ in range(iterations):
        if push is not None:
            push()
        start = clock()
        fn(*args)
        end = clock()
        out.append(end - start)
        if pop is not None:
            pop()
        if end > stop_ns:
            break
    return out


def runner_loop(runner: Any, iterations: int,
                hooks: tuple[Callable[[], None], Callable[[], None]] | None = None) -> list[int]:
    """:func:`timed_loop` over a runner's bare call (what the latency job times)."""
    fn, args = runner.call
    return timed_loop(fn, iterations, hooks, args)


def block_sizes(iterations: int, rounds: int) -> list[int]:
    """Split ``iterations`` into at most ``rounds`` nearly equal, non-empty blocks."""
    if iterations < 1:
        raise ValueError("iterations must be at least 1")
    rounds = max(1, min(rounds, iterations))
    base, extra = divmod(iterations, rounds)
    return [base + (1 if r < extra else 0) for r in range(rounds)]


@dataclass(frozen=True)
class LatencyRun:
    """What one latency measurement timed, per variant id: the studio's one latency result.

    ``samples_ms[k]``: every timed call of ``k`` in milliseconds, ``rounds_of[k]`` the round
    each came from, ``warmup_ms[k]`` the warm-up calls (not in the samples); ``order``: the
    variants' order in each round; ``errors``: variants that could not be opened or run
    (why). The job-level facts (``details``, ``note``, load averages, NVTX, ``seconds``) are
    filled by the job that ran the loop."""

    samples_ms: Mapping[str, np.ndarray] = field(repr=False)
    rounds_of: Mapping[str, np.ndarray] = field(repr=False)
    warmup_ms: Mapping[str, np.ndarray] = field(repr=False)
    order: tuple[tuple[str, ...], ...]
    rounds_planned: int
    stopped: str | None = None
    note: str | None = None
    block_warmup: bool = False
    details: Mapping[str, dict] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)
    load_before: tuple[float, ...] = (0.0, 0.0, 0.0)
    load_after: tuple[float, ...] = (0.0, 0.0, 0.0)
    nvtx_attached: bool = False
    seconds: float = 0.0

    def measured(self, vid: str) -> bool:
        """True when ``vid`` has at least one timed call."""
        return vid in self.samples_ms and self.samples_ms[vid].size > 0

    def stats(self, vid: str) -> LatencyStats:
        """Percentiles (p10, p50, p90, p99, p99.9), mean, min, max of ``vid``'s samples."""
        return latency_stats(self.samples_ms[vid])

    @property
    def rounds_run(self) -> int:
        """Rounds that timed at least one call (of any variant)."""
        return max((int(of.max()) + 1 for of in self.rounds_of.values() if of.size), default=0)

    def round_medians(self, vid: str, rounds: int | None = None) -> np.ndarray:
        """Median latency of ``vid`` in each round 0..rounds-1 (default: the rounds that ran;
        nan where it has none)."""
        rounds = self.rounds_run if rounds is None else rounds
        samples, of = self.samples_ms[vid], self.rounds_of[vid]
        out = np.full(rounds, np.nan)
        for r in range(rounds):
            block = samples[of == r]
            if block.size:
                out[r] = float(np.median(block))
        return out

    def ratio(self, baseline: str, other: str, *, seed: int = 0) -> RatioEstimate | None:
        """``other / baseline`` from their medians round by round (the machine's drift cancels):
        the median ratio and its 95 % bootstrap interval; None when no round timed both."""
        if not (self.measured(baseline) and self.measured(other)):
            return None
        try:
            return paired_ratio(self.round_medians(baseline), self.round_medians(other), seed=seed)
        except ValueError:
            return None

    @classmethod
    def combine(cls, runs: Mapping[str, LatencyRun], errors: Mapping[str, str] | None = None) -> LatencyRun:
        """Variants timed one after the other (separate runs) as one result; not interleaved, so
        ``order`` is empty and their ratios carry the machine's drift."""
        return cls({k: r.samples_ms[k] for k, r in runs.items()}, {k: r.rounds_of[k] for k, r in runs.items()},
                   {k: r.warmup_ms[k] for k, r in runs.items()}, (),
                   max((r.rounds_planned for r in runs.values()), default=0),
                   errors=dict(errors or {}), seconds=sum(r.seconds for r in runs.values()))

    def to_job(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """JSON data and arrays for a :class:`~studio.core.jobs.JobOutput` (read back by :meth:`from_job`)."""
        ids = list(self.samples_ms)
        arrays: dict[str, np.ndarray] = {}
        for i, vid in enumerate(ids):
            arrays[f"t{i}"] = np.rint(self.samples_ms[vid] * 1e6).astype(np.int64)
            arrays[f"r{i}"] = np.asarray(self.rounds_of[vid], dtype=np.int32)
            arrays[f"w{i}"] = np.rint(self.warmup_ms[vid] * 1e6).astype(np.int64)
        data = {"ids": ids, "details": [dict(self.details.get(vid, {})) for vid in ids],
                "errors": dict(self.errors), "order": [[ids.index(k) for k in o] for o in self.order],
                "rounds_planned": self.rounds_planned, "stopped": self.stopped, "note": self.note,
                "block_warmup": self.block_warmup, "load_before": list(self.load_before),
                "load_after": list(self.load_after), "nvtx": self.nvtx_attached, "seconds": self.seconds}
        return data, arrays

    @classmethod
    def from_job(cls, data: Mapping[str, Any], arrays: Mapping[str, np.ndarray], *,
                 default_seconds: float = 0.0) -> LatencyRun:
        """The run a job returned with :meth:`to_job` (nanosecond arrays to milliseconds)."""
        ids = [str(x) for x in data.get("ids", [])]
        samples = {vid: arrays[f"t{i}"].astype(np.float64) / 1e6 for i, vid in enumerate(ids)}
        rounds_of = {vid: arrays[f"r{i}"] for i, vid in enumerate(ids)}
        warmup = {vid: arrays[f"w{i}"].astype(np.float64) / 1e6 for i, vid in enumerate(ids)}
        return cls(samples, rounds_of, warmup, tuple(tuple(ids[i] for i in o) for o in data.get("order", [])),
                   int(data.get("rounds_planned", 0)), data.get("stopped"), data.get("note"),
                   bool(data.get("block_warmup")), dict(zip(ids, data.get("details", []))),
                   dict(data.get("errors") or {}), tuple(data.get("load_before", (0, 0, 0))),
                   tuple(data.get("load_after", (0, 0, 0))), bool(data.get("nvtx")),
                   float(data.get("seconds", default_seconds)))



def warm_up(calls: Mapping[str, Call], iterations: int) -> dict[str, list[int]]:
    """Nanoseconds of ``iterations`` warm-up calls of each variant, one variant after the other
    (at least one call each: its time is the planner's estimate). Not part of the samples."""
    return {key: timed_loop(fn, max(1, iterations), args=args) for key, (fn, args) in calls.items()}


def timed_rounds(calls: Mapping[str, Call], blocks: Mapping[str, Sequence[int]], *,
                 warmup_ns: Mapping[str, Sequence[int]] | None = None, block_warmup: bool | None = None,
                 settle_s: float = 0.0, seed: int | None = 0, deadline: float | None = None, min_rounds: int = 1,
                 hooks: Mapping[str, Hooks | None] | None = None, hard_deadline: float | None = None) -> LatencyRun:
    """The studio's one latency loop: every variant's ``blocks[key][r]`` timed calls in round ``r``.

    Each round runs a block of every variant; the order within a round is a fresh permutation
    drawn from ``seed`` (``seed=None``: the order of ``calls``, A, B, A, B...). Before a block:
    a ``settle_s`` pause (lets the previous engine's spinning threads go idle) and, when
    ``block_warmup`` (default: more than one variant), one untimed call, so a variant does not
    pay for the caches its predecessor evicted. After round ``r``, past ``deadline``
    (``time.monotonic``) and with at least ``min_rounds`` done, the run stops and says so.
    ``hard_deadline`` (``time.monotonic``) stops it even inside a block: the job's own time limit,
    which a run planned from a too-low warm-up estimate would otherwise overrun."""
    ids = list(calls)
    if not ids:
        raise ValueError("no variant to time")
    planned = len(blocks[ids[0]])
    if planned < 1 or any(len(blocks[k]) != planned for k in ids):
        raise ValueError("every variant needs the same number of rounds (at least one)")
    interleaved = len(ids) > 1
    block_warmup = interleaved if block_warmup is None else block_warmup
    rng = np.random.default_rng(seed) if seed is not None else None
    hooks = hooks or {}
    times: dict[str, list[int]] = {k: [] for k in ids}
    rounds_of: dict[str, list[int]] = {k: [] for k in ids}
    order_log: list[tuple[str, ...]] = []
    stopped = None
    started = time.monotonic()
    stop_ns = (None if hard_deadline is None
               else time.perf_counter_ns() + int(max(hard_deadline - started, 0.0) * 1e9))
    for r in range(planned):
        order = [ids[int(i)] for i in rng.permutation(len(ids))] if rng is not None and interleaved else ids
        ran: list[str] = []
        cut = False
        for key in order:
            fn, args = calls[key]
            if settle_s > 0 and interleaved:
                time.sleep(settle_s)
            if block_warmup:
                fn(*args)
            planned_n = int(blocks[key][r])
            block = timed_loop(fn, planned_n, hooks.get(key), args, stop_ns=stop_ns)
            times[key].extend(block)
            rounds_of[key].extend([r] * len(block))
            ran.append(key)
            if stop_ns is not None and time.perf_counter_ns() > stop_ns:
                cut = len(block) < planned_n or len(ran) < len(order) or r + 1 < planned
                break
        order_log.append(tuple(ran))
        if cut:
            stopped = f"time limit reached during round {r + 1} of {planned}; the run was cut there"
            break
        if deadline is not None and r + 1 < planned and r + 1 >= min_rounds and time.monotonic() > deadline:
            stopped = f"time budget reached after {r + 1} of {planned} rounds"
            break
    warm = warmup_ns or {}
    return LatencyRun(samples_ms={k: np.asarray(times[k], dtype=np.float64) / 1e6 for k in ids},
                      rounds_of={k: np.asarray(rounds_of[k], dtype=np.int32) for k in ids},
                      warmup_ms={k: np.asarray(warm.get(k, ()), dtype=np.float64) / 1e6 for k in ids},
                      order=tuple(order_log), rounds_planned=planned, stopped=stopped,
                      block_warmup=block_warmup, seconds=time.monotonic() - started)


def budgeted_rounds(calls: Mapping[str, Call], budget_s: float, *, per_round: int = 3, min_rounds: int = 3,
                    max_rounds: int = 20, settle_s: float = 0.05) -> LatencyRun:
    """:func:`timed_rounds` sized by a time budget instead of a plan (the precision variants and the
    quantization passes): one warm-up call per variant, then rounds of ``per_round`` timed calls
    each, block warm-up on, until ``budget_s`` (counted from here) is spent -- at least
    ``min_rounds``, at most ``max_rounds``. Short blocks, many rounds: on a shared machine the load
    changes by the second, and each variant must see the same mix of quiet and busy moments."""
    deadline = time.monotonic() + budget_s
    warm = warm_up(calls, 1)
    return timed_rounds(calls, {k: [per_round] * max_rounds for k in calls}, warmup_ns=warm, block_warmup=True,
                        settle_s=settle_s, deadline=deadline, min_rounds=min_rounds)


@dataclass(frozen=True)
class RunPlan:
    """How many iterations, or for how long, and in how many interleaved rounds."""

    warmup: int = 10
    iterations: int | None = 100       # per variant; None: use duration_s
    duration_s: float | None = None    # total timed seconds, shared equally by the variants
    rounds: int = 20
    seed: int = 0

    def __post_init__(self) -> None:
        if (self.iterations is None) == (self.duration_s is None):
            raise ValueError("give either iterations or duration_s")
        if self.iterations is not None and self.iterations < 1:
            raise ValueError("iterations must be at least 1")
        if self.duration_s is not None and not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise ValueError("duration_s must be a positive number of seconds")
        if self.warmup < 0 or self.rounds < 1:
            raise ValueError("warmup must be >= 0 and rounds >= 1")

    def to_args(self) -> dict:
        return {"warmup": self.warmup, "iterations": self.iterations, "duration_s": self.duration_s,
                "rounds": self.rounds, "seed": self.seed}


def _feeds_of(variant: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: arrays[key] for name, key in variant["feeds"]}


def _plan_blocks(args: Mapping[str, Any], estimates_s: list[float], budget_s: float) -> tuple[list[list[int]], str | None]:
    """Per-variant block sizes for every round; shrinks the run to fit the time budget."""
    variants = len(estimates_s)
    rounds = int(args["rounds"])
    note = None
    if args.get("iterations"):
        iterations = int(args["iterations"])
        needed = iterations * sum(estimates_s)
        if needed > budget_s:
            fit = max(1, int(budget_s / max(sum(estimates_s), 1e-9)))
            note = (f"asked for {iterations} iterations per variant (~{needed:.0f} s); ran {fit} to fit the "
                    f"{budget_s:.0f} s time budget (raise the timeout or use a duration)")
            iterations = fit
        return [block_sizes(iterations, rounds) for _ in range(variants)], note
    duration = min(float(args["duration_s"]), budget_s)
    if duration < float(args["duration_s"]):
        note = f"duration cut to {duration:.0f} s to fit the time budget"
    rounds = max(1, rounds)
    blocks = []
    for estimate in estimates_s:
        per_block = duration / (variants * rounds * max(estimate, 1e-9))
        blocks.append([max(1, int(per_block))] * rounds)
    return blocks, note


@job("profile.latency")
def latency_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    """Open every variant, warm each up, then time interleaved rounds (see the module docs)."""
    started = time.monotonic()
    deadline = started + float(args["budget_s"])
    hard_deadline = started + float(args.get("hard_budget_s", args["budget_s"]))
    load_before = os.getloadavg()
    nv = ranges()
    runners = []
    ids = [str(v["id"]) for v in args["variants"]]
    try:
        for v in args["variants"]:
            ctx.set_stage(f"{v['label']}: session creation")
            with nv.range(f"session {v['id']}"):
                runners.append(open_runner(v["model_path"], v["engine"], _feeds_of(v, arrays), out_dir=ctx.out_dir,
                                           cache=bool(v.get("cache"))))
        calls = dict(zip(ids, (runner.call for runner in runners)))
        warmups: dict[str, list[int]] = {}
        for v, vid in zip(args["variants"], ids):
            ctx.set_stage(f"{v['label']}: warm-up")
            with nv.range(f"warmup {v['id']}"):
                warmups.update(warm_up({vid: calls[vid]}, int(args["warmup"])))
        estimates = [float(np.median(warmups[vid][len(warmups[vid]) // 2:])) / 1e9 for vid in ids]
        budget = max(deadline - time.monotonic(), 0.0)
        blocks, note = _plan_blocks(args, estimates, budget)
        hooks = {vid: nv.iteration_hooks(f"iteration {v['id']}") for vid, v in zip(ids, args["variants"])}
        ctx.set_stage("timed iterations")
        run = timed_rounds(calls, dict(zip(ids, blocks)), warmup_ns=warmups, seed=int(args.get("seed", 0)),
                           deadline=deadline, hooks=hooks, hard_deadline=hard_deadline)
        details = {vid: dict(runner.details) for vid, runner in zip(ids, runners)}
    finally:
        for runner in runners:
            runner.close()
    run = dataclasses.replace(run, details=details, note=note, load_before=tuple(load_before),
                              load_after=tuple(os.getloadavg()), nvtx_attached=nv.attached,
                              seconds=time.monotonic() - started)
    data, out_arrays = run.to_job()
    return JobOutput(data=data, arrays=out_arrays)


def _ort_profile_phases(path: str | None) -> dict[str, float]:
    """model_loading_uri / session_initialization durations (ms) from an ORT profile."""
    if not path:
        return {}
    try:
        events = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    finally:
        # scratch: ORT's profile file in the job folder; only its two numbers are kept
        Path(path).unlink(missing_ok=True)
    out: dict[str, float] = {}
    for event in events if isinstance(events, list) else []:
        if isinstance(event, dict) and event.get("cat") == "Session":
            name = event.get("name")
            if name in ("model_loading_uri", "model_loading_array", "session_initialization"):
                out[name] = float(event.get("dur", 0)) / 1000.0
    return out


@job("profile.cold")
def cold_start_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    """First contact in a fresh worker: import, load, session creation, first and second inference."""
    v = args["variant"]
    nv = ranges()
    ctx.set_stage(f"{v['label']}: session creation (cold)")
    with nv.range(f"cold session {v['id']}"):
        # profile_tag: an engine that writes a profile (ONNX Runtime) separates loading from initializing
        runner = open_runner(v["model_path"], v["engine"], _feeds_of(v, arrays), out_dir=ctx.out_dir,
                             profile_tag="cold", cache=bool(v.get("cache")))
    try:
        phases = _ort_profile_phases(runner.end_profiling())     # None (no phases) where the engine has no profile
        ctx.set_stage(f"{v['label']}: first inference")
        with nv.range(f"first inference {v['id']}"):
            first, second = timed_loop(runner.infer, 2)
        timings = dict(runner.timings)
        if phases:
            timings["load_ms"] = phases.get("model_loading_uri", phases.get("model_loading_array"))
            timings["initialize_ms"] = phases.get("session_initialization")
        return JobOutput(data={"timings": timings, "first_inference_ms": first / 1e6,
                               "second_inference_ms": second / 1e6, "details": dict(runner.details)})
    finally:
        runner.close()


# ============================================================================ parent side

@dataclass(frozen=True)
class ColdStart:
    """First use of a model, in a fresh worker process (milliseconds).

    ``worker_start_ms``: process start to ready (Python and numpy, no engine);
    ``import_ms``: importing the engine; ``load_ms``: reading the model (ORT's
    own ``model_loading`` event; OpenVINO's ONNX frontend read); ``session_ms``:
    session creation / compilation (for ORT it includes the load);
    ``first_inference_ms`` vs ``warm_inference_ms``: the first call's extra cost;
    ``cached_session_ms``: OpenVINO compile again with its model cache warm;
    ``convert_ms``: MNN / LiteRT conversion from ONNX (their ``session_ms`` is the runtime load).
    """

    worker_start_ms: float | None
    import_ms: float | None
    load_ms: float | None
    session_ms: float | None
    first_inference_ms: float
    warm_inference_ms: float
    cached_session_ms: float | None = None
    convert_ms: float | None = None

    @property
    def time_to_first_result_ms(self) -> float:
        return sum(x or 0.0 for x in (self.worker_start_ms, self.import_ms, self.convert_ms, self.session_ms,
                                      self.first_inference_ms))

    def to_dict(self) -> dict:
        def r(x: float | None) -> float | None:
            return None if x is None else round(float(x), 3)
        return {"worker_start_ms": r(self.worker_start_ms), "import_ms": r(self.import_ms), "load_ms": r(self.load_ms),
                "session_ms": r(self.session_ms), "first_inference_ms": r(self.first_inference_ms),
                "warm_inference_ms": r(self.warm_inference_ms), "cached_session_ms": r(self.cached_session_ms),
                "convert_ms": r(self.convert_ms),
                "time_to_first_result_ms": r(self.time_to_first_result_ms)}


def variant_args(variant_id: str, label: str, model_path: Path, engine_args: Mapping[str, Any],
                 feeds: Mapping[str, np.ndarray], index: int, arrays: dict[str, np.ndarray], *,
                 cache: bool = False) -> dict[str, Any]:
    """JSON for one variant; its feeds are added to ``arrays`` under generated keys."""
    keys = []
    for j, (name, value) in enumerate(feeds.items()):
        key = f"f{index}_{j}"
        arrays[key] = np.asarray(value)
        keys.append([name, key])
    return {"id": variant_id, "label": label, "model_path": str(check_model_file(model_path)),
            "engine": dict(engine_args),
            "feeds": keys, "cache": cache}


def cold_start(variant: dict[str, Any], arrays: Mapping[str, np.ndarray], *, out_dir: Path, limits: Limits,
               pool_key: str, on_tick: Callable[[float], None] | None = None) -> tuple[ColdStart, dict]:
    """Run the cold-start job in a one-off worker; (result, engine details)."""
    wall = time.perf_counter()
    result = run_job("profile.cold", {"variant": variant}, arrays, stage=f"{variant['label']} (cold start)",
                     limits=limits, out_dir=out_dir, fresh=True, pool_key=pool_key, on_tick=on_tick)
    wall_ms = (time.perf_counter() - wall) * 1000
    data = result.data
    timings = data.get("timings", {})
    worker_start = max(wall_ms - result.seconds * 1000, 0.0)
    cold = ColdStart(worker_start_ms=worker_start, import_ms=timings.get("import_ms"), load_ms=timings.get("load_ms"),
                     session_ms=timings.get("session_ms"), first_inference_ms=float(data["first_inference_ms"]),
                     convert_ms=timings.get("convert_ms"),
                     warm_inference_ms=float(data["second_inference_ms"]))
    return cold, dict(data.get("details", {}))


def interleaved_latency(variants: Sequence[dict[str, Any]], arrays: Mapping[str, np.ndarray], plan: RunPlan, *,
                        out_dir: Path, limits: Limits, pool_key: str,
                        on_tick: Callable[[float], None] | None = None) -> LatencyRun:
    """Time every variant in one worker, interleaved (one job, no IPC per iteration)."""
    # Each variant may take the stage's time limit to open (they all opened once already, in
    # the cold-start preflight, so none of them hangs); the timed part gets its share on top.
    timeout = limits.timeout_s * max(1, len(variants)) + (plan.duration_s or 0.0)
    budget = timeout * _BUDGET_SHARE
    job_limits = Limits(timeout_s=timeout, memory_bytes=limits.memory_bytes, cpu_threads=limits.cpu_threads,
                        address_space_limit=limits.address_space_limit)
    args = {"variants": list(variants), "budget_s": budget, "hard_budget_s": timeout * _HARD_SHARE, **plan.to_args()}
    result = run_job("profile.latency", args, arrays, stage="latency", limits=job_limits, out_dir=out_dir,
                     pool_key=pool_key, on_tick=on_tick)
    return LatencyRun.from_job(result.data, result.arrays, default_seconds=result.seconds)
