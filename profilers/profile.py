"""Profile several model versions on several engines, side by side.

Steps (each a sandbox job, so a model that hangs, blows memory or crashes an
engine fails its own variant with a one-line error and the caller lives):

1. cold start of every variant in a fresh worker (also the preflight: a
   variant that cannot even start is reported and left out of step 2);
2. warm latency of every surviving variant, interleaved in one worker
   (:mod:`profilers.latency`); if that shared run fails, each variant is
   timed alone and the report says so;
3. optional per-op (:mod:`profilers.ops`), memory (:mod:`profilers.memory`)
   and sweeps (:mod:`profilers.sweeps`) per variant.

Ratios compare every variant with the first one that ran (the baseline),
round by round, with a 95 % interval (:meth:`profilers.latency.LatencyRun.ratio`).
The machine's load average before and after the timed rounds is recorded
beside the figures. Side files (ORT profiles, synthesized traces, OpenVINO
cache, TensorRT EP caches) all land in ``out_dir``, the job folder.
"""

from __future__ import annotations

import logging
import math
import os
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from profilers import memory as memory_mod
from profilers import ops as ops_mod
from profilers.inputs import PreparedFeeds, batched_feeds, prepare_feeds
from profilers.latency import ColdStart, LatencyRun, RunPlan, cold_start, interleaved_latency, variant_args
from profilers.memory import MemoryProfile
from profilers.ops import OpProfile
from profilers.stats import LatencyStats, RatioEstimate
from profilers.sweeps import SweepResult, measure_sweep
from profilers.variants import EngineSpec, ProfileTarget, Variant, make_variants, unavailable_reason
from studio.core.engines import engine_limits, get_engine
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError, WorkerError
from studio.core.feeds import ImagePreprocess
from studio.core.paths import user_data_path
from studio.core.requests import ProfileOptions, ProfileRequest
from studio.core.model import model_weight_bytes
from studio.core.sandbox import (GiB, Limits, default_limits, limit_refusal, require_memory,
                                 room_for_weights)

log = logging.getLogger(__name__)

__all__ = ["MachineInfo", "Profile", "machine_facts", "ProfileOptions", "Progress", "RatioRow", "VariantProfile", "options_of",
           "run_profile"]

Progress = Callable[[float, str], None]   # (fraction 0..1, message); may raise to stop the profile


def run_plan(options: ProfileOptions) -> RunPlan:
    """The warm-latency plan of ``options``."""
    return RunPlan(warmup=options.warmup, iterations=options.iterations, duration_s=options.duration_s,
                   rounds=options.rounds, seed=options.seed)


def options_limits(options: ProfileOptions) -> Limits:
    """The worker's limits ``options`` ask for (the defaults where they name none)."""
    base = default_limits()
    return Limits(timeout_s=float(options.timeout_s or base.timeout_s),
                  memory_bytes=int(options.memory_gb * GiB) if options.memory_gb else base.memory_bytes,
                  cpu_threads=base.cpu_threads)


def image_preprocess(options: ProfileOptions) -> ImagePreprocess | None:
    """How the image folder's first image becomes the input (None without an image folder)."""
    if not options.images_dir:
        return None
    return ImagePreprocess(**{k: tuple(v) if isinstance(v, (list, tuple)) else v for k, v in options.preprocess})


def options_report(options: ProfileOptions) -> dict:
    """``options`` as a profile's JSON report shows them (file names only, the whole preprocessing)."""
    pre = image_preprocess(options)
    return {"warmup": options.warmup, "iterations": options.iterations, "duration_s": options.duration_s,
            "rounds": options.rounds, "per_op": options.per_op, "per_op_runs": options.per_op_runs,
            "memory": options.memory, "memory_iterations": options.memory_iterations,
            "batch_sizes": list(options.batch_sizes), "thread_counts": list(options.thread_counts),
            "concurrency": list(options.concurrency), "sweep_iterations": options.sweep_iterations,
            "dims": dict(options.dims), "inputs_npz": Path(options.inputs_npz).name if options.inputs_npz else None,
            "images_dir": Path(options.images_dir).name if options.images_dir else None,
            "preprocess": pre.to_dict() if pre is not None else None,
            "seed": options.seed, "timeout_s": options.timeout_s, "memory_gb": options.memory_gb,
            "ov_cache": options.ov_cache}


