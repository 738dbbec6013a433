"""The profilers' view of the one runner protocol: a runner opened through
:func:`studio.core.engines.sessions.open_runner` with the feeds bound once, so the
timing loop calls ``infer()`` with nothing else in it.

What is here is profiling-specific only: the :class:`~profilers.variants.EngineSpec`
translated into runner arguments, the per-engine facts the profile reports (providers and
fallbacks, OpenVINO's compiled properties and reshapes), NVTX ranges over the opening
stages, and the hooks the per-op and concurrency measurements need (ORT's profile file,
OpenVINO's layer counters, runtime-model names and async queue). The engines themselves
(open, bind, infer, precision) live in :mod:`studio.core.engines`; the same runners serve
verification, precision and layer-wise comparison.

Fairness between engines: inputs are bound once (ORT feeds dict, OpenVINO input tensors
set on the request, MNN constants, LiteRT NHWC arrays); every call returns the outputs as
host arrays (ORT ``session.run``, OpenVINO ``request.infer()`` copies), as an application
would. OpenVINO models with dynamic input dims are reshaped to the feed shapes before
compiling (what ``benchmark_app -shape`` does); the reshape is reported in ``details``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from profilers.nvtx import NvtxRanges, ranges
from studio.core.engines import sessions
from studio.core.engines.table import engine_row
from studio.core.jobs import JobContext
from studio.core.paths import safe_name

__all__ = ["BoundRunner", "open_runner", "runner_args"]


def _ort_args(spec: Mapping[str, Any], feeds: Mapping[str, np.ndarray], profile_tag: str | None,
              perf_counters: bool, cache: bool, hint: str | None) -> dict[str, Any]:
    return {"providers": list(spec.get("providers") or ["CPUExecutionProvider"]),
            "graph_optimization_level": spec.get("opt_level") or "all", "trt_ep_cache": True,
            "enable_profiling": profile_tag is not None,
            "profile_name": f"ort_profile_{safe_name(profile_tag)}" if profile_tag is not None else None}


def _ov_args(spec: Mapping[str, Any], feeds: Mapping[str, np.ndarray], profile_tag: str | None,
             perf_counters: bool, cache: bool, hint: str | None) -> dict[str, Any]:
    return {"precision": spec.get("precision") or "f32", "performance_hint": hint or spec.get("hint"),
            "intra_op_threads": spec.get("threads"), "device": str(spec.get("device") or "CPU").upper(),
            "perf_counters": perf_counters, "model_cache": cache,
            "static_shapes": {n: list(np.shape(a)) for n, a in feeds.items()}}


def _plain_args(spec: Mapping[str, Any], feeds: Mapping[str, np.ndarray], profile_tag: str | None,
                perf_counters: bool, cache: bool, hint: str | None) -> dict[str, Any]:
    """TensorRT and every converted row: precision, threads, the feeds' shapes."""
    return {"precision": spec.get("precision") or "f32", "intra_op_threads": spec.get("threads"),
            "input_shapes": {n: list(np.shape(a)) for n, a in feeds.items()}}


# This layer's per-engine table of runner arguments (others: _plain_args).
RUNNER_ARGS: dict[str, Callable[..., dict[str, Any]]] = {"onnxruntime": _ort_args, "openvino": _ov_args}


def runner_args(spec: Mapping[str, Any], feeds: Mapping[str, np.ndarray], *, profile_tag: str | None = None,
                perf_counters: bool = False, cache: bool = False, hint: str | None = None) -> dict[str, Any]:
    """The runner arguments (``RunOptions.to_args`` keys and the engines' own) for a spec dict
    (:meth:`EngineSpec.to_args`)."""
    make = RUNNER_ARGS.get(str(spec.get("engine")), _plain_args)
    return make(spec, feeds, profile_tag, perf_counters, cache, hint)


