"""Latency of several (model, engine, options) pairs, measured side by side in one
worker: interleaved rounds, so a shared, noisy machine slows every pair alike and
the ratios stay meaningful. Kept small on purpose; ``profilers/`` owns detailed
profiling (per-op times, memory), this only answers "how much faster than fp32".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from profilers.stats import RatioEstimate, paired_ratio, round_medians
from studio.accuracy.runs import pack_sets, unpack_sets
from studio.core.engines import RunOptions, resolve_engine_name
from studio.core.engines.base import check_model_file
from studio.core.errors import engine_message
from studio.core.feeds import Feeds
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, run_job

__all__ = ["LatencyItem", "Latency", "measure", "ratio_to"]

# Sessions alive at once take about this many times their model files (weights plus ORT's
# prepacked copies, OpenVINO's compiled blobs); above the worker's memory limit, pairs are
# measured one after the other instead (less fair on a noisy machine, but they fit).
_SESSION_MEMORY_FACTOR = 3
_WORKER_BASE_BYTES = 512 * 2**20
_PER_ROUND = 3          # timed calls per variant per interleaved round (sessions.measure_latency's default)


@dataclass(frozen=True)
class LatencyItem:
    key: str
    path: Path
    engine: str
    options: RunOptions = RunOptions()


@dataclass(frozen=True)
class Latency:
    key: str
    median_ms: float | None
    p90_ms: float | None
    samples: int
    error: str | None = None
    p10_ms: float | None = None      # what ratios use: other processes only ever add time
    round_medians_ms: tuple[float, ...] = ()   # per interleaved round: what the ratio's interval comes from

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["round_medians_ms"] = [round(x, 5) for x in self.round_medians_ms]
        return d


def ratio_to(baseline: Latency | None, other: Latency | None) -> RatioEstimate | None:
    """``other / baseline`` from their per-round medians (round by round, so the machine's
    drift cancels): the median ratio and its 95 % bootstrap interval; None without rounds."""
    if baseline is None or other is None:
        return None
    n = min(len(baseline.round_medians_ms), len(other.round_medians_ms))
    if n == 0:
        return None
    try:
        return paired_ratio(baseline.round_medians_ms[:n], other.round_medians_ms[:n])
    except ValueError:
        return None


@job("precision.latency")
def latency_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    from studio.core.engines.sessions import latency_summary, measure_latency, open_runner

    feeds = unpack_sets(arrays, 1)[0]
    items = args["items"]
    budget = float(args.get("budget_s", 60))
    out: dict[str, Any] = {}
    runners: dict[str, Any] = {}

    def open_one(it: dict) -> Any:
        ctx.set_stage(f"latency: opening {it['key']} on {it['engine']}")
        return open_runner(it["engine"], it["path"], it["options"], ctx)

    if args.get("interleave", True):
        for it in items:
            try:
                runners[it["key"]] = open_one(it)
            except Exception as exc:  # noqa: BLE001 - one variant failing must not hide the others
                out[it["key"]] = {"error": f"{type(exc).__name__}: {engine_message(exc, 200)}"}
        ctx.set_stage(f"latency: measuring {len(runners)} variant(s) in interleaved rounds")
        times = measure_latency({k: (lambda r=r: r.infer(feeds)) for k, r in runners.items()}, budget_s=budget,
                                per_round=_PER_ROUND)
        for k, v in times.items():
            out[k] = {**latency_summary(v), "round_medians_ms": [x * 1000 for x in round_medians(v, _PER_ROUND)]}
    else:
        for it in items:
            try:
                runner = open_one(it)
                ctx.set_stage(f"latency: measuring {it['key']}")
                v = measure_latency({"x": lambda r=runner: r.infer(feeds)}, budget_s=budget / max(len(items), 1),
                                    per_round=8, max_rounds=5)["x"]
                out[it["key"]] = {**latency_summary(v), "round_medians_ms": [x * 1000 for x in round_medians(v, 8)]}
                runner.close()
            except Exception as exc:  # noqa: BLE001
                out[it["key"]] = {"error": f"{type(exc).__name__}: {engine_message(exc, 200)}"}
    return JobOutput(data={"results": out})


def _size(path: Path) -> int:
    total = path.stat().st_size
    for extra in path.parent.glob(path.name + ".data"):
        total += extra.stat().st_size
    return total


def _pre_convert(model: Path, feeds: Feeds, precision: str, out: Path, pool_key: str) -> str:
    """ONNX -> .tflite in a LiteRT worker (int8 calibrated on ``feeds``); the path, or the ONNX
    path back when conversion fails (the latency job then reports the engine's own error)."""
    from studio.core.engines.litert import litert_limits

    shapes = {n: list(np.shape(v)) for n, v in feeds.items()}
    try:
        res = run_job("litert.convert", {"model_path": str(model), "out_name": out.name, "precision": precision,
                                         "shapes": shapes}, dict(feeds), stage="LiteRT conversion",
                      limits=litert_limits(None), out_dir=out.parent, pool_key=pool_key + ":litert")
    except Exception:  # noqa: BLE001 - measured (and reported) by the latency job instead
        return str(model)
    return str(out) if res.data.get("ok") and out.is_file() else str(model)


def measure(items: Sequence[LatencyItem], feeds: Feeds, *, budget_s: float = 60.0, limits: Limits | None = None,
            pool_key: str = "default", on_tick: Callable[[float], None] | None = None) -> dict[str, Latency]:
    """Median/p90 latency per item (ms), measured in one worker."""
    payload = [{"key": it.key, "path": str(check_model_file(it.path)), "engine": resolve_engine_name(it.engine),
                "options": it.options.to_args()} for it in items]
    from studio.core.sandbox import default_limits

    scratch = None
    if any(p["engine"] == "litert" for p in payload):
        # onnx2tf (TensorFlow) next to OpenVINO and MNN in one process segfaulted on a ResNet-50:
        # convert in a worker of its own first; the shared worker only loads the .tflite.
        import tempfile

        scratch = tempfile.TemporaryDirectory(prefix="litert-latency-")
        for p in payload:
            if p["engine"] == "litert" and p["path"].endswith(".onnx"):
                p["options"]["onnx_path"] = p["path"]
                p["path"] = _pre_convert(Path(p["path"]), feeds, p["options"].get("precision") or "f32",
                                         Path(scratch.name) / f"{len(p['options'])}_{p['key']}.tflite", pool_key)
    memory = (limits or default_limits()).memory_bytes
    total = sum(_size(Path(p["path"])) for p in payload)
    interleave = _SESSION_MEMORY_FACTOR * total + _WORKER_BASE_BYTES <= memory
    res = run_job("precision.latency", {"items": payload, "budget_s": budget_s, "interleave": interleave},
                  pack_sets([feeds]), stage="latency measurement", limits=limits, pool_key=pool_key, on_tick=on_tick)
    if scratch is not None:
        scratch.cleanup()
    out = {}
    for it in items:
        r: Mapping[str, Any] = res.data["results"].get(it.key, {"error": "not measured"})
        out[it.key] = Latency(it.key, r.get("median_ms"), r.get("p90_ms"), int(r.get("samples", 0)), r.get("error"),
                              r.get("p10_ms"), tuple(float(x) for x in r.get("round_medians_ms") or ()))
    return out
