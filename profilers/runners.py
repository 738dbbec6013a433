"""Worker-side engine runners: open a model once, bind the feeds once, then
``infer()`` as often as the profiler asks, with nothing else in the loop.

Only the profiling jobs (:mod:`profilers.jobs`) use these, inside a sandbox
worker; the engine adapters in :mod:`studio.core.engines` stay the one-shot
path for verification. Heavy imports happen inside :func:`open_runner`, so the
studio process never imports an engine.

Fairness between engines: inputs are bound once (ORT feeds dict, OpenVINO
input tensors set on the request); every call returns the outputs as host
arrays (ORT ``session.run``, OpenVINO ``request.infer()`` copies), as an
application would. OpenVINO models with dynamic input dims are reshaped to the
feed shapes before compiling (what ``benchmark_app -shape`` does); the
reshape is reported in ``details``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from profilers.nvtx import ranges
from studio.core.engines.sessions import ov_config, precision_name, read_onnx_model
from studio.core.paths import safe_name

__all__ = ["Runner", "open_runner"]


def _ms(start_ns: int) -> float:
    return (time.perf_counter_ns() - start_ns) / 1e6


class Runner:
    """An opened model: ``infer()`` runs one inference on the bound feeds."""

    engine: str = ""
    infer: Callable[[], Any]                           # one inference on the bound feeds
    call: tuple[Callable[..., Any], tuple]             # the same as (function, args), for the timing loop

    def __init__(self) -> None:
        self.details: dict[str, Any] = {}
        self.timings: dict[str, float | None] = {}

    def close(self) -> None:  # noqa: B027 - optional hook
        pass


# ============================================================================ ONNX Runtime

class OrtRunner(Runner):
    engine = "onnxruntime"

    def __init__(self, model_path: str, spec: Mapping[str, Any], feeds: Mapping[str, np.ndarray], *,
                 out_dir: Path, profile_tag: str | None = None) -> None:
        super().__init__()
        started = time.perf_counter_ns()
        import onnxruntime as ort

        self.timings["import_ms"] = _ms(started)
        self._ort = ort
        so = ort.SessionOptions()
        level = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
                 "all": "ORT_ENABLE_ALL"}[spec.get("opt_level") or "all"]
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        if spec.get("threads"):
            so.intra_op_num_threads = int(spec["threads"])
        if profile_tag is not None:
            so.enable_profiling = True
            so.profile_file_prefix = str(out_dir / f"ort_profile_{safe_name(profile_tag)}")
        providers: list[Any] = []
        for name in spec.get("providers") or ["CPUExecutionProvider"]:
            if name == "TensorrtExecutionProvider":   # engine and timing caches stay in the job folder (R27)
                cache = out_dir / "trt_cache"
                cache.mkdir(parents=True, exist_ok=True)
                providers.append((name, {"trt_engine_cache_enable": True, "trt_engine_cache_path": str(cache),
                                         "trt_timing_cache_enable": True, "trt_timing_cache_path": str(cache)}))
            else:
                providers.append(name)
        started = time.perf_counter_ns()
        with ranges().range("ONNX Runtime: load + session creation"):
            self.session = ort.InferenceSession(model_path, sess_options=so, providers=providers)
        self.timings["session_ms"] = _ms(started)
        self.timings["load_ms"] = None   # ORT loads inside session creation (see the cold-start profile events)
        inputs = [i.name for i in self.session.get_inputs()]
        missing = [n for n in inputs if n not in feeds]
        if missing:
            raise KeyError(f"missing feed(s) {', '.join(map(repr, missing[:5]))}")
        self.feeds = {n: feeds[n] for n in inputs}
        self.infer = self._bind(self.feeds)
        self.call = (self.session.run, (None, dict(self.feeds)))
        used = self.session.get_providers()
        wanted = [p if isinstance(p, str) else p[0] for p in providers]
        self.details = {"providers": used, "opt_level": spec.get("opt_level") or "all",
                        "intra_op_threads": int(self.session.get_session_options().intra_op_num_threads) or None,
                        "threads_note": None if spec.get("threads") else "engine default (one per physical core)"}
        if wanted and wanted[0] not in used:
            self.details["fallback"] = f"{wanted[0]} was not used; ran on {', '.join(used)}"
        if wanted and wanted[0] != "CPUExecutionProvider":
            self.details["note"] = "GPU execution providers: not verified here (no GPU where this was written)"

    def _bind(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], Any]:
        # functools.partial is called in C: no extra Python frame per iteration.
        return functools.partial(self.session.run, None, dict(feeds))

    def with_feeds(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], Any]:
        """A second infer callable on the same session (concurrent requests, batch sizes)."""
        return self._bind({n: feeds[n] for n in self.feeds})

    def end_profiling(self) -> str | None:
        try:
            return self.session.end_profiling() or None
        except Exception:  # noqa: BLE001 - profiling was not on
            return None


# ============================================================================ OpenVINO

class OvRunner(Runner):
    engine = "openvino"

    def __init__(self, model_path: str, spec: Mapping[str, Any], feeds: Mapping[str, np.ndarray], *,
                 out_dir: Path, perf_counters: bool = False, cache: bool = False,
                 hint: str | None = None) -> None:
        super().__init__()
        started = time.perf_counter_ns()
        import openvino as ov

        self.timings["import_ms"] = _ms(started)
        self._ov = ov
        started = time.perf_counter_ns()
        with ranges().range("OpenVINO: load (ONNX frontend)"):
            model = read_onnx_model(model_path)     # the ONNX frontend only: never IR/TFLite/...
        self.input_names: list[str] = []
        static: dict[int, list[int]] = {}
        arrays: list[np.ndarray] = []
        for index, port in enumerate(model.inputs):
            names = port.get_names()
            match = next((n for n in names if n in feeds), None)
            if match is None:
                raise KeyError(f"missing feed for model input {sorted(names)[:3] or index}")
            self.input_names.append(match)
            arrays.append(np.ascontiguousarray(feeds[match]))
            if port.get_partial_shape().is_dynamic:
                static[index] = list(arrays[-1].shape)
        dynamic_note = None
        if static:
            try:
                model.reshape({model.inputs[i]: ov.PartialShape(shape) for i, shape in static.items()})
            except Exception as exc:  # noqa: BLE001 - some graphs cannot be reshaped: run them dynamic
                dynamic_note = f"could not reshape to the feed shapes ({str(exc).splitlines()[0][:160]}); " \
                               "compiled with dynamic shapes"
                static = {}
        self.timings["load_ms"] = _ms(started)
        precision = spec.get("precision") or "f32"
        cache_dir = None
        if cache:   # the model cache stays in the job folder (R27)
            cache_dir = out_dir / "ov_cache"
            cache_dir.mkdir(parents=True, exist_ok=True)
        config = ov_config(precision=precision, hint=hint or spec.get("hint"), threads=spec.get("threads"),
                           perf_counters=perf_counters, cache_dir=cache_dir)
        device = str(spec.get("device") or "CPU").upper()
        device = "CPU" if device in ("CPU", "") else device
        self.core = ov.Core()
        started = time.perf_counter_ns()
        with ranges().range("OpenVINO: compile"):
            self.compiled = self.core.compile_model(model, device, config)
        self.timings["session_ms"] = _ms(started)
        self.request = self.compiled.create_infer_request()
        self._arrays = arrays
        for index, array in enumerate(arrays):
            self.request.set_input_tensor(index, ov.Tensor(array))
        self.infer = self.request.infer
        self.call = (self.request.infer, ())
        self.details = {
            "device": device, "precision_requested": precision,
            "precision_effective": self._property("INFERENCE_PRECISION_HINT", precision_name),
            "performance_hint": self._property("PERFORMANCE_HINT", str),
            "threads": self._property("INFERENCE_NUM_THREADS", int),
            "streams": self._property("NUM_STREAMS", str),
            "optimal_requests": self._property("OPTIMAL_NUMBER_OF_INFER_REQUESTS", int),
            "reshaped_to": {self.input_names[i]: s for i, s in static.items()} or None,
            "dynamic_shapes": dynamic_note,
            "model_cache": "job folder" if cache else None,
        }

    def _property(self, name: str, convert: Callable[[Any], Any]) -> Any:
        try:
            return convert(self.compiled.get_property(name))
        except Exception:  # noqa: BLE001 - not every device reports every property
            return None

    def async_queue(self, jobs: int) -> Any:
        """An ``AsyncInferQueue`` of ``jobs`` requests with the feeds bound on each."""
        queue = self._ov.AsyncInferQueue(self.compiled, jobs)
        for i in range(len(queue)):
            for index, array in enumerate(self._arrays):
                queue[i].set_input_tensor(index, self._ov.Tensor(array))
        return queue

    def layer_counters(self) -> list[dict[str, Any]]:
        """Per-layer counters of the last inference (needs ``perf_counters=True``)."""
        out = []
        for info in self.request.get_profiling_info():
            status = str(info.status).rsplit(".", 1)[-1]
            out.append({"name": str(info.node_name), "layer_type": str(info.node_type),
                        "exec_type": str(info.exec_type), "us": info.real_time.total_seconds() * 1e6,
                        "executed": status == "EXECUTED"})
        return out

    def original_names(self) -> dict[str, list[str]]:
        """Executed node -> names of the model's layers it runs (runtime model ``originalLayersNames``)."""
        out: dict[str, list[str]] = {}
        try:
            runtime = self.compiled.get_runtime_model()
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