class _StageRanges:
    """A job context's stage reports as NVTX ranges: each stage the runner names while it opens
    ("OpenVINO compile", "MNN conversion") is one range, ended by the next."""

    def __init__(self, nv: NvtxRanges) -> None:
        self.nv, self.handle = nv, None

    def __call__(self, report: Mapping[str, Any]) -> None:
        self.end()
        self.handle = self.nv.start(str(report.get("stage")))

    def end(self) -> None:
        self.nv.end(self.handle)
        self.handle = None


class BoundRunner:
    """An opened model with its feeds bound: ``infer()`` runs one inference; ``call`` is the
    same as (function, args) for the timing loop; ``details`` and ``timings`` go into the profile."""

    def __init__(self, core: sessions.Runner, feeds: Mapping[str, np.ndarray], spec: Mapping[str, Any], *,
                 cache: bool = False) -> None:
        self.core = core
        self.engine = core.engine
        self.infer: Callable[[], Any] = core.bind(feeds)
        func = self.infer
        # functools.partial is called in C; its parts are the bare call (no extra Python frame)
        self.call: tuple[Callable[..., Any], tuple] = (
            (func.func, func.args) if isinstance(func, functools.partial) and not func.keywords else (func, ()))
        self.feeds = {n: feeds[n] for n in core.input_names if n in feeds}
        self.timings: dict[str, float | None] = dict(core.timings)
        self.details: dict[str, Any] = _report(core, spec, cache)   # after bind: LiteRT converts there

    # ---- ONNX Runtime
    @property
    def session(self) -> Any:
        return self.core.session  # type: ignore[attr-defined]

    def with_feeds(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], Any]:
        """A second infer callable on the same session (concurrent requests, batch sizes)."""
        return self.core.bind(feeds)

    def end_profiling(self) -> str | None:
        end = getattr(self.core, "end_profiling", None)
        return end() if end is not None else None

    # ---- OpenVINO
    @property
    def request(self) -> Any:
        return self.core.request  # type: ignore[attr-defined]

    def async_queue(self, jobs: int) -> Any:
        """An ``AsyncInferQueue`` of ``jobs`` requests with the feeds bound on each."""
        import openvino as ov

        queue = ov.AsyncInferQueue(self.core.compiled, jobs)  # type: ignore[attr-defined]
        for i in range(len(queue)):
            for index, array in self.core.bound_inputs.items():  # type: ignore[attr-defined]
                queue[i].set_input_tensor(index, ov.Tensor(array))
        return queue

    def layer_counters(self) -> list[dict[str, Any]]:
        """Per-layer counters of the last inference (needs ``perf_counters=True``)."""
        out = []
        for info in self.core.request.get_profiling_info():  # type: ignore[attr-defined]
            status = str(info.status).rsplit(".", 1)[-1]
            out.append({"name": str(info.node_name), "layer_type": str(info.node_type),
                        "exec_type": str(info.exec_type), "us": info.real_time.total_seconds() * 1e6,
                        "executed": status == "EXECUTED"})
        return out

    def original_names(self) -> dict[str, list[str]]:
        """Executed node -> names of the model's layers it runs (runtime model ``originalLayersNames``)."""
        out: dict[str, list[str]] = {}
        try:
            runtime = self.core.compiled.get_runtime_model()  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001
            return out
        for op in runtime.get_ordered_ops():
            info = op.get_rt_info()
            if "originalLayersNames" not in info:
                continue
            try:
                text = info["originalLayersNames"].astype(str)
            except Exception:  # noqa: BLE001
                text = str(info["originalLayersNames"])
            out[op.get_friendly_name()] = [n for n in text.split(",") if n]
        return out

    def close(self) -> None:
        self.core.close()


def _ort_report(core: Any, spec: Mapping[str, Any], cache: bool) -> dict[str, Any]:
    used = core.session.get_providers()
    wanted = [p if isinstance(p, str) else p[0] for p in core.providers_asked]
    details = {"providers": used, "opt_level": spec.get("opt_level") or "all",
               "intra_op_threads": int(core.session.get_session_options().intra_op_num_threads) or None,
               "threads_note": None if spec.get("threads") else "engine default (one per physical core)"}
    if wanted and wanted[0] not in used:
        details["fallback"] = f"{wanted[0]} was not used; ran on {', '.join(used)}"
    if wanted and wanted[0] != "CPUExecutionProvider":
        details["note"] = "GPU execution providers: not verified here (no GPU where this was written)"
    return details


