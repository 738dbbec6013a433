"""Running an exported artifact: the one runner protocol and the one latency loop, as ``profile`` does.

Every target that verifies a file it wrote (ONNX Runtime's optimized model and ``.ort``, OpenVINO's IRs,
the converted engines' ``.mnn`` / ``.tflite`` / ``.ncnn.param``, the TensorRT and Triton ONNX copies)
sends the one job here, ``export.run``. In the worker it opens the engine's runner through the factory
(:func:`studio.core.engines.sessions.open_runner`, ``session_runs`` times for the session figure), runs
the reference feeds once (the outputs, and the warm-up), then times ``runs`` calls of the runner's bound
call (:meth:`Runner.bind`, what the profiler times) with :func:`profilers.latency.timed_rounds`.
So an artifact is opened with the same session options, precision pin and feed binding as in
``onnx-studio profile``, and its figures are the same statistics (:class:`profilers.stats.LatencyStats`).
No engine is opened anywhere else in ``studio/export`` (``tests/export/test_export_runner_protocol.py``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from profilers import latency
from profilers.stats import latency_stats
from studio.core.engines import engine_limits
from studio.core.engines.base import check_feeds, decode_outputs, encode_outputs, unpack_feeds
from studio.core.engines.sessions import open_runner
from studio.core.engines.table import engine_row
from studio.core.errors import StudioError
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import run_job
from studio.export.context import ExportContext

__all__ = ["ArtifactRun", "artifact_run_job", "run_artifact_file", "timed_median_ms"]


@dataclass(frozen=True)
class ArtifactRun:
    """What running an artifact gave: its outputs (None when it could not run), the timing record
    (``version``, ``session_ms``, ``first_inference_ms``, ``latency_ms_median``, ``runs`` and the
    runner's own figures: ``read_ms``/``compile_ms``, ``load_ms``...), the runner's details, and the
    engine's message when it failed."""

    outputs: dict | None
    timing: dict
    details: dict
    error: str | None = None


def run_artifact_file(ctx: ExportContext, engine: str, path: Path, runner_args: Mapping[str, Any], *,
                      runs: int, session_runs: int = 1, stage: str) -> ArtifactRun:
    """Run the reference feeds through ``path`` on ``engine`` (a canonical name of the engine table) in a
    worker: the engine row's pool and limits (LiteRT's room for TensorFlow comes from its row, not from here)."""
    row = engine_row(engine)
    if row is None:
        raise ValueError(f"unknown engine {engine!r}")
    args = {"engine": row.name, "model_path": str(path), "runner_args": dict(runner_args), "runs": int(runs),
            "session_runs": int(session_runs)}
    try:
        res = run_job("export.run", args, check_feeds(ctx.reference.feeds), stage=stage,
                      limits=engine_limits(row.name, None), pool_key=ctx.pool_key + row.pool, on_tick=ctx.on_tick,
                      fresh=ctx.fresh)
    except StudioError as exc:
        return ArtifactRun(None, {}, {}, str(exc))
    return ArtifactRun(decode_outputs(res.data, res.arrays), res.data.get("timing", {}), res.data.get("details", {}))


def timed_median_ms(call: Any, args: tuple, runs: int) -> tuple[float | None, int]:
    """Median (ms) and count of ``runs`` back-to-back calls ``call(*args)``, timed by the studio's one latency
    loop (:func:`profilers.latency.timed_rounds`: one variant, one round; the first inference was the warm-up)."""
    if runs <= 0:
        return None, 0
    run = latency.timed_rounds({"artifact": (call, tuple(args))}, {"artifact": [int(runs)]}, seed=None)
    if not run.measured("artifact"):
        return None, 0
    return round(run.stats("artifact").p50_ms, 3), int(run.samples_ms["artifact"].size)


# The runner's own figures kept in the timing record (the manifest's benchmarks read them).
_RUNNER_FIGURES = ("read_ms", "compile_ms", "load_ms", "convert_ms")


@job("export.run")
def artifact_run_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    """Open the artifact's runner ``session_runs`` times (the last one stays open), one inference for the
    outputs, then ``runs`` timed calls of its bound call in the one latency loop."""
    engine = str(args["engine"])
    feeds = unpack_feeds(arrays)            # sequence inputs come back as lists
    shapes = {n: list(np.shape(v)) for n, v in feeds.items() if isinstance(v, np.ndarray)}
    runner_args = {**dict(args.get("runner_args") or {}), "model_path": str(args["model_path"]),
                   "input_shapes": shapes}
    session_ms: list[float] = []
    runner = None
    try:
        for _ in range(max(1, int(args.get("session_runs") or 1))):
            if runner is not None:
                runner.close()
                runner = None
            runner = open_runner(engine, str(args["model_path"]), runner_args, ctx)
            opened = runner.timings.get("session_ms")
            if opened is not None:
                session_ms.append(float(opened))
        assert runner is not None
        wanted = list(runner_args.get("output_names") or [])
        if wanted and any(n not in runner.output_names for n in wanted):
            wanted = []                     # the artifact names its outputs otherwise: its own order
        runner.prepare(feeds)
        ctx.set_stage(f"{engine} inference")
        started = time.perf_counter()
        outputs = runner.infer(feeds, wanted or None)
        first_ms = (time.perf_counter() - started) * 1000
        median_ms, runs = timed_median_ms(runner.bind(feeds), (), max(0, int(args.get("runs") or 0)))
        details = dict(runner.details)
    finally:
        if runner is not None:
            runner.close()
    encoded, out_arrays = encode_outputs(list(outputs), list(outputs.values()))
    timing: dict[str, Any] = {"version": details.get("engine_version"),
                              "session_ms": round(latency_stats(session_ms).p50_ms, 3) if session_ms else None,
                              "session_ms_all": [round(t, 3) for t in session_ms],
                              "first_inference_ms": round(first_ms, 3), "latency_ms_median": median_ms, "runs": runs}
    timing.update({k: details[k] for k in _RUNNER_FIGURES if details.get(k) is not None})
    details.pop("engine_version", None)
    return JobOutput(data={"outputs": encoded, "timing": timing, "details": details}, arrays=out_arrays)