# ============================================================================ TensorRT (not verified here)

class TrtRunner(Runner):
    """TensorRT 10 engine built from the ONNX file; NOT VERIFIED HERE (no GPU where
    it was written). Flow as :mod:`studio.core.engines.tensorrt`, but buffers are
    allocated and inputs copied once, so ``infer()`` is one ``execute_async_v3``
    plus a stream synchronize (GPU compute time, no host copies)."""

    engine = "tensorrt"

    def __init__(self, model_path: str, spec: Mapping[str, Any], feeds: Mapping[str, np.ndarray], *,
                 out_dir: Path) -> None:
        super().__init__()
        started = time.perf_counter_ns()
        import tensorrt as trt

        from studio.core.engines.tensorrt import profile_shapes

        try:
            from cuda.bindings import runtime as cudart
        except ImportError:
            from cuda import cudart
        self.timings["import_ms"] = _ms(started)
        self._cudart = cudart
        self._allocations: list[int] = []
        logger = trt.Logger(trt.Logger.WARNING)
        started = time.perf_counter_ns()
        builder = trt.Builder(logger)
        network = builder.create_network(0)
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(model_path):
            errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
            raise RuntimeError("TensorRT's ONNX parser failed: " + ("; ".join(errors[:3]) or "no detail"))
        self.timings["load_ms"] = _ms(started)
        config = builder.create_builder_config()
        precision = spec.get("precision") or "f32"
        if precision == "f16":
            config.set_flag(trt.BuilderFlag.FP16)
        elif precision == "bf16":
            config.set_flag(trt.BuilderFlag.BF16)
        input_dims = {network.get_input(i).name: tuple(network.get_input(i).shape) for i in range(network.num_inputs)}
        shapes = profile_shapes(input_dims, {k: v.shape for k, v in feeds.items() if k in input_dims})
        if shapes:
            profile = builder.create_optimization_profile()
            for name, (lo, opt, hi) in shapes.items():
                profile.set_shape(name, lo, opt, hi)
            config.add_optimization_profile(profile)
        started = time.perf_counter_ns()
        with ranges().range("TensorRT: build"):
            plan = builder.build_serialized_network(network, config)
        if plan is None:
            raise RuntimeError("TensorRT could not build an engine for this model (see the builder log)")
        self.engine_obj = trt.Runtime(logger).deserialize_cuda_engine(plan)
        self.context = self.engine_obj.create_execution_context()
        self.timings["session_ms"] = _ms(started)
        self.stream = self._check(cudart.cudaStreamCreate())
        for i in range(self.engine_obj.num_io_tensors):
            name = self.engine_obj.get_tensor_name(i)
            dtype = np.dtype(trt.nptype(self.engine_obj.get_tensor_dtype(name)))
            if self.engine_obj.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
                host = np.ascontiguousarray(feeds[name], dtype=dtype)
                self.context.set_input_shape(name, host.shape)
                ptr = self._alloc(host.nbytes)
                self._check(cudart.cudaMemcpy(ptr, host.ctypes.data, host.nbytes,
                                              cudart.cudaMemcpyKind.cudaMemcpyHostToDevice))
            else:
                shape = tuple(self.context.get_tensor_shape(name))
                if any(d < 0 for d in shape):
                    raise RuntimeError(f"output {name!r} has a data-dependent shape; not supported by this runner")
                ptr = self._alloc(int(np.prod(shape)) * dtype.itemsize)
            self.context.set_tensor_address(name, ptr)
        self.infer = self._infer
        self.call = (self._infer, ())
        self.details = {"precision_requested": precision, "verified": False,
                        "note": "TensorRT path not verified here; GPU compute time without host copies"}

    def _check(self, result: Any) -> Any:
        err, *rest = result if isinstance(result, tuple) else (result,)
        if int(getattr(err, "value", err)) != 0:
            raise RuntimeError(f"CUDA error {err}")
        return rest[0] if len(rest) == 1 else (tuple(rest) or None)

    def _alloc(self, nbytes: int) -> int:
        ptr = self._check(self._cudart.cudaMalloc(max(int(nbytes), 1)))
        self._allocations.append(ptr)
        return ptr

    def _infer(self) -> None:
        if not self.context.execute_async_v3(stream_handle=int(self.stream)):
            raise RuntimeError("TensorRT execution failed (execute_async_v3 returned False)")
        self._check(self._cudart.cudaStreamSynchronize(self.stream))

    def close(self) -> None:
        for ptr in self._allocations:
            self._cudart.cudaFree(ptr)
        self._allocations.clear()
        self._cudart.cudaStreamDestroy(self.stream)


