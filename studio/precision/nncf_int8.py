"""INT8 for OpenVINO the OpenVINO way: NNCF post-training quantization.

``nncf.quantize`` calibrates an OpenVINO model on the dataset's calibration part;
``nncf.quantize_with_accuracy_control`` additionally keeps the layers that cost
the most task metric in float until the drop is within ``max_drop``, judged by
the studio's own task metric against the golden outputs (the validation function
below). NNCF and OpenVINO are native code working on the user's model: both run
in a sandbox worker, and NNCF's telemetry is switched off there (NNCF_CI).
The result is an OpenVINO IR (xml + bin) in the job's output folder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from studio.core import outputs
from studio.core.errors import StudioError, WorkerError
from studio.core.feeds import Feeds, save_npz
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, default_limits, run_job

MODES = ("basic", "accuracy-control")


@dataclass(frozen=True)
class NNCFResult:
    """An NNCF-quantized OpenVINO IR and what NNCF reported."""

    mode: str
    ir_path: Path
    seconds: float
    metric: str | None
    fp32_metric: float | None
    int8_metric: float | None
    nncf_version: str
    openvino_version: str
    notes: tuple[str, ...] = ()


def _read_sets(path: str) -> list[dict[str, np.ndarray]]:
    sets: dict[int, dict[str, np.ndarray]] = {}
    with np.load(path, allow_pickle=False) as data:
        for key in data.files:
            name, _, idx = key.rpartition("/")
            sets.setdefault(int(idx), {})[name] = data[key]
    return [sets[i] for i in sorted(sets)]


@job("precision.nncf")
def nncf_job(args: dict, arrays: dict, ctx: JobContext) -> JobOutput:
    os.environ["NNCF_CI"] = "1"            # no telemetry from a worker
    import nncf
    import openvino as ov

    from studio.data.metrics import METRICS

    core = ov.Core()
    ctx.set_stage("OpenVINO read for NNCF")
    model = core.read_model(args["model_path"])
    calib = _read_sets(args["calibration"])
    started = time.perf_counter()
    calibration = nncf.Dataset(calib)
    subset = min(len(calib), 300)
    out = {"nncf_version": nncf.__version__, "openvino_version": ov.get_version()}
    if args["mode"] == "basic":
        ctx.set_stage("NNCF quantize")
        quantized = nncf.quantize(model, calibration, subset_size=subset)
    else:
        evaluation = _read_sets(args["evaluation"])
        golden = _read_sets(args["golden"])
        metric = METRICS[args["metric"]]
        output = args["output"]

        def validate(compiled, data) -> tuple[float, list[float]]:
            got = []
            for feeds in data:
                res = compiled(feeds)
                by_name = {next(iter(k.get_names()), None): v for k, v in res.items()}
                got.append(np.asarray(by_name.get(output, next(iter(res.values())))))
            gold = [g[output] for g in golden[:len(got)]]
            r = metric.score(output, gold, got)
            value = r.value if metric.higher_is_better else -r.value
            per = list(r.per_sample) if len(r.per_sample) == len(got) else None
            if per is not None and not metric.higher_is_better:
                per = [-v for v in per]
            return float(value), per

        ctx.set_stage("NNCF quantize with accuracy control")
        quantized = nncf.quantize_with_accuracy_control(
            model, calibration, nncf.Dataset(evaluation), validate, max_drop=float(args["max_drop"]),
            drop_type=nncf.DropType.ABSOLUTE, subset_size=subset)
        out["fp32_metric"], _ = validate(core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}),
                                         evaluation)
        out["int8_metric"], _ = validate(core.compile_model(quantized, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}),
                                         evaluation)
    out["seconds"] = time.perf_counter() - started
    xml = ctx.out_dir / "model_int8.xml"
    ov.save_model(quantized, str(xml), compress_to_fp16=False)  # scratch: the worker's job folder
    out["ir"] = xml.name
    return JobOutput(data=out)


def quantize_openvino(model_path: Path, calibration: Sequence[Feeds], out_dir: Path, *, mode: str = "basic",
                      evaluation: Sequence[Feeds] | None = None, golden: Sequence[dict[str, np.ndarray]] | None = None,
                      metric: str | None = None, output: str | None = None, max_drop: float = 0.01,
                      limits: Limits | None = None, pool_key: str = "default") -> NNCFResult:
    """Quantize ``model_path`` with NNCF for OpenVINO; the IR lands in ``out_dir``."""
    if mode not in MODES:
        raise StudioError(f"NNCF mode must be one of {', '.join(MODES)}", code="BAD-OPTION")
    if not calibration:
        raise StudioError("NNCF needs calibration samples", code="BAD-INPUT")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="studio-nncf-"))
    args: dict = {"model_path": str(model_path), "mode": mode, "max_drop": max_drop,
                  "calibration": str(save_npz(list(calibration), work / "calibration.npz"))}
    if mode == "accuracy-control":
        if not evaluation or not golden or not metric or not output:
            raise StudioError("accuracy control needs evaluation samples, golden outputs and a metric",
                              code="BAD-INPUT")
        args.update(evaluation=str(save_npz(list(evaluation), work / "evaluation.npz")),
                    golden=str(save_npz([{output: g[output]} for g in golden], work / "golden.npz")),
                    metric=metric, output=output)
    base = limits or default_limits()
    limits = Limits(timeout_s=max(base.timeout_s, 600.0), memory_bytes=base.memory_bytes,
                    cpu_threads=base.cpu_threads, address_space_limit=base.address_space_limit)
    try:
        res = run_job("precision.nncf", args, stage=f"NNCF INT8 ({mode})", limits=limits, out_dir=work / "out",
                      pool_key=pool_key, fresh=True)
        xml = work / "out" / res.data["ir"]
        for f in (xml, xml.with_suffix(".bin")):
            outputs.copy_file(f, out_dir / f.name)
    except WorkerError as exc:
        raise StudioError(f"NNCF quantization failed: {exc}", code="NNCF-FAILED") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)  # scratch: our temp folder
    d = res.data
    return NNCFResult(mode, out_dir / d["ir"], float(d["seconds"]), metric, d.get("fp32_metric"),
                      d.get("int8_metric"), d["nncf_version"], d["openvino_version"])
