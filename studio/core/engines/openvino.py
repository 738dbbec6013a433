"""OpenVINO adapter: read, compile and infer in a sandbox worker.

The model is read through OpenVINO's **ONNX frontend only**
(``FrontEndManager().load_by_framework("onnx")``, :mod:`~studio.core.engines.openvino_io`):
``Core.read_model`` would let any frontend claim the file (an IR ``.xml``, TFLite, Paddle...
uploaded as ``.onnx``), so a file the ONNX frontend does not accept is refused as "not an
ONNX model". Compilation pins ``INFERENCE_PRECISION_HINT`` to ``f32`` unless asked otherwise
(on CPUs with bf16/AMX support OpenVINO would otherwise silently compute in bf16); the
effective precision is reported. Outputs are mapped back to the ONNX graph's output names
through OpenVINO's tensor names. :class:`OvRunner` is this engine's implementation of the
one runner protocol (:mod:`studio.core.engines.sessions`); the shared ``engine.run`` job is one
inference of it.

Known OpenVINO 2026.4 behaviour (measured): a ``Loop`` whose trip count comes
from an input is truncated to 32 bits, so 2^62 runs 0 iterations (silently
wrong) and 2^62-1 runs "forever" (stopped by the sandbox timeout).
"""

from __future__ import annotations

import time
from pathlib import Path
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from studio.core.engines.base import Availability, WorkerEngine, package_version
from studio.core.engines.openvino_io import (
    UnknownRank,
    execution_precisions,
    onnx_output_names,
    openvino_inputs,
    ov_config,
    precision_name,
    read_onnx_at_shapes,
    read_onnx_model,
    read_studio_ir,
)
from studio.core.engines.base import elapsed_ms, require_outputs
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.mapped_pages import released_pages

__all__ = ["OpenVinoEngine", "OvRunner", "ov_info_job", "reshape_to_shapes"]


class OpenVinoEngine(WorkerEngine, engine="openvino"):
    def _probe_installed(self) -> Availability:
        # Devices need the runtime itself (a worker job, see probe()); CPU is always there.
        return Availability(True, package_version("openvino", "openvino-nightly"), None, ("CPU",))


# ============================================================================ runner (worker side)