# ============================================================================ MNN, LiteRT

class ConvertedRunner(Runner):
    """MNN or LiteRT: the studio's converter + runtime (``studio.core.engines.mnn`` / ``litert``),
    converted and loaded before timing; inputs converted once (MNN ``Var`` constants, LiteRT
    NHWC arrays). ``timings``: ``convert_ms`` (MNNConvert / onnx2tf) and ``session_ms`` (the
    runtime's load) separately."""

    def __init__(self, model_path: str, spec: Mapping[str, Any], feeds: Mapping[str, np.ndarray], *,
                 out_dir: Path) -> None:
        super().__init__()
        from studio.core.jobs import JobContext

        self.engine = str(spec["engine"])
        started = time.perf_counter_ns()
        if self.engine == "mnn":
            from studio.core.engines.mnn import MnnRunner as Core
        else:
            from studio.core.engines.litert import LiteRtRunner as Core
        self.timings["import_ms"] = _ms(started)
        scratch = out_dir / f"{self.engine}_{time.perf_counter_ns()}"
        scratch.mkdir(parents=True, exist_ok=True)
        ctx = JobContext(scratch=scratch, out_dir=out_dir, cpu_threads=spec.get("threads"))
        args = {"precision": spec.get("precision") or "f32", "intra_op_threads": spec.get("threads")}
        with ranges().range(f"{self.engine}: convert + load"):
            self.core = Core(model_path, args, ctx)
            self.infer = self.core.bind(feeds)
        self.call = (self.infer, ())
        d = self.core.details
        self.timings.update(convert_ms=d.get("convert_ms"), session_ms=d.get("load_ms"), load_ms=None)
        self.details = {k: d.get(k) for k in ("threads", "precision_requested", "layout", "names_mapped",
                                              "converter_command", "convert_ms", "load_ms") if d.get(k) is not None}
        self.details["precision_effective"] = f"{args['precision']} weights, fp32 compute"

    def close(self) -> None:
        self.core.close()