def _ov_report(core: Any, spec: Mapping[str, Any], cache: bool) -> dict[str, Any]:
    prop = core.compiled_property
    return {"device": core.device, "precision_requested": core.details["precision_requested"],
            "precision_effective": core.effective_precision,
            "execution_precisions": core.details.get("execution_precisions"),
            "performance_hint": prop("PERFORMANCE_HINT", str), "threads": prop("INFERENCE_NUM_THREADS", int),
            "streams": prop("NUM_STREAMS", str), "optimal_requests": prop("OPTIMAL_NUMBER_OF_INFER_REQUESTS", int),
            "reshaped_to": core.reshaped_to, "dynamic_shapes": core.dynamic_note,
            "conversion_note": core.conversion_note, "model_cache": "job folder" if cache else None}


def _trt_report(core: Any, spec: Mapping[str, Any], cache: bool) -> dict[str, Any]:
    return {"precision_requested": core.details["precision_requested"], "verified": False,
            "note": "TensorRT path not verified here; GPU compute time without host copies"}


def _converted_report(core: Any, spec: Mapping[str, Any], cache: bool) -> dict[str, Any]:
    d = core.details
    # "fallback": the kernels timed were not the engine's default (LiteRT: built-in kernels after XNNPack failed)
    details = {k: d.get(k) for k in ("threads", "threads_note", "precision_requested", "layout", "names_mapped",
                                     "converter_command", "convert_ms", "load_ms", "fallback") if d.get(k) is not None}
    details["precision_effective"] = core.effective_precision
    return details


# This layer's per-engine table of what the profile says about the engine a variant ran on (others, the
# converted rows: _converted_report).
REPORTS: dict[str, Callable[[Any, Mapping[str, Any], bool], dict[str, Any]]] = {
    "onnxruntime": _ort_report, "openvino": _ov_report, "tensorrt": _trt_report}


def _report(core: Any, spec: Mapping[str, Any], cache: bool) -> dict[str, Any]:
    """What the profile says about the engine a variant ran on."""
    return REPORTS.get(core.engine, _converted_report)(core, spec, cache)


def open_runner(model_path: str, spec: Mapping[str, Any], feeds: Mapping[str, np.ndarray], *, out_dir: Path,
                profile_tag: str | None = None, perf_counters: bool = False, cache: bool = False,
                hint: str | None = None) -> BoundRunner:
    """Open ``model_path`` on the engine of ``spec`` (an :meth:`EngineSpec.to_args` dict) with
    ``feeds`` bound.

    ``profile_tag``: ORT writes its profile JSON ``ort_profile_<tag>_*.json``
    into ``out_dir``; ``perf_counters``: OpenVINO ``PERF_COUNT``; ``cache``:
    OpenVINO ``CACHE_DIR`` in ``out_dir``; ``hint`` overrides the spec's
    OpenVINO performance hint (the concurrency sweep uses THROUGHPUT).
    """
    engine = str(spec.get("engine"))
    if engine not in sessions.RUNNERS:
        raise ValueError(f"unknown engine {engine!r}")
    args = runner_args(spec, feeds, profile_tag=profile_tag, perf_counters=perf_counters, cache=cache, hint=hint)
    scratch = Path(out_dir)
    if engine_row(engine).converted:     # the converted model stays in the job folder
        scratch = Path(out_dir) / f"{engine}_{time.perf_counter_ns()}"
        scratch.mkdir(parents=True, exist_ok=True)
    stages = _StageRanges(ranges())
    ctx = JobContext(scratch=scratch, out_dir=Path(out_dir), cpu_threads=spec.get("threads"), _report=stages)
    try:
        core = sessions.open_runner(engine, model_path, args, ctx)
        try:
            stages({"stage": f"{engine}: bind"})
            return BoundRunner(core, feeds, spec, cache=cache)
        except BaseException:
            core.close()
            raise
    finally:
        stages.end()
