"""ONNX Runtime adapter: sessions are created and run in a sandbox worker.

The parent never imports ``onnxruntime``: :meth:`OnnxRuntimeEngine.available`
reads package metadata, :meth:`OnnxRuntimeEngine.run` sends the ``engine.run`` job.
The job opens an :class:`OrtRunner` (this engine's implementation of the one runner
protocol, :mod:`studio.core.engines.sessions`), whose ``InferenceSession`` is created
from the model *path* (so external data resolves next to the model). It writes nothing
outside the job's scratch and output folders (an optimized model or a profile only into
``out_dir``, and only when asked), and reports the providers actually used, the session
creation time and the first inference time.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.engines.base import (
    Availability,
    RunOptions,
    WorkerEngine,
    package_version,
)
from studio.core.engines.base import elapsed_ms, require_feeds
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.paths import safe_name
from studio.core.sandbox import Limits

__all__ = ["OnnxRuntimeEngine", "OrtRunner", "ort_info_job"]

# pip distributions that provide the ``onnxruntime`` module.
_DISTRIBUTIONS = ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino", "onnxruntime-directml",
                  "onnxruntime-qnn", "ort-nightly", "ort-nightly-gpu")


class OnnxRuntimeEngine(WorkerEngine, engine="onnxruntime"):
    def _probe_installed(self) -> Availability:
        version = package_version(*_DISTRIBUTIONS)
        devices = ["CPU"]
        if package_version("onnxruntime-gpu"):
            devices.append("CUDA")
        if package_version("onnxruntime-openvino"):
            devices.append("OpenVINO")
        if package_version("onnxruntime-directml"):
            devices.append("DirectML")
        return Availability(True, version, None, tuple(devices))

    def _prepare(self, options: RunOptions, limits: Limits | None,
                 out_dir: Path | None) -> tuple[Limits | None, bool]:
        """An optimized model or a profile is written into ``out_dir``: it must be given; custom-op
        registration must not leak into a shared warm worker."""
        if (options.save_optimized_model or options.enable_profiling) and out_dir is None:
            raise StudioError("saving an optimized model or a profile needs an output folder (out_dir)",
                              code=ErrorCode.BAD_OPTION)
        return limits, options.needs_fresh_worker()


# ============================================================================ runner (worker side)

_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
           "all": "ORT_ENABLE_ALL"}


def _session_options(ort: Any, args: Mapping[str, Any], ctx: JobContext) -> Any:
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[args.get("graph_optimization_level")
                                                                              or "all"])
    intra = args.get("intra_op_threads") or ctx.cpu_threads
    if intra:
        so.intra_op_num_threads = int(intra)
    if args.get("inter_op_threads"):
        so.inter_op_num_threads = int(args["inter_op_threads"])
    if args.get("log_severity_level") is not None:
        so.log_severity_level = int(args["log_severity_level"])
    for key, value in (args.get("extra_session_options") or {}).items():
        so.add_session_config_entry(str(key), str(value))
    if args.get("external_data_dir"):   # a checkpoint whose external data lives in the original's folder
        so.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                    str(args["external_data_dir"]))
    if args.get("save_optimized_model"):
        name = Path(str(args["save_optimized_model"])).name  # a plain name, inside out_dir only
        so.optimized_model_filepath = str(ctx.out_dir / name)
    if args.get("enable_profiling"):
        so.enable_profiling = True
        so.profile_file_prefix = str(ctx.out_dir / safe_name(str(args.get("profile_name") or "ort_profile")))
    if args.get("use_extensions"):
        from onnxruntime_extensions import get_library_path

        so.register_custom_ops_library(get_library_path())
    for lib in args.get("custom_op_libraries") or []:
        so.register_custom_ops_library(str(lib))
    return so


def _providers(args: Mapping[str, Any], ctx: JobContext) -> list[Any]:
    """The provider chain; ``trt_ep_cache``: TensorRT EP engine and timing caches in the job folder (R27)."""
    providers: list[Any] = []
    for name in args.get("providers") or ["CPUExecutionProvider"]:
        if name == "TensorrtExecutionProvider" and args.get("trt_ep_cache"):
            cache = ctx.out_dir / "trt_cache"
            cache.mkdir(parents=True, exist_ok=True)
            providers.append((name, {"trt_engine_cache_enable": True, "trt_engine_cache_path": str(cache),
                                     "trt_timing_cache_enable": True, "trt_timing_cache_path": str(cache)}))
        else:
            providers.append(name)
    return providers


class OrtRunner:
    """One ``InferenceSession`` (from the model path, so external data resolves next to it; from its
    bytes with ``external_data_dir``), many ``session.run`` calls.

    ``args``: :meth:`RunOptions.to_args` keys, plus ``disabled_optimizers``, ``log_severity_level``,
    ``external_data_dir``, ``profile_name`` (the profile file's prefix inside ``out_dir``) and
    ``trt_ep_cache``."""

    engine = "onnxruntime"

    def __init__(self, path: str, args: Mapping[str, Any], ctx: JobContext) -> None:
        ctx.set_stage("ONNX Runtime session creation")
        started = time.perf_counter()
        import onnxruntime as ort

        self._timings: dict[str, float | None] = {"import_ms": elapsed_ms(started), "load_ms": None}
        so = _session_options(ort, args, ctx)
        self.providers_asked = _providers(args, ctx)
        source: Any = Path(path).read_bytes() if args.get("external_data_dir") else str(path)
        started = time.perf_counter()
        self.session = ort.InferenceSession(source, sess_options=so, providers=self.providers_asked,
                                            disabled_optimizers=list(args.get("disabled_optimizers") or []))
        # ORT loads inside session creation (the profile's model_loading_uri event separates them)
        self._timings["session_ms"] = elapsed_ms(started)
        self._profiling = bool(args.get("enable_profiling"))
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.details: dict[str, Any] = {
            "engine_version": ort.__version__, "providers": self.session.get_providers(),
            "graph_optimization_level": args.get("graph_optimization_level") or "all",
            "session_ms": round(self._timings["session_ms"], 3)}

    @property
    def timings(self) -> dict[str, float | None]:
        return dict(self._timings)

    @property
    def effective_precision(self) -> str | None:
        return "model types"      # ORT computes every op in its tensors' own types

    def prepare(self, feeds: Mapping[str, Any]) -> None:
        require_feeds(self.input_names, feeds)

    def infer(self, feeds: Mapping[str, Any], names: list[str] | None = None) -> dict[str, Any]:
        require_feeds(self.input_names, feeds)
        names = names or self.output_names
        values = self.session.run(names, {n: feeds[n] for n in self.input_names})
        return dict(zip(names, values))

    def bind(self, feeds: Mapping[str, Any]) -> Callable[[], Any]:
        require_feeds(self.input_names, feeds)
        # functools.partial is called in C: no extra Python frame per iteration.
        return functools.partial(self.session.run, None, {n: feeds[n] for n in self.input_names})

    def end_profiling(self) -> str | None:
        """The profile JSON's path (None when profiling was not on)."""
        if not self._profiling or self.session is None:
            return None
        self._profiling = False
        try:
            return self.session.end_profiling() or None
        except Exception:  # noqa: BLE001 - profiling was not on
            return None

    def close(self) -> None:
        self.end_profiling()
        self.session = None


@job("ort.info")
def ort_info_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    import onnxruntime as ort

    return JobOutput(data={"version": ort.__version__, "providers": ort.get_available_providers(),
                           "device": ort.get_device()})
