"""MNN full INT8 (weights and activations): MNNConvert to an fp32 ``.mnn``, then MNN's offline
quantizer calibrated on real samples -- in a sandbox worker.

The quantizer is MNN's own (``quantized.out``; in Python the C extension ``_tools.mnnquant``).
Its "sequence" input type takes any number of inputs of any rank: one folder per sample,
holding ``<input name>.txt`` (whitespace-separated values) and ``input.json`` (the shapes).
The studio writes the calibration samples (a dataset's calibration part, or the given
calibration inputs) in that form. MNN 3.6.1's ``mnnquant`` console script passes its
arguments the way older extensions took them and aborts; the extension is called with an
argv list instead, and the manifest records the equivalent ``quantized.out`` command.

MNN opens ``<folder>/<input name>.txt``: an input name that is no plain file name (a ``/``,
``..``, a NUL) is refused rather than let it point outside the calibration folder.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.engines.base import package_version
from studio.core.engines.conversion import ConversionFailed
from studio.core.engines.mnn_samples import unpack_samples
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.engines.capture import captured_output, read_log
from studio.core.engines.mnn import convert_to_mnn

__all__ = ["FEATURE_METHODS", "MAX_CALIBRATION_SAMPLES", "mnn_quant_command", "mnn_quantize_job", "quantize_mnn"]

FEATURE_METHODS = ("KL", "ADMM", "EMA")
# MNN advises 100-1000 samples for KL; each is a text file (1.5 MB for a 224x224 image): 100 at most.
MAX_CALIBRATION_SAMPLES = 100
_DONE = "Quantize model done"


def mnn_quant_command(fp32_name: str, out_name: str, config_name: str) -> list[str]:
    """MNN's offline quantizer command line (C++ tool; the Python extension runs the same code)."""
    return ["quantized.out", fp32_name, out_name, config_name]


def _safe_file_name(name: str) -> bool:
    return bool(name) and len(name) <= 200 and name not in (".", "..") and not re.search(r"[/\\\x00]", name)


def _write_samples(samples: Sequence[Mapping[str, np.ndarray]], folder: Path) -> list[dict[str, Any]]:
    """One folder per sample in MNN's "sequence" format; the input shapes of the first sample."""
    for i, sample in enumerate(samples):
        d = folder / f"{i:06d}"
        d.mkdir(parents=True)  # scratch: the quantization worker's own job folder
        shapes = []
        for name, a in sample.items():
            a = np.asarray(a)
            fmt = "%d" if a.dtype.kind in "iub" else "%.9g"
            flat = a.reshape(1, -1) if a.ndim < 2 else a.reshape(-1, a.shape[-1])
            np.savetxt(d / f"{name}.txt", flat, fmt=fmt)  # scratch: the quantization worker's own job folder
            shapes.append({"name": name, "shape": [int(x) for x in a.shape]})
        (d / "input.json").write_text(json.dumps({"inputs": shapes}))  # scratch: the worker's own job folder
    return [{"name": n, "shape": [int(x) for x in np.shape(a)]} for n, a in samples[0].items()]


def quantize_mnn(onnx_path: str | Path, out_path: Path, samples: Sequence[Mapping[str, np.ndarray]],
                 work: Path, method: str = "KL") -> dict[str, Any]:
    """Convert ``onnx_path`` to fp32 MNN, then quantize it to ``out_path`` calibrated on
    ``samples`` (input name -> array, the model's own layout). Raises :class:`ConversionFailed`."""
    import _tools  # MNN's C extension


    if method not in FEATURE_METHODS:
        raise ValueError(f"MNN feature quantization method must be one of {', '.join(FEATURE_METHODS)}")
    if not samples:
        raise ConversionFailed("MNN int8 needs calibration samples", {"ok": False})
    bad = [n for n in samples[0] if not _safe_file_name(n)]
    if bad:
        raise ConversionFailed(f"MNN's quantizer reads each input from a file named after it, and input "
                               f"{bad[0][:60]!r} is no plain file name: rename the input to quantize for MNN",
                               {"ok": False, "error": "input name is no file name"})
    samples = list(samples)[:MAX_CALIBRATION_SAMPLES]
    fp32 = work / "model_fp32.mnn"
    conv = convert_to_mnn(onnx_path, fp32, "f32")
    calib = work / "calibration"
    inputs = _write_samples(samples, calib)
    config = work / "calibration.json"
    cfg = {"input_type": "sequence", "path": str(calib), "used_sample_num": len(samples),
           "feature_quantize_method": method, "weight_quantize_method": "MAX_ABS", "inputs": inputs}
    config.write_text(json.dumps(cfg))  # scratch: the quantization worker's own job folder
    out_path = Path(out_path)
    out_path.unlink(missing_ok=True)  # scratch: the quantization worker's own job folder
    log_path = work / "quant.log"
    started = time.perf_counter()
    with captured_output(log_path):
        _tools.mnnquant(["quantized.out", str(fp32), str(out_path), str(config)])
    seconds = time.perf_counter() - started
    log = read_log(log_path)
    convert_cmd = conv["command"]
    info = {"ok": False, "seconds": round(conv["seconds"] + seconds, 4), "quantize_seconds": round(seconds, 4),
            "command": [*convert_cmd[:convert_cmd.index("--MNNModel") + 1], fp32.name,
                        *convert_cmd[convert_cmd.index("--MNNModel") + 2:], "&&",
                        *mnn_quant_command(fp32.name, out_path.name, config.name)],
            "converter_version": package_version("MNN", "mnn"), "log": log[-4000:], "unsupported_ops": [],
            "calibration": {"samples": len(samples), "method": method, "config": {**cfg, "path": "calibration/"}}}
    if _DONE not in log or not out_path.is_file() or out_path.stat().st_size == 0:
        out_path.unlink(missing_ok=True)  # scratch: the quantization worker's own job folder
        errs = [ln.strip() for ln in log.splitlines() if re.search(r"error|fail|not support", ln, re.I)]
        info["error"] = "MNN's quantizer wrote no model" + (f": {errs[-1][:200]}" if errs else "")
        raise ConversionFailed(info["error"], info)
    info["ok"] = True
    return info


@job("mnn.quantize")
def mnn_quantize_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    ctx.set_stage("MNN int8 quantization")
    out = Path(ctx.out_dir) / Path(str(args["out_name"])).name
    try:
        data = quantize_mnn(str(args["model_path"]), out, unpack_samples(arrays), Path(ctx.scratch),
                            str(args.get("method") or "KL"))
    except ConversionFailed as exc:
        data = {"ok": False, "command": [], "seconds": 0.0, **exc.info, "error": str(exc)}
    return JobOutput(data=data)

