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

@job("ov.run")
def ov_run_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    ctx.set_stage("OpenVINO model read")
    import openvino as ov

    from studio.core.engines.sessions import OvRunner

    runner = OvRunner(str(args["model_path"]), args, ctx)
    wanted = args.get("output_names")
    missing = [n for n in wanted or () if n not in runner.output_names]
    if missing:
        raise KeyError(f"unknown output name(s) {', '.join(map(repr, missing[:5]))}")
    ctx.set_stage("OpenVINO inference")
    started = time.perf_counter()
    outputs = runner.infer(arrays, list(wanted) if wanted else None)
    first_ms = (time.perf_counter() - started) * 1000
    encoded, out_arrays = encode_outputs(list(outputs), list(outputs.values()))
    details = {**{k: v for k, v in runner.details.items() if k != "engine_version"},
               "first_inference_ms": round(first_ms, 3), "input_names": runner.input_names,
               "output_names": runner.output_names}
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