class OvRunner:
    """One compiled model and infer request, many inferences.

    ``args``: :meth:`RunOptions.to_args` keys (``device``, ``precision``, ``performance_hint``
    (LATENCY unless given), ``intra_op_threads``, ``openvino_ir``, ``onnx_path``: an IR's source ONNX
    model, whose output names and order the runner reports), plus ``static_shapes`` (input
    name -> shape: dynamic inputs are reshaped to it before compiling, as ``benchmark_app -shape``
    does; :attr:`reshaped_to` / :attr:`dynamic_note` say what happened), ``perf_counters``
    (``PERF_COUNT``), ``model_cache`` (``CACHE_DIR`` inside the job's ``out_dir``, R27) and ``extensions``
    (OpenVINO extension libraries for custom ops, added before the model is read).

    A model the ONNX frontend converts only with its rank known (a Reshape to a shape of computed length feeding
    a Conv: Silero VAD) is converted at the run's input shapes (``static_shapes`` or ``input_shapes``, else the
    first feeds'; again for feeds of other shapes), from a copy in the job's scratch folder; :attr:`conversion_note`
    (also in ``details``) says so. Where no input was dynamic the read's error stands, with the advice to fix
    the input shapes."""

    engine = "openvino"

    def __init__(self, path: str, args: Mapping[str, Any], ctx: JobContext) -> None:
        ctx.set_stage("OpenVINO model read")
        started = time.perf_counter()
        import openvino as ov

        self._ov = ov
        self._path, self._args, self._ctx = path, args, ctx
        self._timings: dict[str, float | None] = {"import_ms": elapsed_ms(started)}
        self.core = ov.Core()
        for lib in args.get("extensions") or []:     # custom ops: the extension an exported IR was converted with
            self.core.add_extension(str(lib))
        # the plain read stopped at a tensor of unknown rank: converted at the feeds' shapes instead (now when the
        # args give them, else at the first feeds: prepare/infer/bind), again for feeds of other shapes
        self._unknown_rank: UnknownRank | None = None
        self._fixed_at: dict[str, list[int]] | None = None
        self.conversion_note: str | None = None
        started = time.perf_counter()
        # the weight files' mapped pages OpenVINO reads while its plugin repacks them are dropped as it
        # goes: else the compiled process holds the weights twice (1.84x on a 1.48 GiB decoder, 0.90x so);
        # large weights only (studio.core.mapped_pages.MIN_WEIGHT_BYTES)
        with released_pages(path):
            try:
                model = (read_studio_ir(path, self.core) if args.get("openvino_ir")
                         else read_onnx_model(path, args.get("extensions")))
            except UnknownRank as exc:
                self._unknown_rank = exc
                shapes = args.get("static_shapes") or args.get("input_shapes")
                if not shapes:
                    self._await_shapes(path, args)
                    return
                model = self._read_at(shapes)
            self._open(model, started)

    def _await_shapes(self, path: str, args: Mapping[str, Any]) -> None:
        """Opened without a compiled model (no shapes yet): the ONNX names stand in until the first feeds."""
        import onnx

        header = onnx.load_model(path, load_external_data=False)
        inits = {t.name for t in header.graph.initializer}
        self.input_names = [i.name for i in header.graph.input if i.name not in inits]
        self.output_names = onnx_output_names(str(args.get("onnx_path") or path)) or []
        self.compiled = self.request = None
        self.input_ports: list = []
        self.reshaped_to, self.dynamic_note, self._effective = None, None, None
        self.details: dict[str, Any] = {"engine_version": self._ov.get_version(),
                                        "device": str(args.get("device") or "CPU"),
                                        "precision_requested": args.get("precision") or "f32"}

    def _read_at(self, shapes: Mapping[str, Any]) -> Any:
        """The model converted with its dynamic inputs fixed at ``shapes`` (in the job's scratch folder);
        the first error stands when no input was dynamic."""
        fixed = {n: [int(d) for d in s] for n, s in shapes.items()}
        read = read_onnx_at_shapes(self._path, fixed, self._ctx.scratch / "ov_fixed_shapes",
                                   self._args.get("extensions"))
        if read is None:
            raise self._unknown_rank or RuntimeError("the OpenVINO model read did not fail")
        self._fixed_at, self.conversion_note = fixed, read[1]
        return read[0]

    def _at_feed_shapes(self, feeds: Mapping[str, Any]) -> None:
        """A model that converts only at fixed shapes, converted and compiled at these feeds' shapes (once per
        shape set); nothing for any other model."""
        if self._unknown_rank is None:
            return
        shapes = {n: [int(d) for d in np.shape(v)] for n, v in feeds.items() if isinstance(v, np.ndarray)}
        if shapes == self._fixed_at:
            return
        self._ctx.set_stage("OpenVINO model read")
        started = time.perf_counter()
        self.close()
        self._fixed_at = None          # compiled at no shapes until this read succeeds
        with released_pages(self._path):
            self._open(self._read_at(shapes), started)

    def _open(self, model: Any, started: float) -> None:
        """Reshape (``static_shapes``), compile, and learn the ports and names of ``model``."""
        args, ctx, ov, path = self._args, self._ctx, self._ov, self._path
        self.reshaped_to, self.dynamic_note = reshape_to_shapes(ov, model, args.get("static_shapes"))
        read_ms = self._timings["load_ms"] = elapsed_ms(started)
        ctx.set_stage("OpenVINO compile")
        precision = args.get("precision") or "f32"
        cache_dir = None
        if args.get("model_cache"):   # the model cache stays in the job folder (R27)
            cache_dir = ctx.out_dir / "ov_cache"
            cache_dir.mkdir(parents=True, exist_ok=True)
        self.device = str(args.get("device") or "CPU")
        # f32 pinned is the model's own numbers: the CPU plugin's activation quantization of compressed-weight
        # MatMuls stays off unless asked for (RunOptions.dynamic_quantization)
        asked = args.get("dynamic_quantization")
        dynamic = precision != "f32" if asked is None else bool(asked)
        config = ov_config(precision=precision, hint=args.get("performance_hint") or "LATENCY",
                           threads=args.get("intra_op_threads") or ctx.cpu_threads,
                           perf_counters=bool(args.get("perf_counters")), cache_dir=cache_dir,
                           dynamic_quantization=dynamic or self.device != "CPU")
        started = time.perf_counter()
        self.compiled = self.core.compile_model(model, self.device, config)
        compile_ms = self._timings["session_ms"] = elapsed_ms(started)
        ctx.set_stage("OpenVINO inference")     # an error from here on is not a compile error
        self._effective = self.compiled_property("INFERENCE_PRECISION_HINT", precision_name)
        self.request = self.compiled.create_infer_request()
        self.input_ports = list(self.compiled.inputs)
        self.input_names = [sorted(p.get_names())[0] if p.get_names() else f"#{i}"
                            for i, p in enumerate(self.input_ports)]
        ports = list(self.compiled.outputs)
        by_name: dict[str, int] = {}
        for index, port in enumerate(ports):
            for n in port.get_names():
                by_name.setdefault(n, index)
        names = onnx_output_names(str(args.get("onnx_path") or path))   # an IR: its source ONNX model's order
        if names is None or len(names) != len(ports):
            # the names the model declares (an IR's Results), in the compiled order: compiling can add the
            # producing node's tensor name to a port ('/.../Add_1_output_0' beside 'last_hidden_state' after
            # NNCF), and the first of those sorted is not the output's name
            declared = list(model.outputs) if len(model.outputs) == len(ports) else ports
            names = [sorted(p.get_names())[0] if p.get_names() else f"output_{i}" for i, p in enumerate(declared)]
        self.output_names = names
        self.port_of = {n: by_name.get(n, i) for i, n in enumerate(names)}
        self.bound_inputs: dict[int, np.ndarray] = {}
        self.details = {
            "engine_version": ov.get_version(), "device": self.device, "precision_requested": precision,
            "precision_effective": self.effective_precision, "execution_precisions": execution_precisions(self.compiled),
            "precision_default": self.device_default_precision(),
            "read_ms": round(read_ms, 3),
            "compile_ms": round(compile_ms, 3), "session_ms": round(read_ms + compile_ms, 3),
            **({"conversion_note": self.conversion_note} if self.conversion_note else {})}

    @property
    def timings(self) -> dict[str, float | None]:
        return dict(self._timings)

    @property
    def effective_precision(self) -> str | None:
        """The compiled model's ``INFERENCE_PRECISION_HINT`` (what it computes in), read once."""
        return self._effective

    def device_default_precision(self) -> str | None:
        """What the device computes in when ``INFERENCE_PRECISION_HINT`` is not set (bf16 on CPUs with
        AVX512-BF16/AMX, f32 on AVX2-only ones): what a plain ``compile_model`` of an exported IR gets."""
        try:
            return precision_name(self.core.get_property(self.device, "INFERENCE_PRECISION_HINT"))
        except Exception:  # noqa: BLE001 - not every device reports it
            return None

    def compiled_property(self, name: str, convert: Callable[[Any], Any] = str) -> Any:
        """A compiled-model property (None where the device does not report it)."""
        try:
            return convert(self.compiled.get_property(name))
        except Exception:  # noqa: BLE001 - not every device reports every property
            return None

    def prepare(self, feeds: Mapping[str, Any]) -> None:
        self._at_feed_shapes(feeds)
        openvino_inputs(self.input_ports, feeds)

    def infer(self, feeds: Mapping[str, Any], names: list[str] | None = None) -> dict[str, Any]:
        self._at_feed_shapes(feeds)
        self.request.infer(openvino_inputs(self.input_ports, feeds))
        wanted = names or self.output_names
        require_outputs(wanted, self.port_of)
        return {n: np.array(self.request.get_output_tensor(self.port_of[n]).data, copy=True) for n in wanted}

    def bind(self, feeds: Mapping[str, Any]) -> Callable[[], Any]:
        """Input tensors set on the request once; the call is ``request.infer()`` (outputs copied
        to host arrays, as an application gets them)."""
        # np.asarray(order="C"), not ascontiguousarray: that makes a scalar (rank-0) feed shape (1,), which a []
        # port refuses (Silero's sr)
        self._at_feed_shapes(feeds)
        self.bound_inputs = {i: np.asarray(a, order="C") for i, a in openvino_inputs(self.input_ports, feeds).items()}
        for index, array in self.bound_inputs.items():
            self.request.set_input_tensor(index, self._ov.Tensor(array))
        return self.request.infer

    def close(self) -> None:
        self.request = None
        self.compiled = None


