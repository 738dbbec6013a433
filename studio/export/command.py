"""The ``onnx-studio export`` command line equivalent to a UI export (shown on the page)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from studio.export.options import ShapeRange


def cli_command(model_name: str, targets: Sequence[str], output: str = "artifacts", *, preset: str | None = None,
                precision: str = "fp32", calibration: str | None = None,
                shapes: Mapping[str, ShapeRange] | None = None, ort_level: str = "extended",
                name: str | None = None, max_batch: int = 8, ov_precisions: Sequence[str] | None = None,
                ort_custom_ops: Sequence[str] = (), ov_extensions: Sequence[str] = (), calibration_method: str = "minmax",
                dims: Mapping[str, int] | None = None) -> str:
    parts = ["onnx-studio", "export", shlex.quote(model_name)]
    wanted = list(targets)
    parts += ["--target", "all" if len(wanted) == 4 else ",".join(_short(t) for t in wanted)]
    parts += ["-o", shlex.quote(output)]
    if preset:
        parts += ["--preset", shlex.quote(preset)]
    if precision != "fp32":
        parts += ["--precision", precision]
    if ov_precisions:
        parts += ["--ov-precisions", ",".join(ov_precisions)]
    if calibration:
        parts += ["--calibration", shlex.quote(calibration)]
    for lib in ort_custom_ops:
        parts += ["--ort-custom-ops", shlex.quote(lib)]
    for lib in ov_extensions:
        parts += ["--ov-extension", shlex.quote(lib)]
    if precision == "int8" and calibration_method != "minmax":
        parts += ["--calibration-method", calibration_method]
    for input_name, rng in (shapes or {}).items():
        spec = "x".join(map(str, rng.opt)) if rng.static else rng.text()
        parts += ["--shapes", shlex.quote(f"{input_name}={spec}")]
    for dim, value in (dims or {}).items():
        parts += ["--dim", shlex.quote(f"{dim}={value}")]
    if ort_level != "extended":
        parts += ["--ort-level", ort_level]
    if name:
        parts += ["--name", shlex.quote(name)]
    if max_batch != 8:
        parts += ["--max-batch", str(max_batch)]
    return " ".join(parts)


def _short(target: str) -> str:
    return {"onnxruntime": "ort"}.get(target, target)
