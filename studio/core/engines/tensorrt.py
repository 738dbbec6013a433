"""TensorRT adapter (NOT VERIFIED HERE: written against TensorRT 10.x's documented
Python API and NVIDIA's samples; no GPU or TensorRT wheel was available where
it was written, so only the unavailable path and the pure-Python helpers are
tested).

Flow of a TensorRT run (the ``engine.run`` job, in a sandbox worker, ``tensorrt`` imported there):
``trt.Builder`` -> ``create_network(0)`` (explicit batch is the only mode in
10.x) -> ``trt.OnnxParser.parse_from_file`` (external data resolves next to
the model) -> ``create_builder_config`` with a workspace pool limit and
FP16/BF16 flags when asked -> one optimization profile for dynamic inputs
(:func:`profile_shapes`) -> ``build_serialized_network`` ->
``Runtime.deserialize_cuda_engine`` -> ``create_execution_context`` ->
``set_input_shape`` / ``set_tensor_address`` -> ``execute_async_v3`` on a CUDA
stream (:class:`TrtRunner`, this engine's implementation of the one runner
protocol of :mod:`studio.core.engines.sessions`). Device memory comes from
cuda-python (``cuda.bindings.runtime``, or the older ``cuda.cudart``). Outputs with
data-dependent shapes (NonZero...) need an output allocator and are refused with a
clear message.

CUDA reserves very large virtual address ranges, so the worker for this job runs
without ``RLIMIT_AS`` (the parent's resident-memory watchdog still applies).
"""

from __future__ import annotations

import glob
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.engines.base import (
    Availability,
    RunOptions,
    WorkerEngine,
    module_present,
    package_version,
)
from studio.core.engines.base import elapsed_ms, require_feeds, require_outputs
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, default_limits

__all__ = ["NOT_INSTALLED_REASON", "TensorRtEngine", "TrtRunner", "profile_shapes"]

NOT_INSTALLED_REASON = ("TensorRT is not installed (it needs an NVIDIA GPU and NVIDIA's package index); "
                        "install onnx-studio[tensorrt] on a GPU machine")
_DISTRIBUTIONS = ("tensorrt", "tensorrt-cu13", "tensorrt-cu12", "tensorrt-cu11", "tensorrt_cu13", "tensorrt_cu12",
                  "tensorrt-libs", "tensorrt_libs")

Shape = tuple[int, ...]


class TensorRtEngine(WorkerEngine, engine="tensorrt"):
    def _probe_installed(self) -> Availability:
        return _probe()

    def _prepare(self, options: RunOptions, limits: Limits | None,
                 out_dir: Path | None) -> tuple[Limits | None, bool]:
        """CUDA reserves far more address space than it uses: no RLIMIT_AS for TensorRT
        (the RSS watchdog still applies). Builds an engine for the feed shapes (not verified here)."""
        return replace(limits or default_limits(), address_space_limit=False), False



# ============================================================================ availability