# ============================================================================ factory

def open_runner(model_path: str, spec: Mapping[str, Any], feeds: Mapping[str, np.ndarray], *, out_dir: Path,
                profile_tag: str | None = None, perf_counters: bool = False, cache: bool = False,
                hint: str | None = None) -> Runner:
    """Open ``model_path`` on the engine of ``spec`` (an :meth:`EngineSpec.to_args` dict).

    ``profile_tag``: ORT writes its profile JSON ``ort_profile_<tag>_*.json``
    into ``out_dir``; ``perf_counters``: OpenVINO ``PERF_COUNT``; ``cache``:
    OpenVINO ``CACHE_DIR`` in ``out_dir``; ``hint`` overrides the spec's
    OpenVINO performance hint (the concurrency sweep uses THROUGHPUT).
    """
    engine = spec.get("engine")
    if engine == "onnxruntime":
        return OrtRunner(model_path, spec, feeds, out_dir=out_dir, profile_tag=profile_tag)
    if engine == "openvino":
        return OvRunner(model_path, spec, feeds, out_dir=out_dir, perf_counters=perf_counters, cache=cache,
                        hint=hint)
    if engine == "tensorrt":
        return TrtRunner(model_path, spec, feeds, out_dir=out_dir)
    if engine in ("mnn", "litert"):
        return ConvertedRunner(model_path, spec, feeds, out_dir=out_dir)
    raise ValueError(f"unknown engine {engine!r}")