def reshape_to_shapes(ov: Any, model: Any, shapes: Mapping[str, Any] | None
                      ) -> tuple[dict[str, list[int]] | None, str | None]:
    """Dynamic inputs reshaped to ``shapes`` (input name -> shape), in place: (input -> shape reshaped to, or
    None; why not, or None). The runner compiles at the feeds' shapes this way, as OpenVINO advises for latency
    (static kernels, no shape inference per request); benchmarks that time OpenVINO beside it use it too."""
    if not shapes:
        return None, None
    stand_ins = {n: np.broadcast_to(np.zeros((), np.float32), tuple(int(d) for d in s)) for n, s in shapes.items()}
    by_index = openvino_inputs(list(model.inputs), stand_ins)
    names = {id(a): n for n, a in stand_ins.items()}
    static = {i: list(a.shape) for i, a in by_index.items() if model.inputs[i].get_partial_shape().is_dynamic}
    if not static:
        return None, None
    try:
        model.reshape({model.inputs[i]: ov.PartialShape(shape) for i, shape in static.items()})
    except Exception as exc:  # noqa: BLE001 - some graphs cannot be reshaped: run them dynamic
        return None, (f"could not reshape to the feed shapes ({str(exc).splitlines()[0][:160]}); "
                      "compiled with dynamic shapes")
    return {names[id(by_index[i])]: shape for i, shape in static.items()}, None


@job("ov.info")
def ov_info_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    import openvino as ov

    core = ov.Core()
    devices = list(core.available_devices)
    names = {}
    for device in devices:
        try:
            names[device] = str(core.get_property(device, "FULL_DEVICE_NAME"))
        except Exception:  # noqa: BLE001
            names[device] = device
    return JobOutput(data={"version": ov.get_version(), "devices": devices, "device_names": names})