def options_of(request: ProfileRequest, files: Mapping[str, str | Path] | None = None) -> ProfileOptions:
    """The ``ProfileOptions`` a ``ProfileRequest`` asks for: the one place a request becomes the profiler's
    options (its checks say what is wrong). The request's data paths are made absolute against the current
    folder and refused when missing (``user_data_path``); ``files`` ({"inputs"/"images": path}) are where
    those files are on this machine instead (a remote request's package)."""
    files = files or {}

    def located(key: str, value: str | None, label: str) -> str | None:
        if files.get(key) is not None:
            return str(files[key])
        return str(user_data_path(value, label=label)) if value else None

    o = request.options
    return replace(o, inputs_npz=located("inputs", o.inputs_npz, "inputs file"),
                   images_dir=located("images", o.images_dir, "image folder"))


@dataclass(frozen=True)
class VariantProfile:
    """Everything measured for one (version, engine) variant."""

    variant: Variant
    error: str | None = None
    error_kind: str | None = None      # unavailable | timeout | memory | crashed | cancelled | error
    latency: LatencyStats | None = None
    samples_ms: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False, compare=False)
    warmup_ms: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False, compare=False)
    cold: ColdStart | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    ops: OpProfile | None = None
    memory: MemoryProfile | None = None
    sweeps: tuple[SweepResult, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None and self.latency is not None

    @property
    def id(self) -> str:
        return self.variant.id

    def histogram(self, bins: int = 40) -> dict:
        """Counts over [min, p99.9] (the tail beyond is counted in ``overflow``)."""
        if self.samples_ms.size == 0:
            return {"edges": [], "counts": [], "overflow": 0}
        hi = float(np.percentile(self.samples_ms, 99.9))
        lo = float(self.samples_ms.min())
        if hi <= lo:
            hi = lo + 1e-6
        counts, edges = np.histogram(self.samples_ms, bins=bins, range=(lo, hi))
        return {"edges": [round(float(e), 6) for e in edges], "counts": [int(c) for c in counts],
                "overflow": int((self.samples_ms > hi).sum())}

    def to_dict(self, *, include_samples: bool = False) -> dict:
        d = {"variant": self.variant.to_dict(), "ok": self.ok, "error": self.error, "error_kind": self.error_kind,
             "latency": self.latency.to_dict() if self.latency else None,
             "cold_start": self.cold.to_dict() if self.cold else None,
             "details": _jsonable(self.details), "notes": list(self.notes),
             "warmup_ms": [round(float(x), 5) for x in self.warmup_ms],
             "histogram": self.histogram(),
             "ops": self.ops.to_dict() if self.ops else None,
             "memory": self.memory.to_dict() if self.memory else None,
             "sweeps": [s.to_dict() for s in self.sweeps]}
        if include_samples:
            d["samples_ms"] = [round(float(x), 6) for x in self.samples_ms]
        return d


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass(frozen=True)
class RatioRow:
    """``other`` vs ``baseline``: ratio of median latency (< 1: other is faster)."""

    baseline_id: str
    other_id: str
    baseline_label: str
    other_label: str
    estimate: RatioEstimate
    p50_ratio: float                 # ratio of the overall p50s (not paired), for reference

    @property
    def verdict(self) -> str:
        return self.estimate.verdict(self.other_label, self.baseline_label)

    def to_dict(self) -> dict:
        return {"baseline": self.baseline_id, "other": self.other_id, **self.estimate.to_dict(),
                "p50_ratio": round(self.p50_ratio, 4), "verdict": self.verdict}


@dataclass(frozen=True)
class MachineInfo:
    cpu: str
    cpu_count: int
    load_before: tuple[float, ...]
    load_after: tuple[float, ...]
    python: str
    engines: Mapping[str, str | None]
    nvtx_attached: bool

    @property
    def busy(self) -> bool:
        """The 1-minute load average exceeded half the CPUs during the timed rounds."""
        peak = max([*self.load_before[:1], *self.load_after[:1], 0.0])
        return peak > 0.5 * max(self.cpu_count, 1)

    def to_dict(self) -> dict:
        return {"cpu": self.cpu, "cpu_count": self.cpu_count, "load_before": [round(x, 2) for x in self.load_before],
                "load_after": [round(x, 2) for x in self.load_after], "busy": self.busy, "python": self.python,
                "engines": dict(self.engines), "nvtx_attached": self.nvtx_attached}


@dataclass(frozen=True)
class Profile:
    """The result of :func:`run_profile` (and of ``api.profile``)."""

    variants: tuple[VariantProfile, ...]
    ratios: tuple[RatioRow, ...]
    machine: MachineInfo
    options: ProfileOptions
    feeds: tuple[str, ...]                       # how the inputs were made, per version
    seconds: float
    interleaved: bool                            # all variants timed in one worker, in shuffled rounds
    rounds: int
    warnings: tuple[str, ...] = ()
    out_dir: Path | None = field(default=None, compare=False, repr=False)

    @property
    def ok(self) -> bool:
        return bool(self.variants) and all(v.ok for v in self.variants)

    @property
    def baseline(self) -> VariantProfile | None:
        return next((v for v in self.variants if v.ok), None)

    def variant(self, variant_id: str) -> VariantProfile:
        for v in self.variants:
            if v.id == variant_id:
                return v
        raise KeyError(variant_id)

    def trace_path(self, variant_id: str) -> Path | None:
        """The per-op trace file of a variant (in the job folder), if it is still there."""
        v = self.variant(variant_id)
        if v.ops is None or not v.ops.trace_file or self.out_dir is None:
            return None
        path = self.out_dir / v.ops.trace_file
        return path if path.is_file() else None

    def to_dict(self, *, include_samples: bool = False) -> dict:
        return {"ok": self.ok, "seconds": round(self.seconds, 3), "interleaved": self.interleaved,
                "rounds": self.rounds, "baseline": self.baseline.id if self.baseline else None,
                "options": options_report(self.options), "machine": self.machine.to_dict(), "feeds": list(self.feeds),
                "warnings": list(self.warnings),
                "variants": [v.to_dict(include_samples=include_samples) for v in self.variants],
                "ratios": [r.to_dict() for r in self.ratios]}


# ============================================================================ orchestration

def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class _Steps:
    """Progress over a known number of steps; ``tick`` feeds the sandbox's on_tick."""

    def __init__(self, total: float, on_progress: Progress | None) -> None:
        self.total = max(total, 1.0)
        self.done = 0.0
        self.on_progress = on_progress
        self.weight = 1.0
        self.message = ""

    def start(self, message: str, weight: float = 1.0) -> Callable[[float], None] | None:
        self.message, self.weight = message, weight
        if self.on_progress is None:
            return None
        self.on_progress(min(self.done / self.total, 0.999), message)
        return self.tick

    def tick(self, elapsed: float) -> None:
        if self.on_progress is not None:
            partial = self.weight * (1 - math.exp(-elapsed / 20.0))   # creeps towards the step's end
            self.on_progress(min((self.done + partial) / self.total, 0.999), f"{self.message} · {elapsed:.0f} s")

    def finish(self) -> None:
        self.done += self.weight


def _reraise_cancel(exc: StudioError) -> None:
    """Stop (a cancelled worker) ends the whole profile; any other failure is the step's own."""
    if isinstance(exc, WorkerError) and exc.kind == "cancelled":
        raise exc


def _failed(exc: StudioError) -> dict[str, str]:
    """A failure as the variant's ``error`` and ``error_kind`` fields."""
    kind = exc.kind if isinstance(exc, WorkerError) else ("unavailable" if exc.code == ErrorCode.ENGINE_UNAVAILABLE
                                                         else "error")
    return {"error": str(exc), "error_kind": kind}


def _job_limits(base: Limits, specs: Sequence[EngineSpec]) -> Limits:
    # CUDA reserves huge address ranges: GPU variants run without RLIMIT_AS (the RSS watchdog stays).
    for engine in dict.fromkeys(s.engine for s in specs):   # a row's own needs (LiteRT: TensorFlow's room)
        base = engine_limits(engine, base)
    return replace(base, address_space_limit=False) if any(s.needs_gpu for s in specs) else base


def run_profile(targets: Sequence[ProfileTarget], engines: Sequence[EngineSpec], options: ProfileOptions, *,
                out_dir: Path, pool_key: str = "default", on_progress: Progress | None = None) -> Profile:
    """Profile every target on every engine; see the module docstring for the steps."""
    if not targets:
        raise StudioError("nothing to profile: give at least one model", code=ErrorCode.BAD_OPTION)
    if not engines:
        raise StudioError("no engine given", code=ErrorCode.BAD_OPTION)
    started = time.perf_counter()
    _require_room(targets, engines, options)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    job = _plan(targets, engines, options, out_dir, pool_key, on_progress)
    warnings = _feed_warnings(job.prepared)
    results: _Results = {v.id: {"variant": v} for v in job.variants}
    _cold_starts(job, results)
    timing = _warm_latency(job, results, warnings)
    for v in job.variants:
        if "latency" in results[v.id]:
            _extras(job, v, results[v.id])
    final = tuple(VariantProfile(**r) for r in results.values())
    ratios = _ratios(final, timing.run if timing.interleaved else None)
    if on_progress is not None:
        on_progress(1.0, "done")
    machine = _machine_info(timing)
    warnings.extend(_busy_warnings(machine))
    feeds = tuple(f"{t.label}: {p.source}" for t, p in zip(targets, job.prepared))
    return Profile(final, ratios, machine, options, feeds, time.perf_counter() - started, timing.interleaved,
                   timing.rounds, tuple(warnings), out_dir)


_Results = dict[str, dict[str, Any]]   # variant id -> the VariantProfile fields gathered so far
_Tick = Callable[[float], None] | None


@dataclass(frozen=True)
class _ProfileRun:
    """What every step of one profile shares, resolved once: the variants, their worker arguments
    and feeds, the limits, and where side files go."""

    targets: Sequence[ProfileTarget]
    variants: Sequence[Variant]
    options: ProfileOptions
    out_dir: Path
    pool_key: str
    limits: Limits
    prepared: Sequence[PreparedFeeds]
    vargs: Mapping[str, dict[str, Any]]
    arrays: Mapping[str, np.ndarray]
    steps: _Steps

    def arrays_for(self, variants: Sequence[Variant]) -> dict[str, np.ndarray]:
        """The feed arrays the given variants' jobs read (a worker gets only its own)."""
        return _subset_many(self.arrays, self.vargs, variants)

    def limits_for(self, variants: Sequence[Variant]) -> Limits:
        """The worker limits for a job over ``variants`` (GPU and LiteRT variants need looser ones)."""
        return _job_limits(self.limits, [v.engine for v in variants])


@dataclass(frozen=True)
class _Timing:
    """The outcome of step 2: the shared run (None when variants were timed alone or none could run)."""

    run: LatencyRun | None = None
    interleaved: bool = False
    rounds: int = 0
    load: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
    nvtx_attached: bool = False


def _held_limits(targets: Sequence[ProfileTarget], engines: Sequence[EngineSpec], options: ProfileOptions
                 ) -> tuple[int, int, Limits]:
    """(sessions, the weights they hold, the limits of a job that holds them all): the interleaved timing
    runs every version on every engine in one worker, each session with its model's weights. The 3 GiB
    default (or --memory-gb) refused a 6.4 GiB model after the load; it gets room for them, like the
    generation profile."""
    sessions = len(targets) * len(engines)
    held = sum(model_weight_bytes(t.path) for t in targets) * len(engines)
    return sessions, held, room_for_weights(options_limits(options), held)


def _require_room(targets: Sequence[ProfileTarget], engines: Sequence[EngineSpec], options: ProfileOptions) -> None:
    """The one-line refusal before any work where the job's limit cannot hold the sessions' weights."""
    sessions, held, limits = _held_limits(targets, engines, options)
    refusal = limit_refusal("profile", held, limits.memory_bytes,
                            whose="this model's" if sessions == 1 else f"{sessions} sessions'")
    if refusal is not None:
        raise StudioError(refusal, code=ErrorCode.TOO_LARGE)
    for t in targets:
        require_memory(t.path, "profile", in_worker=False)


def _plan(targets: Sequence[ProfileTarget], engines: Sequence[EngineSpec], options: ProfileOptions, out_dir: Path,
          pool_key: str, on_progress: Progress | None) -> _ProfileRun:
    """Resolve the variants and make their feeds once per version, so that every later step runs the
    same jobs on the same inputs (versions that take the same inputs get identical feeds)."""
    limits = _held_limits(targets, engines, options)[2]
    variants = make_variants(targets, engines)
    npz = Path(options.inputs_npz) if options.inputs_npz else None
    images = Path(options.images_dir) if options.images_dir else None
    prepared = [prepare_feeds(t.handle, dims=dict(options.dims), seed=options.seed, npz=npz, images=images,
                              preprocess=image_preprocess(options)) for t in targets]
    per_variant_steps = 1 + options.per_op + options.memory + len(options.sweeps)
    steps = _Steps(len(variants) * per_variant_steps + 3, on_progress)
    arrays: dict[str, np.ndarray] = {}
    vargs = {v.id: variant_args(v.id, v.label, targets[v.target_index].path, v.engine.to_args(),
                                prepared[v.target_index].feeds, i, arrays,
                                cache=options.ov_cache and v.engine.engine == "openvino")
             for i, v in enumerate(variants)}
    return _ProfileRun(targets, variants, options, out_dir, pool_key, limits, prepared, vargs, arrays, steps)


def _feed_warnings(prepared: Sequence[PreparedFeeds]) -> list[str]:
    """Versions with different inputs cannot share feeds: say so, since it weakens the comparison."""
    if len({p.signature() for p in prepared}) > 1:
        return ["the versions take different inputs (names, dtypes or shapes); each got its own feeds"]
    return []


def _cold_starts(job: _ProfileRun, results: _Results) -> None:
    """Step 1, also the preflight: a variant that cannot start here is marked failed, so the timed
    rounds leave it out instead of failing as a whole."""
    for v in job.variants:
        reason = unavailable_reason(v.engine)
        if reason:
            results[v.id].update(error=reason, error_kind="unavailable")
        else:
            results[v.id].update(_cold_start(job, v, job.steps.start(f"{v.label}: cold start")))
        job.steps.finish()


def _cold_start(job: _ProfileRun, v: Variant, tick: _Tick) -> dict[str, Any]:
    """One variant's cold start in a fresh worker (twice with the OpenVINO cache, to show the cached
    compile); a failure becomes the variant's error, except Stop, which ends the profile."""
    try:
        cold, details = cold_start(job.vargs[v.id], job.arrays_for([v]), out_dir=job.out_dir,
                                   limits=job.limits_for([v]), pool_key=job.pool_key, on_tick=tick)
        if job.options.ov_cache and v.engine.engine == "openvino":
            again, _ = cold_start(job.vargs[v.id], job.arrays_for([v]), out_dir=job.out_dir, limits=job.limits,
                                  pool_key=job.pool_key, on_tick=tick)
            cold = replace(cold, cached_session_ms=again.session_ms)
        return {"cold": cold, "details": details}
    except StudioError as exc:
        _reraise_cancel(exc)
        return _with_sizes_hint(_failed(exc), job.prepared[v.target_index])


def _with_sizes_hint(failed: dict[str, str], prepared: PreparedFeeds) -> dict[str, str]:
    """A run that failed on seeded inputs whose sizes were guessed says so and how to set them: a model often
    needs a real size no default can know (oww_melspectrogram's STFT Conv under 'samples' at 16 read only
    'Conv_3 Invalid input shape: {16}')."""
    if failed.get("error_kind") not in ("error", "crashed") or not prepared.guessed:
        return failed
    guessed = ", ".join(f"{k}={prepared.dims[k]}" for k in prepared.guessed[:6])
    return {**failed, "error": f"{failed['error']}; the inputs' sizes were guessed ({guessed}): set the model's "
                              "real ones with --dim NAME=VALUE (INPUT[AXIS]=VALUE for an unnamed dim), or give "
                              "--inputs X.npz"}


def _warm_latency(job: _ProfileRun, results: _Results, warnings: list[str]) -> _Timing:
    """Step 2: time every variant that started, interleaved in one worker so that the ratios are paired
    round by round; if that shared run fails, each variant is timed alone (and the report says so)."""
    runnable = [v for v in job.variants if "error" not in results[v.id]]
    if not runnable:
        return _Timing()
    interleaved = len(runnable) > 1
    tick = job.steps.start("timed rounds" if interleaved else f"{runnable[0].label}: timed iterations", weight=3)
    try:
        run = _timed(job, runnable, tick)
    except WorkerError as exc:
        _reraise_cancel(exc)
        if interleaved:
            timing = _timed_one_at_a_time(job, runnable, results, warnings, tick, exc)
        else:
            results[runnable[0].id].update(_failed(exc))
            timing = _Timing()
    else:
        _store_latency(run, runnable, results)
        warnings.extend(w for w in (run.note, run.stopped) if w)
        timing = _Timing(run, interleaved, run.rounds_planned if run.stopped is None else len(run.order),
                         (run.load_before, run.load_after), run.nvtx_attached)
    job.steps.finish()
    return timing


def _timed(job: _ProfileRun, variants: Sequence[Variant], tick: _Tick) -> LatencyRun:
    """The warm latency job (:mod:`profilers.latency`) over ``variants`` in one worker."""
    return interleaved_latency([job.vargs[v.id] for v in variants], job.arrays_for(variants), run_plan(job.options),
                               out_dir=job.out_dir, limits=job.limits_for(variants), pool_key=job.pool_key,
                               on_tick=tick)


def _timed_one_at_a_time(job: _ProfileRun, runnable: Sequence[Variant], results: _Results, warnings: list[str],
                         tick: _Tick, failure: WorkerError) -> _Timing:
    """The fallback of step 2: one worker per variant, so one bad variant cannot sink the others;
    ratios are then unpaired (they include machine drift)."""
    warnings.append(f"the interleaved run failed ({failure}); variants were timed one at a time, so "
                    "their ratios include machine drift")
    load: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
    for v in runnable:
        try:
            single = _timed(job, [v], tick)
        except WorkerError as inner:
            _reraise_cancel(inner)
            results[v.id].update(_failed(inner))
            continue
        _store_latency(single, [v], results)
        load = (single.load_before, single.load_after)
        warnings.extend(w for w in (single.note, single.stopped) if w)
    return _Timing(load=load)


def _extras(job: _ProfileRun, v: Variant, result: dict[str, Any]) -> None:
    """Step 3, the optional per-op, memory and sweeps of a timed variant; each failure is a note (or
    a failed sweep) on the variant, never its error, since its latency stands."""
    notes: list[str] = list(result.get("notes", ()))
    if job.options.per_op:
        ops = _noted(job, f"{v.label}: per-op", "per-op", notes, lambda tick: _per_op(job, v, tick))
        if ops is not None:
            result["ops"] = ops
    if job.options.memory:
        memory = _noted(job, f"{v.label}: memory", "memory", notes, lambda tick: _memory(job, v, tick))
        if memory is not None:
            result["memory"] = memory
    result["sweeps"] = tuple(_sweep(job, v, kind, values) for kind, values in job.options.sweeps)
    result["notes"] = tuple(notes)


def _noted(job: _ProfileRun, message: str, what: str, notes: list[str], measure: Callable[[_Tick], Any]) -> Any:
    """Run one optional measurement as a progress step; its failure is appended to ``notes``."""
    tick = job.steps.start(message)
    try:
        value = measure(tick)
    except StudioError as exc:
        _reraise_cancel(exc)
        notes.append(f"{what}: {exc}")
        value = None
    job.steps.finish()
    return value


def _per_op(job: _ProfileRun, v: Variant, tick: _Tick) -> OpProfile:
    """Per-op time from the engine's own profiler (:mod:`profilers.ops`)."""
    return ops_mod.measure_ops(job.vargs[v.id], job.arrays_for([v]), job.targets[v.target_index].handle.proto,
                               warmup=min(job.options.warmup, 5), runs=job.options.per_op_runs, out_dir=job.out_dir,
                               limits=job.limits_for([v]), pool_key=job.pool_key, on_tick=tick)


def _memory(job: _ProfileRun, v: Variant, tick: _Tick) -> MemoryProfile:
    """Peak and steady memory of the variant's worker (:mod:`profilers.memory`)."""
    return memory_mod.measure_variant_memory(job.vargs[v.id], job.arrays_for([v]), warmup=min(job.options.warmup, 5),
                                             iterations=job.options.memory_iterations, out_dir=job.out_dir,
                                             limits=job.limits_for([v]), pool_key=job.pool_key, on_tick=tick)


def _sweep(job: _ProfileRun, v: Variant, kind: str, values: Sequence[int]) -> SweepResult:
    """One sweep (threads, batch or concurrency) as a progress step; a batch sweep rebuilds the feeds
    per size. A failure is the sweep's error, so the other sweeps still run."""
    tick = job.steps.start(f"{v.label}: {kind} sweep")
    target, prepared = job.targets[v.target_index], job.prepared[v.target_index]
    from_files = bool(job.options.inputs_npz) or bool(job.options.images_dir)
    try:
        points = [(value, batched_feeds(target.handle, prepared, value, seed=job.options.seed, from_npz=from_files)
                   if kind == "batch" else dict(prepared.feeds)) for value in values]
        result = measure_sweep(job.vargs[v.id], kind, points, warmup=min(job.options.warmup, 5),
                               iterations=job.options.sweep_iterations, out_dir=job.out_dir,
                               limits=job.limits_for([v]), pool_key=job.pool_key, on_tick=tick)
    except StudioError as exc:
        _reraise_cancel(exc)
        result = SweepResult(v.id, kind, (), {}, error=str(exc))
    job.steps.finish()
    return result


def _machine_info(timing: _Timing) -> MachineInfo:
    """The machine beside the figures: CPU, load during the timed rounds and engine versions."""
    return MachineInfo(_cpu_model(), _cpu_count(), tuple(timing.load[0]), tuple(timing.load[1]),
                       platform.python_version(),
                       {name: get_engine(name).available().version for name in ("onnxruntime", "openvino",
                                                                                 "tensorrt")},
                       timing.nvtx_attached)


def machine_facts(load_before: Sequence[float] = (), load_after: Sequence[float] = (),
                  nvtx_attached: bool = False) -> MachineInfo:
    """The machine beside figures measured elsewhere (the generation profile): CPU, load, engine versions."""
    return _machine_info(_Timing(load=(tuple(load_before), tuple(load_after)), nvtx_attached=nvtx_attached))


def _busy_warnings(machine: MachineInfo) -> list[str]:
    """A loaded machine inflates absolute numbers; the interleaved ratios still hold."""
    if not machine.busy:
        return []
    return [f"the machine was busy (load average {max(machine.load_before[:1] + machine.load_after[:1]):.1f}"
            f" on {machine.cpu_count} CPUs): absolute numbers are pessimistic; the interleaved ratios "
            "are the figures to trust"]


def _subset(arrays: Mapping[str, np.ndarray], vargs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    return {key: arrays[key] for _, key in vargs["feeds"]}


def _subset_many(arrays: Mapping[str, np.ndarray], vargs: Mapping[str, Mapping[str, Any]],
                 variants: Sequence[Variant]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for v in variants:
        out.update(_subset(arrays, vargs[v.id]))
    return out


def _store_latency(run: LatencyRun, variants: Sequence[Variant], results: dict[str, dict[str, Any]]) -> None:
    for v in variants:
        samples = run.samples_ms[v.id]
        if samples.size == 0:
            results[v.id].update(error="no timed iterations completed", error_kind="timeout")
            continue
        details = {**results[v.id].get("details", {}), **run.details.get(v.id, {})}
        results[v.id].update(latency=run.stats(v.id), samples_ms=samples, warmup_ms=run.warmup_ms[v.id],
                             details=details)


def _ratios(variants: Sequence[VariantProfile], run: LatencyRun | None) -> tuple[RatioRow, ...]:
    ok = [v for v in variants if v.ok]
    if len(ok) < 2:
        return ()
    base = ok[0]
    rows = []
    for other in ok[1:]:
        estimate = run.ratio(base.id, other.id) if run is not None else None
        if estimate is None:   # timed one at a time: no pairing, no interval
            estimate = RatioEstimate(other.latency.p50_ms / base.latency.p50_ms, None, None, 0.0, 0)
        rows.append(RatioRow(base.id, other.id, base.variant.label, other.variant.label, estimate,
                             other.latency.p50_ms / base.latency.p50_ms))
    return tuple(rows)
