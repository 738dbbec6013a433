"""Sweeps: latency and throughput of one variant over thread counts, batch
sizes or concurrent requests (DL Workbench's batch x streams grid, done as
three one-dimensional sweeps that each answer one question).

* ``threads``: a session per intra-op thread count (ORT
  ``intra_op_num_threads``, OpenVINO ``INFERENCE_NUM_THREADS``).
* ``batch``: a session per batch size, inputs with that leading dim (the model
  needs a dynamic first dim); throughput counts samples, not calls.
* ``concurrency``: N requests in flight. ORT: one session, N Python threads
  calling ``run`` (it releases the GIL). OpenVINO: an ``AsyncInferQueue`` of N
  requests on a model compiled with the THROUGHPUT hint (its streams are
  reported). Latency is per request, from the moment a request slot is free.

Each point runs in the same worker job, one after the other, after its own
warm-up, for at least ``iterations`` calls and ~0.3 s (fast models get more
calls, so thread start-up does not dominate a point). Points are not interleaved: a sweep shows a curve's shape, and the
load average beside it says how quiet the machine was.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from profilers.latency import runner_loop, timed_loop
from profilers.nvtx import ranges
from profilers.runners import open_runner
from profilers.stats import LatencyStats, latency_stats
from studio.core.engines.table import engine_row
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, run_job

__all__ = ["SWEEP_KINDS", "SweepPoint", "SweepResult", "measure_sweep"]

SWEEP_KINDS = ("threads", "batch", "concurrency")
MIN_POINT_SECONDS = 0.3


def _feeds(point: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: arrays[key] for name, key in point["feeds"]}


def _concurrent_ort(runner: Any, concurrency: int, requests: int) -> tuple[list[int], float]:
    """``requests`` calls spread over ``concurrency`` threads on one session: (latencies ns, wall s)."""
    per_thread = [requests // concurrency + (1 if i < requests % concurrency else 0) for i in range(concurrency)]
    results: list[list[int]] = [[] for _ in range(concurrency)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(concurrency + 1)

    def work(i: int) -> None:
        infer = runner.with_feeds(runner.feeds)
        barrier.wait()
        try:
            results[i] = timed_loop(infer, per_thread[i])
        except BaseException as exc:  # noqa: BLE001 - reported after join
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(concurrency)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    if errors:
        raise errors[0]
    return [x for r in results for x in r], wall


def _concurrent_ov(runner: Any, concurrency: int, requests: int) -> tuple[list[int], float]:
    """``requests`` async inferences with ``concurrency`` requests in flight: (latencies ns, wall s)."""
    queue = runner.async_queue(concurrency)
    latencies: list[int] = []
    clock = time.perf_counter_ns

    def done(request: Any, started: int) -> None:
        latencies.append(clock() - started)

    queue.set_callback(done)
    for _ in range(min(concurrency, requests)):   # warm every request once
        queue.start_async(userdata=clock())
    queue.wait_all()
    latencies.clear()
    started = time.perf_counter()
    for _ in range(requests):
        queue.get_idle_request_id()                 # wait for a free slot before the clock starts
        queue.start_async(userdata=clock())
    queue.wait_all()
    return list(latencies), time.perf_counter() - started


# This layer's per-engine table: how an engine serves concurrent requests (others: not available), and the
# performance hint its runner is opened with for them.
CONCURRENT = {"onnxruntime": _concurrent_ort, "openvino": _concurrent_ov}
CONCURRENT_HINT = {"openvino": "THROUGHPUT"}


def _estimate(warmup_ns: list[int]) -> float:
    """Seconds per call from the second half of a warm-up."""
    tail = warmup_ns[len(warmup_ns) // 2:] or warmup_ns
    return float(np.median(tail)) / 1e9 if tail else 0.0


def _count(estimate_s: float, iterations: int) -> int:
    """At least ``iterations`` calls and, for fast models, at least ~0.3 s of them (capped at 20x)."""
    if estimate_s <= 0:
        return iterations
    return max(iterations, min(int(MIN_POINT_SECONDS / estimate_s), 20 * iterations))


@job("profile.sweep")
def sweep_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    """One sweep of one variant; every point gets a warm-up and ``iterations`` timed calls."""
    v = args["variant"]
    kind = args["kind"]
    warmup, iterations = int(args["warmup"]), max(1, int(args["iterations"]))
    deadline = time.monotonic() + float(args["budget_s"])
    nv = ranges()
    points = []
    details: dict[str, Any] = {}
    shared = None
    shared_estimate = 0.0
    if kind == "concurrency":
        ctx.set_stage(f"{v['label']}: concurrency sweep")
        shared = open_runner(v["model_path"], v["engine"], _feeds(args["points"][0], arrays), out_dir=ctx.out_dir,
                             hint=CONCURRENT_HINT.get(v["engine"]["engine"]))
        details = dict(shared.details)
        shared_estimate = _estimate(timed_loop(shared.infer, max(warmup, 1)))
    try:
        for point in args["points"]:
            if time.monotonic() > deadline:
                points.append({"value": point["value"], "skipped": "time budget reached"})
                continue
            value = int(point["value"])
            ctx.set_stage(f"{v['label']}: {kind} = {value}")
            with nv.range(f"sweep {kind}={value} {v['id']}"):
                if kind == "concurrency":
                    engine = v["engine"]["engine"]
                    requests = _count(shared_estimate, iterations) * max(1, value)
                    if engine not in CONCURRENT:
                        raise ValueError(f"concurrency sweeps are not available for {engine}")
                    lat, wall = CONCURRENT[engine](shared, value, requests)
                    points.append({"value": value, "ns": lat, "wall_s": wall, "requests": len(lat)})
                    continue
                spec = dict(v["engine"])
                if kind == "threads":
                    spec["threads"] = value
                runner = open_runner(v["model_path"], spec, _feeds(point, arrays), out_dir=ctx.out_dir)
                try:
                    warm = runner_loop(runner, max(warmup, 1))
                    started = time.perf_counter()
                    lat = runner_loop(runner, _count(_estimate(warm), iterations))
                    wall = time.perf_counter() - started
                    points.append({"value": value, "ns": lat, "wall_s": wall, "requests": len(lat),
                                   "details": dict(runner.details)})
                finally:
                    runner.close()
    finally:
        if shared is not None:
            shared.close()
    return JobOutput(data={"points": points, "details": details, "load": list(os.getloadavg())})


# ============================================================================ parent side

@dataclass(frozen=True)
class SweepPoint:
    value: int                      # threads / batch size / requests in flight
    stats: LatencyStats | None      # per call (per batch for batch sweeps, per request for concurrency)
    throughput: float | None        # samples per second (batch x calls / wall time)
    wall_s: float
    note: str | None = None

    def to_dict(self) -> dict:
        return {"value": self.value, "stats": self.stats.to_dict() if self.stats else None,
                "throughput": None if self.throughput is None else round(self.throughput, 2),
                "wall_s": round(self.wall_s, 4), "note": self.note}


@dataclass(frozen=True)
class SweepResult:
    variant_id: str
    kind: str                      # threads | batch | concurrency
    points: tuple[SweepPoint, ...]
    details: Mapping[str, Any]
    error: str | None = None
    load_average: tuple[float, ...] = ()

    def to_dict(self) -> dict:
        return {"variant_id": self.variant_id, "kind": self.kind, "points": [p.to_dict() for p in self.points],
                "details": dict(self.details), "error": self.error, "load_average": list(self.load_average)}


def measure_sweep(variant: dict[str, Any], kind: str, points: Sequence[tuple[int, Mapping[str, np.ndarray]]], *,
                  warmup: int, iterations: int, out_dir: Path, limits: Limits, pool_key: str,
                  on_tick: Callable[[float], None] | None = None) -> SweepResult:
    """Run one sweep: ``points`` are (value, feeds) pairs (feeds differ per batch size)."""
    if kind not in SWEEP_KINDS:
        raise StudioError(f"unknown sweep {kind!r}; use threads, batch or concurrency", code=ErrorCode.BAD_OPTION)
    arrays: dict[str, np.ndarray] = {}
    point_args = []
    for pi, (value, feeds) in enumerate(points):
        keys = []
        for j, (name, array) in enumerate(feeds.items()):
            key = f"p{pi}_{j}"
            arrays[key] = np.asarray(array)
            keys.append([name, key])
        point_args.append({"value": int(value), "feeds": keys})
    args = {"variant": {k: val for k, val in variant.items() if k != "feeds"}, "kind": kind, "points": point_args,
            "warmup": warmup, "iterations": iterations, "budget_s": limits.timeout_s * 0.8}
    stage = f"{variant['label']} ({kind} sweep)"
    row = engine_row(variant["engine"]["engine"])
    if kind == "threads" and row is not None and row.process_thread_pool:
        # One fresh worker per thread count: the engine's thread pool is one per process, sized by the first
        # model opened there (MNN: a 2-thread model beside a 4-thread pool timed like 4, 0.30 vs 0.19 ms alone).
        results = [run_job("profile.sweep", {**args, "points": [pa]}, arrays, stage=stage, limits=limits,
                           out_dir=out_dir, pool_key=pool_key, on_tick=on_tick, fresh=True) for pa in point_args]
        data = {"points": [r.data["points"][0] for r in results], "details": results[-1].data.get("details", {}),
                "load": results[-1].data.get("load", ())}
    else:
        data = run_job("profile.sweep", args, arrays, stage=stage, limits=limits, out_dir=out_dir,
                       pool_key=pool_key, on_tick=on_tick).data
    out = []
    for (value, feeds), point in zip(points, data["points"]):
        if point.get("skipped"):
            out.append(SweepPoint(int(value), None, None, 0.0, point["skipped"]))
            continue
        lat_ms = np.asarray(point["ns"], dtype=np.float64) / 1e6
        batch = int(next(iter(feeds.values())).shape[0]) if kind == "batch" and feeds else 1
        wall = float(point["wall_s"])
        # Sequential points: samples per second of compute; concurrent points: of wall time.
        busy = wall if kind == "concurrency" else float(lat_ms.sum()) / 1000.0
        throughput = batch * len(lat_ms) / busy if busy > 0 else None
        out.append(SweepPoint(int(value), latency_stats(lat_ms) if lat_ms.size else None, throughput, wall))
    return SweepResult(variant["id"], kind, tuple(out), data.get("details", {}),
                       load_average=tuple(data.get("load", ())))
