"""ONNX Runtime adapter: sessions are created and run in a sandbox worker.

The parent never imports ``onnxruntime``: :meth:`OnnxRuntimeEngine.available`
reads package metadata, :meth:`OnnxRuntimeEngine.run` sends the ``ort.run`` job.
The job creates the ``InferenceSession`` from the model *path* (so external data
resolves next to the model), writes nothing outside the job's scratch and
output folders (an optimized model or a profile only into ``out_dir``, and
only when asked), and reports the providers actually used, the session
creation time and the first inference time.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.engines.base import (
    Availability,
    RunOptions,
    WorkerEngine,
    encode_outputs,
    module_present,
    package_version,
    require_available,
    unpack_feeds,
)
from studio.core.errors import StudioError
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, run_job

__all__ = ["OnnxRuntimeEngine", "ort_info_job", "ort_run_job"]

# pip distributions that provide the ``onnxruntime`` module.
_DISTRIBUTIONS = ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino", "onnxruntime-directml",
                  "onnxruntime-qnn", "ort-nightly", "ort-nightly-gpu")


class OnnxRuntimeEngine(WorkerEngine):
    name = "onnxruntime"
    label = "ONNX Runtime"
    run_job_name = "ort.run"
    stage = "ONNX Runtime"

    def _probe(self) -> Availability:
        return _probe()

    def _prepare(self, options: RunOptions, limits: Limits | None,
                 out_dir: Path | None) -> tuple[Limits | None, bool]:
        """An optimized model or a profile is written into ``out_dir``: it must be given."""
        if (options.save_optimized_model or options.enable_profiling) and out_dir is None:
            raise StudioError("saving an optimized model or a profile needs an output folder (out_dir)",
                              code="BAD-OPTION")
        return limits, options.needs_fresh_worker()

    def probe(self, *, limits: Limits | None = None, pool_key: str = "default") -> dict[str, Any]:
        """Version and available execution providers, asked of a worker."""
        require_available(self)
        return run_job("ort.info", {}, stage="ONNX Runtime probe", limits=limits, pool_key=pool_key).data


def _probe() -> Availability:
    if not module_present("onnxruntime"):
        return Availability(False, None, "ONNX Runtime is not installed (pip install onnxruntime)")
    version = package_version(*_DISTRIBUTIONS)
    devices = ["CPU"]
    if package_version("onnxruntime-gpu"):
        devices.append("CUDA")
    if package_version("onnxruntime-openvino"):
        devices.append("OpenVINO")
    if package_version("onnxruntime-directml"):
        devices.append("DirectML")
    return Availability(True, version, None, tuple(devices))


# ============================================================================ jobs (worker side)

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
    for key, value in (args.get("extra_session_options") or {}).items():
        so.add_session_config_entry(str(key), str(value))
    if args.get("save_optimized_model"):
        name = Path(str(args["save_optimized_model"])).name  # a plain name, inside out_dir only
        so.optimized_model_filepath = str(ctx.out_dir / name)
    if args.get("enable_profiling"):
        so.enable_profiling = True
        so.profile_file_prefix = str(ctx.out_dir / "ort_profile")
    if args.get("use_extensions"):
        from onnxruntime_extensions import get_library_path

        so.register_custom_ops_library(get_library_path())
    for lib in args.get("custom_op_libraries") or []:
        so.register_custom_ops_library(str(lib))
    return so


@job("ort.run")
def ort_run_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    ctx.set_stage("ONNX Runtime session creation")
    import onnxruntime as ort

    so = _session_options(ort, args, ctx)
    started = time.perf_counter()
    session = ort.InferenceSession(str(args["model_path"]), sess_options=so,
                                   providers=list(args.get("providers") or ["CPUExecutionProvider"]))
    session_ms = (time.perf_counter() - started) * 1000
    model_outputs = [o.name for o in session.get_outputs()]
    wanted = args.get("output_names")
    if wanted:
        missing = [n for n in wanted if n not in model_outputs]
        if missing:
            raise KeyError(f"unknown output name(s) {', '.join(map(repr, missing[:5]))}; the model's outputs are "
                           f"{', '.join(map(repr, model_outputs[:10]))}")
    names = list(wanted) if wanted else model_outputs
    expected = [i.name for i in session.get_inputs()]
    arrays = unpack_feeds(arrays)            # sequence inputs come back as lists
    missing_feeds = [n for n in expected if n not in arrays]
    if missing_feeds:
        raise KeyError(f"missing feed(s) {', '.join(map(repr, missing_feeds[:5]))}")
    ctx.set_stage("ONNX Runtime inference")
    started = time.perf_counter()
    values = session.run(names, {n: arrays[n] for n in expected})
    first_ms = (time.perf_counter() - started) * 1000
    if args.get("enable_profiling"):
        session.end_profiling()
    encoded, out_arrays = encode_outputs(names, values)
    details = {
        "providers": session.get_providers(),
        "graph_optimization_level": args.get("graph_optimization_level") or "all",
        "session_ms": round(session_ms, 3),
        "first_inference_ms": round(first_ms, 3),
        "input_names": expected,
        "output_names": model_outputs,
    }
    return JobOutput(data={"version": ort.__version__, "outputs": encoded, "details": details}, arrays=out_arrays)


@job("ort.info")
def ort_info_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    import onnxruntime as ort

    return JobOutput(data={"version": ort.__version__, "providers": ort.get_available_providers(),
                           "device": ort.get_device()})
