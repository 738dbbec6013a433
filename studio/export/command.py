"""The ``onnx-studio export`` command line equivalent to a UI export (shown on the page)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from studio.core import cli_hints
from studio.export.options import ShapeRange


def cli_command(model_name: str, targets: Sequence[str], output: str = "artifacts", *, preset: str | None = None,
                precision: str = "fp32", calibration: str | None = None,
                shapes: Mapping[str, ShapeRange] | None = None, ort_level: str = "extended",
                name: str | None = None, max_batch: int = 8, ov_precisions: Sequence[str] | None = None,
                ort_custom_ops: Sequence[str] = (), ov_extensions: Sequence[str] = (), calibration_method: str = "minmax",
                dims: Mapping[str, int] | None = None) -> str:
    """The ``onnx-studio export`` command the page runs (built by the one hint builder)."""
    wanted = list(targets)
    return cli_hints.cli_command("export", [model_name], [
        ("--target", "all" if len(wanted) == 4 else ",".join(_short(t) for t in wanted)), ("-o", output),
        ("--preset", preset or None), ("--precision", precision if precision != "fp32" else None),
        ("--ov-precisions", list(ov_precisions or ()) or None), ("--calibration", calibration or None),
        *(("--ort-custom-ops", lib) for lib in ort_custom_ops), *(("--ov-extension", lib) for lib in ov_extensions),
        ("--calibration-method", calibration_method
         if precision == "int8" and calibration_method != "minmax" else None),
        *(("--shapes", f"{n}={'x'.join(map(str, r.opt)) if r.static else r.text()}") for n, r in (shapes or {}).items()),
        ("--dim", dict(dims or {})), ("--ort-level", ort_level if ort_level != "extended" else None),
        ("--name", name or None), ("--max-batch", max_batch if max_batch != 8 else None)])


def _short(target: str) -> str:
    return {"onnxruntime": "ort"}.get(target, target)
