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

__all__ = ["Runner", "open_runner", "measure_latency"]


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


class OvRunner:
    engine = "openvino"

    def __init__(self, path: str, args: Mapping[str, Any], ctx: JobContext) -> None:
        import openvino as ov

        from studio.core.engines.openvino import NotOnnxModel, _onnx_output_names, _precision_name

        frontend = _onnx_frontend()
        if not frontend.supported(str(path)):
            raise NotOnnxModel(f"{Path(path).name} is not an ONNX model (OpenVINO's ONNX frontend does not "
                               "accept it)")
        started = time.perf_counter()
        model = frontend.convert(frontend.load(str(path)))
        config: dict[str, Any] = {}
        precision = args.get("precision") or "f32"
        if precision != "default":
            config["INFERENCE_PRECISION_HINT"] = precision
        config["PERFORMANCE_HINT"] = str(args.get("performance_hint") or "LATENCY")
        threads = args.get("intra_op_threads") or ctx.cpu_threads
        if threads:
            config["INFERENCE_NUM_THREADS"] = int(threads)
        device = str(args.get("device") or "CPU")
        self.compiled = ov.Core().compile_model(model, device, config)
        try:
            effective = _precision_name(self.compiled.get_property("INFERENCE_PRECISION_HINT"))
        except Exception:  # noqa: BLE001 - not every device reports it
            effective = None
        self.request = self.compiled.create_infer_request()
        self.inputs = [(i, set(p.get_names())) for i, p in enumerate(self.compiled.inputs)]
        self.input_names = [sorted(n)[0] if n else f"#{i}" for i, n in self.inputs]
        ports = list(self.compiled.outputs)
        by_name: dict[str, int] = {}
        for index, port in enumerate(ports):
            for n in port.get_names():
                by_name.setdefault(n, index)
        names = _onnx_output_names(str(path))
        if names is None or len(names) != len(ports):
            names = [sorted(p.get_names())[0] if p.get_names() else f"output_{i}" for i, p in enumerate(ports)]
        self.output_names = names
        self.port_of = {n: by_name.get(n, i) for i, n in enumerate(names)}
        self.details = {"engine_version": ov.get_version(), "device": device, "precision_requested": precision,
                        "precision_effective": effective,
                        "session_ms": round((time.perf_counter() - started) * 1000, 3)}

    def infer(self, feeds: Mapping[str, Any], names: list[str] | None = None) -> dict[str, Any]:
        inputs = {}
        for index, port_names in self.inputs:
            match = next((n for n in port_names if n in feeds), None)
            if match is None:
                raise KeyError(f"missing feed for model input {sorted(port_names)[:3] or index}")
            inputs[index] = feeds[match]
        self.request.infer(inputs)
        wanted = names or self.output_names
        unknown = [n for n in wanted if n not in self.port_of]
        if unknown:
            raise KeyError(f"unknown output name(s) {', '.join(map(repr, unknown[:5]))}")
        return {n: np.array(self.request.get_output_tensor(self.port_of[n]).data, copy=True) for n in wanted}

    def close(self) -> None:
        self.request = None
        self.compiled = None


def _onnx_frontend() -> Any:
    from openvino.frontend import FrontEndManager

    frontend = FrontEndManager().load_by_framework("onnx")
    if frontend is None:
        raise RuntimeError("OpenVINO's ONNX frontend is not available in this installation")
    return frontend


def open_runner(engine: str, path: str | Path, args: Mapping[str, Any], ctx: JobContext) -> Runner:
    """A runner for ``engine`` ("onnxruntime" | "openvino"); ``args`` is ``RunOptions.to_args()``
    (ORT also reads ``disabled_optimizers``)."""
    if engine == "onnxruntime":
        return OrtRunner(str(path), args, ctx)
    if engine == "openvino":
        return OvRunner(str(path), args, ctx)
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