def visible_cuda_devices() -> tuple[str, ...]:
    """NVIDIA GPUs this process may use, without initialising CUDA.

    Honours ``CUDA_VISIBLE_DEVICES`` ("" or "-1" hide every device). On Linux
    the device nodes ``/dev/nvidiaN`` are counted; elsewhere a device is assumed
    when TensorRT is installed (the job then reports a CUDA error if not).
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles"):
        return ()
    if sys.platform.startswith("linux"):
        nodes = sorted(int(p[len("/dev/nvidia"):]) for p in glob.glob("/dev/nvidia[0-9]*")
                       if p[len("/dev/nvidia"):].isdigit())
        found = tuple(f"GPU:{n}" for n in nodes)
        if visible is not None and found:
            wanted = [v.strip() for v in visible.split(",") if v.strip()]
            return tuple(f"GPU:{i}" for i in range(min(len(wanted), len(found))))
        return found
    return ("GPU:0",)


def _probe() -> Availability:
    if not module_present("tensorrt"):
        return Availability(False, None, NOT_INSTALLED_REASON)
    version = package_version(*_DISTRIBUTIONS)
    devices = visible_cuda_devices()
    if not devices:
        return Availability(False, version, f"TensorRT {version or ''} is installed but no NVIDIA GPU is visible "
                            "to this process (check the driver and CUDA_VISIBLE_DEVICES)".replace("  ", " "))
    if not (module_present("cuda.bindings") or module_present("cuda.cudart")):
        return Availability(False, version, "TensorRT is installed but cuda-python is missing "
                            "(pip install cuda-python); it provides the GPU buffers", devices)
    return Availability(True, version, None, devices)


# ============================================================================ pure helpers

def profile_shapes(input_dims: Mapping[str, Sequence[int]], feed_shapes: Mapping[str, Sequence[int]],
                   overrides: Mapping[str, Sequence[Sequence[int]]] | None = None
                   ) -> dict[str, tuple[Shape, Shape, Shape]]:
    """(min, opt, max) shapes of one optimization profile.

    ``input_dims``: the network's input dims, ``-1`` where dynamic. Only
    dynamic inputs get an entry. An override ``(min, opt, max)`` wins;
    otherwise the profile is exactly the feed shape. Raises ``StudioError``
    when a feed or an override does not fit the network's rank and static dims,
    or when ``min <= opt <= max`` or ``min <= feed <= max`` fails.
    """
    overrides = overrides or {}
    unknown = sorted(set(overrides) - set(input_dims))
    if unknown:
        raise StudioError(f"TensorRT profile names unknown input(s): {', '.join(unknown[:5])}",
                          code=ErrorCode.BAD_OPTION)
    out: dict[str, tuple[Shape, Shape, Shape]] = {}
    for name, dims in input_dims.items():
        dims = tuple(int(d) for d in dims)
        feed = tuple(int(d) for d in feed_shapes[name]) if name in feed_shapes else None
        if feed is not None:
            _check_fits(name, dims, feed, "feed")
        if all(d >= 0 for d in dims):
            continue
        if name in overrides:
            shapes = tuple(tuple(int(d) for d in s) for s in overrides[name])
            if len(shapes) != 3:
                raise StudioError(f"TensorRT profile for {name!r} needs (min, opt, max) shapes",
                                  code=ErrorCode.BAD_OPTION)
            lo, opt, hi = shapes
            for label, shape in (("min", lo), ("opt", opt), ("max", hi)):
                _check_fits(name, dims, shape, f"profile {label}")
            if not all(a <= b <= c for a, b, c in zip(lo, opt, hi)):
                raise StudioError(f"TensorRT profile for {name!r} must satisfy min <= opt <= max",
                                  code=ErrorCode.BAD_OPTION)
            if feed is not None and not all(a <= f <= c for a, f, c in zip(lo, feed, hi)):
                raise StudioError(f"feed {name!r} shape {list(feed)} is outside its TensorRT profile "
                                  f"[{list(lo)} .. {list(hi)}]", code=ErrorCode.BAD_OPTION)
            out[name] = (lo, opt, hi)
        elif feed is not None:
            out[name] = (feed, feed, feed)
        else:
            raise StudioError(f"input {name!r} has dynamic dims {list(dims)}: give a feed or a TensorRT profile",
                              code=ErrorCode.BAD_OPTION)
    return out


def _check_fits(name: str, dims: Shape, shape: Shape, what: str) -> None:
    if len(shape) != len(dims):
        raise StudioError(f"{what} for {name!r} has rank {len(shape)}, the network input has rank {len(dims)}",
                          code=ErrorCode.BAD_OPTION)
    for axis, (d, s) in enumerate(zip(dims, shape)):
        if s < 0 or (d >= 0 and d != s):
            raise StudioError(f"{what} for {name!r} has {s} on axis {axis}, the network input needs "
                              f"{d if d >= 0 else 'a size >= 0'}", code=ErrorCode.BAD_OPTION)


# ============================================================================ runner (worker side, not verified)

def _cudart() -> Any:
    try:
        from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
    except ImportError:
        from cuda import cudart  # older cuda-python
    return cudart


def _cuda_check(result: Any) -> Any:
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(getattr(err, "value", err)) != 0:
        raise RuntimeError(f"CUDA error {err}")
    return rest[0] if len(rest) == 1 else (tuple(rest) or None)


def _build_engine(trt: Any, logger: Any, path: str, args: Mapping[str, Any], ctx: JobContext,
                  precision: str) -> tuple[Any, list[str], dict, float]:
    """Parse the ONNX, build an engine for one profile around the feed shapes (not verified here)."""
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(path)):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise RuntimeError("TensorRT's ONNX parser failed: " + ("; ".join(errors[:3]) or "no detail"))

    ctx.set_stage("TensorRT build")
    config = builder.create_builder_config()
    if args.get("workspace_bytes"):
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(args["workspace_bytes"]))
    if precision == "f16":
        config.set_flag(trt.BuilderFlag.FP16)
    elif precision == "bf16":
        config.set_flag(trt.BuilderFlag.BF16)
    input_dims = {network.get_input(i).name: tuple(network.get_input(i).shape) for i in range(network.num_inputs)}
    onnx_outputs = [network.get_output(i).name for i in range(network.num_outputs)]
    profile_map = profile_shapes(input_dims, dict(args.get("input_shapes") or {}), args.get("trt_profile"))
    if profile_map:
        profile = builder.create_optimization_profile()
        for name, (lo, opt, hi) in profile_map.items():
            profile.set_shape(name, lo, opt, hi)
        config.add_optimization_profile(profile)
    started = time.perf_counter()
    plan = builder.build_serialized_network(network, config)
    build_ms = (time.perf_counter() - started) * 1000
    if plan is None:
        raise RuntimeError("TensorRT could not build an engine for this model (see the builder log)")
    runtime = trt.Runtime(logger)
    return runtime.deserialize_cuda_engine(plan), onnx_outputs, profile_map, build_ms


class TrtRunner:
    """A TensorRT 10 engine (built from the ONNX file, or a serialized ``.plan``/``.engine`` run as
    built), one execution context and CUDA stream, many inferences. NOT VERIFIED HERE (no GPU where
    it was written).

    ``args``: ``precision`` (FP16/BF16 builder flags), ``workspace_bytes``, ``trt_profile``
    overrides, ``custom_op_libraries`` (plugin libraries), ``input_shapes`` (the feeds' shapes: the
    optimization profile of dynamic inputs). :meth:`bind` allocates device buffers and copies the
    inputs once, so its call is one ``execute_async_v3`` plus a stream synchronize (GPU compute
    time, no host copies); :meth:`infer` binds, runs and copies the outputs back."""

    engine = "tensorrt"

    def __init__(self, path: str, args: Mapping[str, Any], ctx: JobContext) -> None:
        ctx.set_stage("TensorRT parse")
        started = time.perf_counter()
        import tensorrt as trt

        self._trt = trt
        self._cudart = _cudart()
        self._timings: dict[str, float | None] = {"import_ms": elapsed_ms(started)}
        self._allocations: list[int] = []
        self._outputs: dict[str, tuple[np.ndarray, int]] = {}
        logger = trt.Logger(trt.Logger.WARNING)
        for lib in args.get("custom_op_libraries") or []:      # plugin libraries (export bundles ship them)
            trt.get_plugin_registry().load_library(str(lib))
        self.precision = args.get("precision") or "f32"
        started = time.perf_counter()
        if str(path).endswith((".plan", ".engine")):
            # A serialized engine (export's build_engine.py wrote it): run it as built.
            ctx.set_stage("TensorRT deserialize")
            with open(str(path), "rb") as fh:
                engine = trt.Runtime(logger).deserialize_cuda_engine(fh.read())
            if engine is None:
                raise RuntimeError("TensorRT could not deserialize the plan (another GPU or TensorRT version?)")
            onnx_outputs = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)
                            if engine.get_tensor_mode(engine.get_tensor_name(i)) != trt.TensorIOMode.INPUT]
            build_ms, profile_map = 0.0, {}
        else:
            engine, onnx_outputs, profile_map, build_ms = _build_engine(trt, logger, path, args, ctx, self.precision)
        self.engine_obj = engine
        self.context = engine.create_execution_context()
        self._timings.update(load_ms=None, session_ms=elapsed_ms(started))
        ctx.set_stage("TensorRT inference")
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self.input_names = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        produced = [n for n in names if engine.get_tensor_mode(n) != trt.TensorIOMode.INPUT]
        self.output_names = [n for n in onnx_outputs if n in produced]
        self.stream = _cuda_check(self._cudart.cudaStreamCreate())
        self.details: dict[str, Any] = {
            "engine_version": trt.__version__, "precision_requested": self.precision,
            "build_ms": round(build_ms, 3), "session_ms": round(build_ms, 3),
            "profile": {k: [list(s) for s in v] for k, v in profile_map.items()}, "verified": False}

    @property
    def timings(self) -> dict[str, float | None]:
        return dict(self._timings)

    @property
    def effective_precision(self) -> str | None:
        # the builder flags allow lower-precision kernels; TensorRT picks per layer
        return "f32" if self.precision == "f32" else f"{self.precision} allowed, per layer"

    def prepare(self, feeds: Mapping[str, Any]) -> None:
        require_feeds(self.input_names, feeds)

    def _alloc(self, nbytes: int) -> int:
        ptr = _cuda_check(self._cudart.cudaMalloc(max(int(nbytes), 1)))
        self._allocations.append(ptr)
        return ptr

    def _free(self) -> None:
        for ptr in self._allocations:
            self._cudart.cudaFree(ptr)
        self._allocations.clear()
        self._outputs.clear()

    def bind(self, feeds: Mapping[str, Any]) -> Callable[[], Any]:
        trt, cudart, engine = self._trt, self._cudart, self.engine_obj
        require_feeds(self.input_names, feeds)
        self._free()
        for name in self.input_names:
            # order="C" keeps a scalar feed rank 0 (ascontiguousarray makes it shape (1,))
            host = np.asarray(feeds[name], dtype=np.dtype(trt.nptype(engine.get_tensor_dtype(name))), order="C")
            self.context.set_input_shape(name, host.shape)
            ptr = self._alloc(host.nbytes)
            _cuda_check(cudart.cudaMemcpy(ptr, host.ctypes.data, host.nbytes,
                                          cudart.cudaMemcpyKind.cudaMemcpyHostToDevice))
            self.context.set_tensor_address(name, ptr)
        for name in self.output_names:
            shape = tuple(self.context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise RuntimeError(f"output {name!r} has a data-dependent shape; this runner does not support it")
            host = np.empty(shape, dtype=np.dtype(trt.nptype(engine.get_tensor_dtype(name))))
            ptr = self._alloc(host.nbytes)
            self.context.set_tensor_address(name, ptr)
            self._outputs[name] = (host, ptr)
        return self._execute

    def _execute(self) -> None:
        if not self.context.execute_async_v3(stream_handle=int(self.stream)):
            raise RuntimeError("TensorRT execution failed (execute_async_v3 returned False)")
        _cuda_check(self._cudart.cudaStreamSynchronize(self.stream))

    def infer(self, feeds: Mapping[str, Any], names: list[str] | None = None) -> dict[str, Any]:
        wanted = names or self.output_names
        require_outputs(wanted, self.output_names)
        self.bind(feeds)()
        cudart = self._cudart
        for host, ptr in self._outputs.values():
            _cuda_check(cudart.cudaMemcpy(host.ctypes.data, ptr, host.nbytes,
                                          cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost))
        return {n: self._outputs[n][0].copy() for n in wanted}

    def close(self) -> None:
        self._free()
        if getattr(self, "stream", None) is not None:
            self._cudart.cudaStreamDestroy(self.stream)
            self.stream = None
