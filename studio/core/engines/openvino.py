"""OpenVINO adapter: read, compile and infer in a sandbox worker.

The model is read through OpenVINO's **ONNX frontend only**
(``FrontEndManager().load_by_framework("onnx")``): ``Core.read_model`` would let
any frontend claim the file (an IR ``.xml``, TFLite, Paddle... uploaded as
``.onnx``), so a file the ONNX frontend does not accept is refused as "not an
ONNX model". Compilation pins ``INFERENCE_PRECISION_HINT`` to ``f32`` unless
asked otherwise (on CPUs with bf16/AMX support OpenVINO would otherwise
silently compute in bf16); the effective precision is reported. Outputs are
mapped back to the ONNX graph's output names through OpenVINO's tensor names.

Known OpenVINO 2026.4 behaviour (measured): a ``Loop`` whose trip count comes
from an input is truncated to 32 bits, so 2^62 runs 0 iterations (silently
wrong) and 2^62-1 runs "forever" (stopped by the sandbox timeout).
"""

from __future__ import annotations

import time
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
)
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, run_job

__all__ = ["OpenVinoEngine", "ov_info_job", "ov_run_job"]


class OpenVinoEngine(WorkerEngine):
    name = "openvino"
    label = "OpenVINO"
    run_job_name = "ov.run"
    stage = "OpenVINO"

    def _probe(self) -> Availability:
        return _probe()

    def _prepare(self, options: RunOptions, limits: Limits | None,
                 out_dir: Path | None) -> tuple[Limits | None, bool]:
        return limits, False

    def probe(self, *, limits: Limits | None = None, pool_key: str = "default") -> dict[str, Any]:
        """Version and devices (``Core().available_devices``), asked of a worker."""
        require_available(self)
        return run_job("ov.info", {}, stage="OpenVINO probe", limits=limits, pool_key=pool_key).data


def _probe() -> Availability:
    if not module_present("openvino"):
        return Availability(False, None, "OpenVINO is not installed (pip install openvino)")
    # Devices need the runtime itself (a worker job, see probe()); CPU is always there.
    return Availability(True, package_version("openvino", "openvino-nightly"), None, ("CPU",))


# ============================================================================ jobs (worker side)

class NotOnnxModel(ValueError):
    """OpenVINO's ONNX frontend does not accept the file."""


def _precision_name(value: Any) -> str:
    for attr in ("to_string", "get_type_name"):
        fn = getattr(value, attr, None)
        if callable(fn):
            try:
                return str(fn())
            except Exception:  # noqa: BLE001
                continue
    return str(value)


def _onnx_output_names(path: str) -> list[str] | None:
    try:
        import onnx

        model = onnx.load(path, load_external_data=False)
        return [o.name for o in model.graph.output]
    except Exception:  # noqa: BLE001 - fall back to OpenVINO's own order
        return None


@job("ov.run")
def ov_run_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    ctx.set_stage("OpenVINO model read")
    import openvino as ov
    from openvino.frontend import FrontEndManager

    path = str(args["model_path"])
    frontend = FrontEndManager().load_by_framework("onnx")
    if frontend is None:
        raise RuntimeError("OpenVINO's ONNX frontend is not available in this installation")
    if not frontend.supported(path):
        raise NotOnnxModel(f"{Path(path).name} is not an ONNX model (OpenVINO's ONNX frontend does not accept "
                           "it); other formats are not read")
    started = time.perf_counter()
    model = frontend.convert(frontend.load(path))
    read_ms = (time.perf_counter() - started) * 1000

    ctx.set_stage("OpenVINO compile")
    device = str(args.get("device") or "CPU")
    config: dict[str, Any] = {}
    precision = args.get("precision") or "f32"
    if precision != "default":
        config["INFERENCE_PRECISION_HINT"] = precision
    if args.get("performance_hint"):
        config["PERFORMANCE_HINT"] = str(args["performance_hint"])
    threads = args.get("intra_op_threads") or ctx.cpu_threads
    if threads:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    core = ov.Core()
    started = time.perf_counter()
    compiled = core.compile_model(model, device, config)
    compile_ms = (time.perf_counter() - started) * 1000
    try:
        effective = _precision_name(compiled.get_property("INFERENCE_PRECISION_HINT"))
    except Exception:  # noqa: BLE001 - not every device reports it
        effective = None

    inputs: dict[int, np.ndarray] = {}
    expected = []
    for index, port in enumerate(compiled.inputs):
        names = port.get_names()
        expected.append(sorted(names)[0] if names else f"#{index}")
        match = next((n for n in names if n in arrays), None)
        if match is None:
            raise KeyError(f"missing feed for model input {sorted(names)[:3] or index}")
        inputs[index] = arrays[match]

    ctx.set_stage("OpenVINO inference")
    request = compiled.create_infer_request()
    started = time.perf_counter()
    request.infer(inputs)
    first_ms = (time.perf_counter() - started) * 1000

    onnx_names = _onnx_output_names(path)
    ports = list(compiled.outputs)
    by_name: dict[str, int] = {}
    for index, port in enumerate(ports):
        for n in port.get_names():
            by_name.setdefault(n, index)
    if onnx_names is None or len(onnx_names) != len(ports):
        onnx_names = [sorted(p.get_names())[0] if p.get_names() else f"output_{i}" for i, p in enumerate(ports)]
    order = [by_name.get(n, i) for i, n in enumerate(onnx_names)]
    wanted = args.get("output_names")
    if wanted:
        missing = [n for n in wanted if n not in onnx_names]
        if missing:
            raise KeyError(f"unknown output name(s) {', '.join(map(repr, missing[:5]))}")
        pairs = [(n, order[onnx_names.index(n)]) for n in wanted]
    else:
        pairs = list(zip(onnx_names, order))
    values = [np.array(request.get_output_tensor(index).data, copy=True) for _, index in pairs]
    encoded, out_arrays = encode_outputs([n for n, _ in pairs], values)
    details = {
        "device": device,
        "precision_requested": precision,
        "precision_effective": effective,
        "read_ms": round(read_ms, 3),
        "compile_ms": round(compile_ms, 3),
        "session_ms": round(read_ms + compile_ms, 3),
        "first_inference_ms": round(first_ms, 3),
        "input_names": expected,
        "output_names": onnx_names,
    }
    return JobOutput(data={"version": ov.get_version(), "outputs": encoded, "details": details},
                     arrays=out_arrays)


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
