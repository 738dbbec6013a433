"""The one runner protocol: open a model once, infer many times, report what ran (Polygraphy's
activate / infer / deactivate idea).

Every path that runs a model in a worker gets its runner from :func:`open_runner`: the
engines' one-shot ``*.run`` jobs (verification, checks), the verification reference
(``passes.reference_outputs``), layer-wise comparison, accuracy runs, precision latency and
the profilers (:mod:`profilers.runners` binds the feeds and adds the per-op and memory hooks).
One implementation per engine lives in its adapter module (``OrtRunner`` in
:mod:`~studio.core.engines.onnxruntime`, ``OvRunner``, ``TrtRunner``, ``MnnRunner``,
``LiteRtRunner``); the factory names them in a static table, like the job table of
:mod:`studio.core.jobs`, so this module imports no engine at load time. No engine module imports
this one: what every runner shares (``elapsed_ms``, ``require_feeds``, ``require_outputs``) lives in
:mod:`studio.core.engines.base`, and the one-shot run job of every engine, ``engine.run``
(:func:`engine_run_job`), lives here beside the factory. Only used inside sandbox workers.

OpenVINO is read through its ONNX frontend only and compiled with ``INFERENCE_PRECISION_HINT``
pinned (``f32`` unless asked); every runner reports the precision it computed in
(:attr:`Runner.effective_precision`; OpenVINO's also in ``details["precision_effective"]``).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from studio.core.engines.base import elapsed_ms, encode_outputs, require_outputs, unpack_feeds
from studio.core.engines.table import ENGINES, RUN_JOB, engine_row
from studio.core.jobs import JobContext, JobOutput, job

__all__ = ["RUNNERS", "Runner", "engine_run_job", "open_runner", "run_once"]


class Runner(Protocol):
    """An opened model. The constructor ``(path, args, ctx)`` opens it (reads, converts, compiles);
    ``args`` is :meth:`RunOptions.to_args` plus the engine's own keys (see each runner)."""

    engine: str
    input_names: list[str]
    output_names: list[str]
    details: dict[str, Any]            # what the engine did (providers, precision, converter, ...)

    @property
    def timings(self) -> dict[str, float | None]:
        """``import_ms``, ``load_ms`` (reading the model), ``session_ms`` (compile / session / runtime
        load), ``convert_ms`` for the converted engines; None where the engine does not separate them."""
        ...

    @property
    def effective_precision(self) -> str | None:
        """The precision the engine computes in, as it reports it ("f32", "bf16", "f16 weights, fp32 compute")."""
        ...

    def prepare(self, feeds: Mapping[str, Any]) -> None:
        """Get ready for feeds of these shapes (LiteRT converts here) before anything is timed."""
        ...

    def infer(self, feeds: Mapping[str, Any], names: list[str] | None = None) -> dict[str, Any]:
        """One inference: output name -> value, in model order (or ``names`` order)."""
        ...

    def bind(self, feeds: Mapping[str, Any]) -> Callable[[], Any]:
        """A callable running one inference on ``feeds`` prepared once (the profilers' timing loop);
        what it returns is the engine's own output object."""
        ...

    def close(self) -> None: ...


# engine -> "module:class" of its runner (imported on first use, inside the worker), from the engine table
RUNNERS: dict[str, str] = {row.name: row.runner for row in ENGINES if row.runner}


def open_runner(engine: str, path: str | Path, args: Mapping[str, Any], ctx: JobContext) -> Runner:
    """The runner of ``engine`` (a canonical name of :mod:`studio.core.engines.table`) with
    ``path`` opened; ``args`` is ``RunOptions.to_args()`` plus the engine's own keys."""
    target = RUNNERS.get(engine)
    if target is None:
        raise ValueError(f"unknown engine {engine!r}; runners exist for {', '.join(RUNNERS)}")
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)(str(path), args, ctx)


# ---------------------------------------------------------------------------- the one run job

@job(RUN_JOB)
def engine_run_job(args: dict[str, Any], arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    """Every engine's one-shot run (checks, export verification, accuracy runs): ``args["engine"]`` names
    the engine's row; the rest is :func:`run_once`'s. One job beside the factory, so no engine module
    calls back into this one (the factory imports them by name: a cycle otherwise)."""
    row = engine_row(str(args.get("engine", "")))
    if row is None or not row.runner:
        raise ValueError(f"unknown engine {args.get('engine')!r}; runners exist for {', '.join(RUNNERS)}")
    return run_once(row.name, args, arrays, ctx, row.label)


def run_once(engine: str, args: dict[str, Any], arrays: dict[str, np.ndarray], ctx: JobContext,
             stage: str) -> JobOutput:
    """Open a runner, one inference, the outputs, version and details (``first_inference_ms`` excludes
    what :meth:`Runner.prepare` did: LiteRT's conversion)."""
    feeds = unpack_feeds(arrays)            # sequence inputs come back as lists
    shapes = {n: list(np.shape(v)) for n, v in feeds.items() if isinstance(v, np.ndarray)}
    runner = open_runner(engine, args["model_path"], {**args, "input_shapes": shapes}, ctx)
    try:
        wanted = args.get("output_names")
        if wanted:
            require_outputs(wanted, runner.output_names)
        runner.prepare(feeds)
        ctx.set_stage(f"{stage} inference")     # an error from here on is not a compile error
        started = time.perf_counter()
        outputs = runner.infer(feeds, list(wanted) if wanted else None)
        first_ms = elapsed_ms(started)
        encoded, out_arrays = encode_outputs(list(outputs), list(outputs.values()))
    finally:
        runner.close()
    details = {**{k: v for k, v in runner.details.items() if k != "engine_version"},
               "first_inference_ms": round(first_ms, 3), "input_names": runner.input_names,
               "output_names": runner.output_names}
    return JobOutput(data={"version": runner.details.get("engine_version"), "outputs": encoded,
                           "details": details}, arrays=out_arrays)


