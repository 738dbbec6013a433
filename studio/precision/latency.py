"""Latency of several (model, engine, options) pairs, measured side by side in one
worker, for "how much faster than fp32". The timing itself is the studio's one
latency loop (:func:`profilers.latency.budgeted_rounds`, result
:class:`profilers.latency.LatencyRun`): this module only opens the precision
variants' runners (ONNX Runtime, OpenVINO, MNN, LiteRT with their precision
options), converts LiteRT's models first, and falls back to one variant at a time
when their sessions together would not fit the worker's memory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from profilers.latency import LatencyRun, budgeted_rounds
from studio.accuracy.runs import pack_sets, unpack_sets
from studio.core.engines import RunOptions, get_engine, resolve_engine_name, sessions
from studio.core.engines.base import check_model_file
from studio.core.errors import engine_message
from studio.core.feeds import Feeds
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, run_job
from studio.core.engines.table import engine_row
from studio.core.sandbox import default_limits

__all__ = ["LatencyItem", "measure"]

# Sessions alive at once take about this many times their model files (weights plus ORT's
# prepacked copies, OpenVINO's compiled blobs); above the worker's memory limit, pairs are
# measured one after the other instead (less fair on a noisy machine, but they fit).
_SESSION_MEMORY_FACTOR = 3
_WORKER_BASE_BYTES = 512 * 2**20
# Interleaved: profilers.latency.budgeted_rounds' defaults (short blocks, many rounds, a pause
# before each block). One at a time: fewer, longer blocks, no pause.
_ALONE = {"per_round": 8, "min_rounds": 3, "max_rounds": 5, "settle_s": 0.0}


@dataclass(frozen=True)
class LatencyItem:
    key: str
    path: Path
    engine: str
    options: RunOptions = RunOptions()


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {engine_message(exc, 200)}"


@job("precision.latency")
def latency_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:

    feeds = unpack_sets(arrays, 1)[0]
    items = args["items"]
    budget = float(args.get("budget_s", 60))
    errors: dict[str, str] = {}
    runners: dict[str, Any] = {}
    details: dict[str, dict] = {}          # what each engine reported (OpenVINO: its execution precisions)

    def open_one(it: dict) -> Any:
        ctx.set_stage(f"latency: opening {it['key']} on {it['engine']}")
        runner = sessions.open_runner(it["engine"], it["path"], it["options"], ctx)
        reported = getattr(runner, "details", None) or {}
        details[it["key"]] = {k: reported[k] for k in ("precision_effective", "execution_precisions") if k in reported}
        return runner

    if args.get("interleave", True):
        try:
            for it in items:
                runner = None
                try:
                    runner = open_one(it)
                    # one run first: an engine that opens lazily (OpenVINO reads and compiles a dynamic model at
                    # its first inference) fails here, as its row, not in the shared rounds as the whole run
                    runner.infer(feeds)
                    runners[it["key"]] = runner
                except Exception as exc:  # noqa: BLE001 - one variant failing must not hide the others
                    errors[it["key"]] = _error(exc)
                    if runner is not None:
                        runner.close()
            ctx.set_stage(f"latency: measuring {len(runners)} variant(s) in interleaved rounds")
            run = budgeted_rounds({k: (r.infer, (feeds,)) for k, r in runners.items()}, budget) if runners \
                else LatencyRun.combine({})
        finally:
            for runner in runners.values():
                runner.close()
        run = dataclasses.replace(run, errors=errors, details=details)
    else:
        alone: dict[str, LatencyRun] = {}
        for it in items:
            runner = None
            try:
                runner = open_one(it)
                ctx.set_stage(f"latency: measuring {it['key']}")
                alone[it["key"]] = budgeted_rounds({it["key"]: (runner.infer, (feeds,))},
                                                   budget / max(len(items), 1), **_ALONE)
            except Exception as exc:  # noqa: BLE001
                errors[it["key"]] = _error(exc)
            finally:
                if runner is not None:
                    runner.close()
        run = dataclasses.replace(LatencyRun.combine(alone, errors), details=details)
    data, out_arrays = run.to_job()
    return JobOutput(data=data, arrays=out_arrays)


def _size(path: Path) -> int:
    total = path.stat().st_size
    for extra in path.parent.glob(path.name + ".data"):
        total += extra.stat().st_size
    return total


def _pre_convert(engine: str, model: Path, feeds: Feeds, precision: str, out: Path, pool_key: str) -> str:
    """ONNX -> the engine's file in a worker of its own, through its adapter's ``convert`` (which applies the
    row's limits and pool; int8 calibrated on ``feeds``: only the timing is measured); the path, or the ONNX path back
    when conversion fails (the latency job then reports the engine's own error)."""
    shapes = {n: tuple(np.shape(v)) for n, v in feeds.items()}
    try:
        conv = get_engine(engine).convert(model, out, shapes=shapes, precision=precision, pool_key=pool_key,
                                          calibration=[feeds] if precision == "int8" else None)
    except Exception:  # noqa: BLE001 - measured (and reported) by the latency job instead
        return str(model)
    return str(out) if conv.ok and out.is_file() else str(model)


def measure(items: Sequence[LatencyItem], feeds: Feeds, *, budget_s: float = 60.0, limits: Limits | None = None,
            pool_key: str = "default", on_tick: Callable[[float], None] | None = None) -> LatencyRun:
    """Every item timed in one worker (interleaved when their sessions fit in memory together);
    an item that could not be opened or run is in the run's ``errors``."""
    payload = [{"key": it.key, "path": str(check_model_file(it.path)), "engine": resolve_engine_name(it.engine),
                "options": it.options.to_args()} for it in items]

    scratch = None
    # A row whose converter needs room of its own (its `limits`: LiteRT's onnx2tf imports TensorFlow, which
    # next to OpenVINO and MNN in one process segfaulted on a ResNet-50) converts in a worker of its own
    # first; the shared worker only loads the converted file.
    separate = {p["engine"] for p in payload if getattr(engine_row(p["engine"]), "limits", "")}
    if separate:
        import tempfile

        scratch = tempfile.TemporaryDirectory(prefix="convert-latency-")
        for p in payload:
            if p["engine"] in separate and p["path"].endswith(".onnx"):
                p["options"]["onnx_path"] = p["path"]
                suffix = engine_row(p["engine"]).suffix
                p["path"] = _pre_convert(p["engine"], Path(p["path"]), feeds, p["options"].get("precision") or "f32",
                                         Path(scratch.name) / f"{len(p['options'])}_{p['key']}{suffix}", pool_key)
    memory = (limits or default_limits()).memory_bytes
    total = sum(_size(Path(p["path"])) for p in payload)
    interleave = _SESSION_MEMORY_FACTOR * total + _WORKER_BASE_BYTES <= memory
    res = run_job("precision.latency", {"items": payload, "budget_s": budget_s, "interleave": interleave},
                  pack_sets([feeds]), stage="latency measurement", limits=limits, pool_key=pool_key, on_tick=on_tick)
    if scratch is not None:
        scratch.cleanup()
    run = LatencyRun.from_job(res.data, res.arrays, default_seconds=res.seconds)
    missing = {it.key: "not measured" for it in items if it.key not in run.errors and not run.measured(it.key)}
    return dataclasses.replace(run, errors={**run.errors, **missing}) if missing else run
