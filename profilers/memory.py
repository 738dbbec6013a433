"""Memory: the worker's resident memory over a run, Python-side allocation
sites, and a leak check.

In the worker (:func:`measure_memory`): a sampler thread reads the process's
resident set from ``/proc/self/statm`` (psutil elsewhere) every few
milliseconds while the model is opened, warmed up and run; ``tracemalloc``
(started after warm-up, so the engine's one-off Python allocations are not
counted as growth) gives the top Python allocation sites; at evenly spaced
checkpoints RSS and the traced total are recorded against the iteration count.

In the parent (:func:`leak_verdict`): the growth per iteration of each series
is a least-squares slope over the checkpoints after the first quarter (arenas
and caches fill up at the start). A series *leaks* when its slope is
significant (t > 4) and the growth over the run exceeds a floor (RSS moves in
pages and allocator chunks: 2 MiB; traced Python memory: 256 KiB); it is
*clean* when even the upper end of the slope (slope + 3 standard errors) would
grow less than the floor; otherwise the check is *inconclusive* and says so,
with the slope and its noise.

Test hook: ``profile.memory_selftest`` (:mod:`profilers.memory_selftest`) runs
the same measurement on a synthetic workload with an optional planted leak.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from profilers.latency import timed_loop
from profilers.nvtx import ranges
from profilers.runners import open_runner
from profilers.stats import Slope, linear_slope
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, run_job
from studio.core.worker import vm_hwm_bytes

__all__ = ["AllocationSite", "LeakCheck", "MemoryProfile", "RssSampler", "leak_verdict", "measure_memory",
           "memory_profile"]

RSS_FLOOR_BYTES = 2 * 2**20
TRACED_FLOOR_BYTES = 256 * 2**10
_SIGNIFICANT_T = 4.0
_MAX_TIMELINE_POINTS = 600


# ============================================================================ sampler (worker side)

def rss_reader() -> Callable[[], int]:
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    if os.path.exists("/proc/self/statm"):
        def read() -> int:
            with open("/proc/self/statm", "rb") as fh:
                return int(fh.read().split()[1]) * page
        return read
    import psutil

    process = psutil.Process()
    return lambda: int(process.memory_info().rss)


class RssSampler:
    """Samples this process's resident memory on a thread: (seconds, bytes, phase).

    Why a fixed buffer: the samples are taken while the leak check watches the Python heap and RSS, so they
    must not grow with wall time (a list of tuples grew ~130 B per sample: on a slow model that read as a leak
    per inference). The buffer is allocated up front; when it is full every pair of samples is folded into its
    larger one (the peak survives) and the interval doubles."""

    def __init__(self, interval_s: float = 0.005, capacity: int = 8192) -> None:
        self.interval_s = interval_s
        self.read = rss_reader()
        self._cap = max(16, capacity - capacity % 2)
        self._t = np.zeros(self._cap, dtype=np.float64)
        self._rss = np.zeros(self._cap, dtype=np.int64)
        self._ph = np.zeros(self._cap, dtype=np.int16)
        self._n = 0
        self._phases: list[str] = ["start"]
        self._phase = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="studio-rss-sampler", daemon=True)
        self._t0 = time.perf_counter()

    @property
    def phase(self) -> str:
        return self._phases[self._phase]

    @property
    def samples(self) -> list[tuple[float, int, str]]:
        with self._lock:
            n = self._n
            return [(float(self._t[i]), int(self._rss[i]), self._phases[int(self._ph[i])]) for i in range(n)]

    def _fold(self) -> None:
        """Halve the samples in place, keeping the larger of each pair; sample half as often from now on."""
        half = self._cap // 2
        pick = np.arange(half) * 2 + (self._rss[1::2] > self._rss[0::2])
        self._t[:half], self._rss[:half], self._ph[:half] = self._t[pick], self._rss[pick], self._ph[pick]
        self._n = half
        self.interval_s *= 2

    def _add(self, phase: int) -> None:
        value = self.read()
        with self._lock:
            if self._n == self._cap:
                self._fold()
            self._t[self._n] = time.perf_counter() - self._t0
            self._rss[self._n] = value
            self._ph[self._n] = phase
            self._n += 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._add(self._phase)
            self._stop.wait(self.interval_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._add(self._phase)

    def mark(self, phase: str) -> None:
        if phase not in self._phases:
            self._phases.append(phase)
        index = self._phases.index(phase)
        self._add(index)
        self._phase = index


def _peak_hwm() -> int | None:
    hwm = vm_hwm_bytes()
    if hwm is not None:
        return hwm
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * (1 if sys.platform == "darwin" else 1024)
    except Exception:  # noqa: BLE001
        return None


def _site_label(filename: str) -> str:
    """A short, path-free location: the part after site-packages, else the file name."""
    marker = "site-packages" + os.sep
    if marker in filename:
        return filename.split(marker, 1)[1]
    return Path(filename).name


def _downsample(samples: Sequence[tuple[float, int, str]], limit: int) -> list[list[Any]]:
    if len(samples) <= limit:
        return [[round(t, 5), int(b), p] for t, b, p in samples]
    step = len(samples) / limit
    keep = {int(i * step) for i in range(limit)} | {int(np.argmax([s[1] for s in samples])), len(samples) - 1}
    return [[round(samples[i][0], 5), int(samples[i][1]), samples[i][2]] for i in sorted(keep)]


def measure_memory(open_fn: Callable[[], Callable[[], Any]], *, warmup: int, iterations: int,
                   checkpoints: int = 40, top: int = 10, sample_interval_s: float = 0.005) -> dict[str, Any]:
    """Open (``open_fn`` returns the infer callable), warm up, then run ``iterations``
    with RSS/tracemalloc checkpoints. Returns JSON-able data for :func:`memory_profile`."""
    nv = ranges()
    was_tracing = tracemalloc.is_tracing()
    with RssSampler(sample_interval_s) as sampler:
        baseline = sampler.read()
        sampler.mark("session creation")
        with nv.range("memory: session creation"):
            infer = open_fn()
        sampler.mark("warm-up")
        with nv.range("memory: warm-up"):
            timed_loop(infer, warmup)
        if not was_tracing:
            tracemalloc.start(8)
        first = tracemalloc.take_snapshot()
        sampler.mark("iterations")
        every = max(1, iterations // max(checkpoints, 1))
        points: list[list[float]] = [[0, sampler.read(), tracemalloc.get_traced_memory()[0]]]
        with nv.range("memory: iterations"):
            done = 0
            while done < iterations:
                n = min(every, iterations - done)
                timed_loop(infer, n)
                done += n
                points.append([done, sampler.read(), tracemalloc.get_traced_memory()[0]])
        last = tracemalloc.take_snapshot()
        traced_peak = tracemalloc.get_traced_memory()[1]
        if not was_tracing:
            tracemalloc.stop()
        sampler.mark("done")
    own = [tracemalloc.Filter(False, __file__), tracemalloc.Filter(False, tracemalloc.__file__),
           tracemalloc.Filter(False, threading.__file__)]   # the sampler's own bookkeeping
    sites = []
    for stat in last.filter_traces(own).compare_to(first.filter_traces(own), "lineno")[:top]:
        frame = stat.traceback[0]
        sites.append({"site": f"{_site_label(frame.filename)}:{frame.lineno}", "size_diff": int(stat.size_diff),
                      "count_diff": int(stat.count_diff), "size": int(stat.size)})
    samples = sampler.samples
    timeline = _downsample(samples, _MAX_TIMELINE_POINTS)
    peak = max([s[1] for s in samples] + [_peak_hwm() or 0])
    return {"baseline_rss": int(baseline), "peak_rss": int(peak), "timeline": timeline, "checkpoints": points,
            "sites": sites, "traced_peak": int(traced_peak), "iterations": iterations}


@job("profile.memory")
def memory_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    """Memory timeline, allocation sites and leak checkpoints of one variant."""
    v = args["variant"]
    feeds = {name: arrays[key] for name, key in v["feeds"]}
    ctx.set_stage(f"{v['label']}: memory")
    holder: list[Any] = []

    def open_fn() -> Callable[[], Any]:
        runner = open_runner(v["model_path"], v["engine"], feeds, out_dir=ctx.out_dir)
        holder.append(runner)
        return runner.infer

    try:
        data = measure_memory(open_fn, warmup=int(args["warmup"]), iterations=int(args["iterations"]))
    finally:
        for runner in holder:
            runner.close()
    return JobOutput(data=data)


# ============================================================================ parent side

@dataclass(frozen=True)
class SeriesCheck:
    """Growth of one series (bytes per iteration) and what it means."""

    name: str                  # "rss" | "python"
    slope: float               # bytes per iteration
    stderr: float
    noise: float               # residual std (bytes)
    growth: float              # slope x iterations measured
    floor: float
    verdict: str               # leak | no leak | inconclusive

    def to_dict(self) -> dict:
        return {"name": self.name, "slope_bytes_per_iter": round(self.slope, 2), "stderr": round(self.stderr, 2),
                "noise_bytes": round(self.noise, 1), "growth_bytes": round(self.growth, 1),
                "floor_bytes": self.floor, "verdict": self.verdict}


@dataclass(frozen=True)
class LeakCheck:
    verdict: str                         # leak | no leak | inconclusive
    series: tuple[SeriesCheck, ...]
    iterations: int
    message: str

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "message": self.message, "iterations": self.iterations,
                "series": [s.to_dict() for s in self.series]}


def _series_verdict(name: str, fit: Slope, span: float, floor: float) -> SeriesCheck:
    growth = fit.slope * span
    upper = (fit.slope + 3 * fit.stderr) * span
    if fit.t_value > _SIGNIFICANT_T and growth > floor:
        verdict = "leak"
    elif upper < floor:
        verdict = "no leak"
    else:
        verdict = "inconclusive"
    return SeriesCheck(name, fit.slope, fit.stderr, fit.noise, growth, floor, verdict)


def leak_verdict(checkpoints: Sequence[Sequence[float]], *, discard_fraction: float = 0.25,
                 rss_floor: float = RSS_FLOOR_BYTES, traced_floor: float = TRACED_FLOOR_BYTES) -> LeakCheck:
    """Leak / no leak / inconclusive from ``[iteration, rss, traced]`` checkpoints."""
    points = np.asarray(checkpoints, dtype=np.float64)
    if points.ndim != 2 or points.shape[0] < 4 or points.shape[1] < 3:
        return LeakCheck("inconclusive", (), 0, "too few checkpoints for a leak check (run more iterations)")
    start = int(points.shape[0] * discard_fraction)
    tail = points[start:]
    if tail.shape[0] < 3:
        tail = points
    iters = tail[:, 0]
    span = float(iters[-1] - iters[0])
    if span <= 0:
        return LeakCheck("inconclusive", (), 0, "too few iterations for a leak check")
    series = (_series_verdict("rss", linear_slope(iters, tail[:, 1]), span, rss_floor),
              _series_verdict("python", linear_slope(iters, tail[:, 2]), span, traced_floor))
    verdicts = {s.verdict for s in series}
    verdict = "leak" if "leak" in verdicts else "no leak" if verdicts == {"no leak"} else "inconclusive"
    total = int(points[-1, 0])
    worst = max(series, key=lambda s: s.growth / s.floor)
    if verdict == "leak":
        leaking = [s for s in series if s.verdict == "leak"]
        message = "; ".join(f"{'resident memory' if s.name == 'rss' else 'Python heap'} grows "
                            f"{s.slope / 1024:.1f} KiB per inference (±{s.stderr / 1024:.1f})" for s in leaking)
    elif verdict == "no leak":
        message = (f"no growth beyond noise over {int(span)} inferences (resident memory "
                   f"{series[0].slope:.0f} ± {series[0].stderr:.0f} B per inference)")
    else:
        message = (f"inconclusive: {'resident memory' if worst.name == 'rss' else 'Python heap'} changes "
                   f"{worst.slope:.0f} ± {worst.stderr:.0f} B per inference (noise {worst.noise / 1024:.0f} KiB); "
                   "run more iterations")
    return LeakCheck(verdict, series, total, message)


@dataclass(frozen=True)
class AllocationSite:
    site: str             # "package/module.py:123" (no absolute paths)
    size_diff: int        # bytes allocated and still held since warm-up
    count_diff: int

    def to_dict(self) -> dict:
        return {"site": self.site, "size_diff": self.size_diff, "count_diff": self.count_diff}


@dataclass(frozen=True)
class MemoryProfile:
    """Resident memory of the worker over one variant's run, and the leak check."""

    variant_id: str
    baseline_rss: int                 # before the model was opened
    peak_rss: int                     # highest resident memory seen (sampler or VmHWM)
    timeline: tuple[tuple[float, int, str], ...]   # (seconds, bytes, phase)
    sites: tuple[AllocationSite, ...]
    leak: LeakCheck
    traced_peak: int                  # tracemalloc's peak during the iterations

    @property
    def model_rss(self) -> int:
        return self.peak_rss - self.baseline_rss

    def to_dict(self) -> dict:
        return {"variant_id": self.variant_id, "baseline_rss": self.baseline_rss, "peak_rss": self.peak_rss,
                "model_rss": self.model_rss, "traced_peak": self.traced_peak, "leak": self.leak.to_dict(),
                "sites": [s.to_dict() for s in self.sites],
                "timeline": [[t, b, p] for t, b, p in self.timeline]}


def memory_profile(variant_id: str, data: Mapping[str, Any]) -> MemoryProfile:
    """Build the result from the job's data."""
    return MemoryProfile(variant_id, int(data["baseline_rss"]), int(data["peak_rss"]),
                         tuple((float(t), int(b), str(p)) for t, b, p in data["timeline"]),
                         tuple(AllocationSite(str(s["site"]), int(s["size_diff"]), int(s["count_diff"]))
                               for s in data["sites"]),
                         leak_verdict(data["checkpoints"]), int(data.get("traced_peak", 0)))


def measure_variant_memory(variant: dict[str, Any], arrays: Mapping[str, np.ndarray], *, warmup: int,
                           iterations: int, out_dir: Path, limits: Limits, pool_key: str,
                           on_tick: Callable[[float], None] | None = None) -> MemoryProfile:
    """Run the memory job for one variant in a fresh worker (a clean baseline)."""
    result = run_job("profile.memory", {"variant": variant, "warmup": warmup, "iterations": iterations}, arrays,
                     stage=f"{variant['label']} (memory)", limits=limits, out_dir=out_dir, fresh=True,
                     pool_key=pool_key, on_tick=on_tick)
    return memory_profile(variant["id"], result.data)
