"""Worker-side runners: one engine session, many inferences (Polygraphy's
activate / infer / deactivate idea).

The adapters' ``run`` creates a session per call, which is right for one-off
runs. Jobs that run a model many times (a comparison over several input sets,
each chunk of a layer-wise comparison, latency measurement) open a runner once
inside their worker and call :meth:`infer` repeatedly. Only imported inside
sandbox workers: it imports the engines.

OpenVINO is read through its ONNX frontend only and compiled with
``INFERENCE_PRECISION_HINT`` pinned (``f32`` unless asked), exactly as the
``ov.run`` job does; the effective precision is reported in ``details``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from studio.core.jobs import JobContext

__all__ = ["Runner", "open_runner", "measure_latency", "openvino_inputs"]


def openvino_inputs(ports: list, feeds: Mapping[str, Any]) -> dict[int, Any]:
    """Feeds by OpenVINO input index: by tensor name; then, for parameters OpenVINO renamed (a
    sequence folded away hands a parameter its output's name: ONNX ``Y`` becomes ``out``), the
    unmatched feeds in graph order, when exactly as many remain and each shape fits the port."""
    import openvino as ov

    matched = {i: next((n for n in p.get_names() if n in feeds), None) for i, p in enumerate(ports)}
    loose = [i for i, n in matched.items() if n is None]
    rest = [n for n in feeds if n not in matched.values()]
    if loose and len(rest) == len(loose) and all(
            ports[i].get_partial_shape().compatible(ov.PartialShape(list(np.shape(feeds[n]))))
            for i, n in zip(loose, rest)):
        matched.update(zip(loose, rest))
    missing = [sorted(ports[i].get_names())[:3] or i for i, n in matched.items() if n is None]
    if missing:
        raise KeyError(f"missing feed for model input {missing[0]}")
    return {i: feeds[n] for i, n in matched.items()}


class Runner(Protocol):
    engine: str
    input_names: list[str]
    output_names: list[str]
    details: dict[str, Any]

    def infer(self, feeds: Mapping[str, Any], names: list[str] | None = None) -> dict[str, Any]: ...

    def close(self) -> None: ...


class OrtRunner:
    engine = "onnxruntime"

    def __init__(self, path: str, args: Mapping[str, Any], ctx: JobContext) -> None:
        import onnxruntime as ort

        from studio.core.engines.onnxruntime import _session_options

        so = _session_options(ort, args, ctx)
        started = time.perf_counter()
        self.session = ort.InferenceSession(str(path), sess_options=so,
                                            providers=list(args.get("providers") or ["CPUExecutionProvider"]),
                                            disabled_optimizers=list(args.get("disabled_optimizers") or []))
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.details = {"engine_version": ort.__version__, "providers": self.session.get_providers(),
                        "graph_optimization_level": args.get("graph_optimization_level") or "all",
                        "session_ms": round((time.perf_counter() - started) * 1000, 3)}

    def infer(self, feeds: Mapping[str, Any], names: list[str] | None = None) -> dict[str, Any]:
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise KeyError(f"missing feed(s) {', '.join(map(repr, missing[:5]))}")
        names = names or self.output_names
        values = self.session.run(names, {n: feeds[n] for n in self.input_names})
        return dict(zip(names, values))

    def close(self) -> None:
        self.session = None


class NotOnnxModel(ValueError):
    """OpenVINO's ONNX frontend does not accept the file."""


def onnx_frontend() -> Any:
    from openvino.frontend import FrontEndManager

    frontend = FrontEndManager().load_by_framework("onnx")
    if frontend is None:
        raise RuntimeError("OpenVINO's ONNX frontend is not available in this installation")
    return frontend


def check_onnx_for_openvino(path: str | Path) -> Any:
    """The ONNX frontend, after checking it accepts ``path``: no other frontend (IR, TFLite,
    Paddle...) may ever claim a file given to the studio as ONNX."""
    frontend = onnx_frontend()
    if not frontend.supported(str(path)):
        raise NotOnnxModel(f"{Path(path).name} is not an ONNX model (OpenVINO's ONNX frontend does not accept "
                           "it); other formats are not read")
    return frontend


def read_onnx_model(path: str | Path) -> Any:
    """An ``ov.Model`` read through the ONNX frontend only."""
    frontend = check_onnx_for_openvino(path)
    return frontend.convert(frontend.load(str(path)))


def read_studio_ir(path: str | Path) -> Any:
    """An ``ov.Model`` from an OpenVINO IR the studio itself wrote (an NNCF result, an export);
    user files always go through :func:`read_onnx_model`."""
    import openvino as ov

    xml = Path(path)
    if xml.suffix != ".xml" or not xml.with_suffix(".bin").is_file():
        raise ValueError("an OpenVINO IR is an .xml file with its .bin beside it")
    return ov.Core().read_model(str(xml), str(xml.with_suffix(".bin")))


def precision_name(value: Any) -> str:
    """OpenVINO's element type as text ('f32', 'bf16')."""
    for attr in ("to_string", "get_type_name"):
        fn = getattr(value, attr, None)
        if callable(fn):
            try:
                return str(fn())
            except Exception:  # noqa: BLE001
                continue
    return str(value)


def onnx_output_names(path: str | Path) -> list[str] | None:
    """The model's output names in ONNX order (OpenVINO's order may differ)."""
    try:
        import onnx

        model = onnx.load(str(path), load_external_data=False)
        return [o.name for o in model.graph.output]
    except Exception:  # noqa: BLE001 - fall back to OpenVINO's own order
        return None


def ov_config(*, precision: str = "f32", hint: str | None = None, threads: int | None = None,
              perf_counters: bool = False, cache_dir: Path | None = None) -> dict[str, Any]:
    """compile_model config: precision pinned (f32 unless asked; "default" leaves the plugin's
    choice, bf16 on CPUs that have it), hint, threads, per-layer counters, model cache."""
    config: dict[str, Any] = {}
    if precision != "default":
        config["INFERENCE_PRECISION_HINT"] = precision
    if hint:
        config["PERFORMANCE_HINT"] = str(hint)
    if threads:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    if perf_counters:
        config["PERF_COUNT"] = True
    if cache_dir is not None:
        config["CACHE_DIR"] = str(cache_dir)
    return config


class OvRunner:
    engine = "openvino"

    def __init__(self, path: str, args: Mapping[str, Any], ctx: JobContext) -> None:
        import openvino as ov

        started = time.perf_counter()
        model = read_studio_ir(path) if args.get("openvino_ir") else read_onnx_model(path)
        read_ms = (time.perf_counter() - started) * 1000
        ctx.set_stage("OpenVINO compile")
        precision = args.get("precision") or "f32"
        config = ov_config(precision=precision, hint=args.get("performance_hint") or "LATENCY",
                           threads=args.get("intra_op_threads") or ctx.cpu_threads)
        device = str(args.get("device") or "CPU")
        started = time.perf_counter()
        self.compiled = ov.Core().compile_model(model, device, config)
        compile_ms = (time.perf_counter() - started) * 1000
        ctx.set_stage("OpenVINO inference")     # an error from here on is not a compile error
        try:
            effective = precision_name(self.compiled.get_property("INFERENCE_PRECISION_HINT"))
        except Exception:  # noqa: BLE001 - not every device reports it
            effective = None
        self.request = self.compiled.create_infer_request()
        self.inputs = [(i, set(p.get_names())) for i, p in enumerate(self.compiled.inputs)]
        self.input_ports = list(self.compiled.inputs)
        self.input_names = [sorted(n)[0] if n else f"#{i}" for i, n in self.inputs]
        ports = list(self.compiled.outputs)
        by_name: dict[str, int] = {}
        for index, port in enumerate(ports):
            for n in port.get_names():
                by_name.setdefault(n, index)
        names = onnx_output_names(str(path))
        if names is None or len(names) != len(ports):
            names = [sorted(p.get_names())[0] if p.get_names() else f"output_{i}" for i, p in enumerate(ports)]
        self.output_names = names
        self.port_of = {n: by_name.get(n, i) for i, n in enumerate(names)}
        self.details = {"engine_version": ov.get_version(), "device": device, "precision_requested": precision,
                        "precision_effective": effective, "read_ms": round(read_ms, 3),
                        "compile_ms": round(compile_ms, 3), "session_ms": round(read_ms + compile_ms, 3)}

    def infer(self, feeds: Mapping[str, Any], names: list[str] | None = None) -> dict[str, Any]:
        self.request.infer(openvino_inputs(self.input_ports, feeds))
        wanted = names or self.output_names
        unknown = [n for n in wanted if n not in self.port_of]
        if unknown:
            raise KeyError(f"unknown output name(s) {', '.join(map(repr, unknown[:5]))}")
        return {n: np.array(self.request.get_output_tensor(self.port_of[n]).data, copy=True) for n in wanted}

    def close(self) -> None:
        self.request = None
        self.compiled = None


def open_runner(engine: str, path: str | Path, args: Mapping[str, Any], ctx: JobContext) -> Runner:
    """A runner for ``engine`` ("onnxruntime" | "openvino" | "mnn" | "litert"); ``args`` is ``RunOptions.to_args()``
    (ORT also reads ``disabled_optimizers``)."""
    if engine == "onnxruntime":
        return OrtRunner(str(path), args, ctx)
    if engine == "openvino":
        return OvRunner(str(path), args, ctx)
    if engine == "mnn":
        from studio.core.engines.mnn import MnnRunner

        return MnnRunner(str(path), args, ctx)
    if engine == "litert":
        from studio.core.engines.litert import LiteRtRunner

        return LiteRtRunner(str(path), args, ctx)
    raise ValueError(f"engine {engine!r} has no in-worker runner (TensorRT runs through its own job)")


def measure_latency(runs: Mapping[str, Callable[[], Any]], *, min_rounds: int = 3, max_rounds: int = 20,
                    per_round: int = 3, budget_s: float = 60.0, settle_s: float = 0.05) -> dict[str, list[float]]:
    """Seconds per call for each callable, in interleaved rounds: each round gives every
    variant a short block (one untimed call to warm its caches, then ``per_round`` timed
    ones). Short blocks, many rounds: on a shared machine the load changes by the second,
    and each variant must see the same mix of quiet and busy moments. A pause before each
    block lets the previous engine's spinning threads go idle. Rounds continue until the
    budget is spent (at least ``min_rounds``, at most ``max_rounds``)."""
    times: dict[str, list[float]] = {k: [] for k in runs}
    started = time.perf_counter()
    for r in range(max_rounds):
        for fn in runs.values():
            if r == 0:
                fn()                          # first call: lazy initialisation, not timed
        for key, fn in runs.items():
            if len(runs) > 1:
                time.sleep(settle_s)
            fn()
            for _ in range(per_round):
                t0 = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - t0)
        if r + 1 >= min_rounds and time.perf_counter() - started > budget_s:
            break
    return times


def latency_summary(samples: list[float]) -> dict[str, float]:
    """Median, p90 and p10 in ms. On a shared machine other processes only ever add time, so
    the low end (p10) is the model's own speed and is what ratios between variants use."""
    ordered = sorted(samples)
    return {"median_ms": statistics.median(ordered) * 1000,
            "p90_ms": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))] * 1000,
            "p10_ms": ordered[int(0.1 * len(ordered))] * 1000,
            "min_ms": ordered[0] * 1000, "samples": len(ordered)}
