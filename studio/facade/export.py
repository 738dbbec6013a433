"""Deployment bundles: artifacts per engine, verified, with dataset parity when asked.

A room of the facade (``studio.api`` names it; docs/architecture.md section 1)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from studio.core import outputs
from studio.core.engines import RunOptions
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.model import ModelHandle
from studio.core.paths import user_data_path
from studio.core.requests import ExportRequest
from studio.data.evaluate import evaluate, golden_outputs
from studio.data.metrics import parse_target
from studio.export.bundle import write_zip
from studio.export.exporter import export_model
from studio.export.options import (
    CALIBRATION_METHODS,
    ExportOptions,
    MOBILE_TARGETS,
    ORT_LEVELS,
    OV_PRECISIONS,
    parse_shape_spec,
    TARGETS as EXPORT_TARGETS,
)
from studio.export.views import (
    artifact_rows as export_artifact_rows,
    bench_rows as export_bench_rows,
    target_rows as export_target_rows,
)
from studio.facade.data import checked_target

if TYPE_CHECKING:
    from studio.export.results import ExportResult

__all__ = [
    "export", "EXPORT_TARGETS", "MOBILE_TARGETS", "OV_PRECISIONS", "CALIBRATION_METHODS", "ORT_LEVELS",
    "parse_shape_spec", "export_target_rows", "export_artifact_rows", "export_bench_rows",
]


def export(handle: ModelHandle, targets: ExportRequest | str | Sequence[str], out_dir: str | Path, *,
           preset: str | None = None,
           precision: str = "fp32", calibration: str | Path | None = None, calibration_method: str = "minmax",
           shapes: Mapping[str, object] | Sequence[str] | None = None, name: str | None = None,
           ort_level: str = "extended", ort_format: bool = True, max_batch: int = 8,
           plugins: Sequence[str | Path] = (), zip: bool = True, pool_key: str = "default",
           on_tick: Callable[[float], None] | None = None,
           on_progress: Callable[[str, str], None] | None = None,
           ov_precisions: str | Sequence[str] | None = None, ort_custom_ops: Sequence[str | Path] = (),
           ov_extensions: Sequence[str | Path] = (), dataset=None, target: str | None = None,
           tasks: Mapping[str, str] | None = None, dims: Mapping[str, int] | None = None) -> ExportResult:
    """Deployment artifacts for ``targets`` (ort, openvino, tensorrt, triton or all) in
    ``out_dir/<model>-<sha8>/`` (+ ``.zip``): each reloaded by its engine and compared with
    the original, with manifest.json and report.md/.html. ``shapes``: NAME=MIN:OPT:MAX
    specs (or a mapping). ``ov_precisions``: the OpenVINO IRs to write ("fp32", "fp16" or both; default
    from ``precision``). ``ort_custom_ops`` / ``ov_extensions``: custom-op libraries loaded wherever the
    artifact is converted and verified, and shipped in the bundle. ``result.ok`` is False when a verification failed; TensorRT
    without a GPU is "not verified" (not a failure). The model file is only read. ``tasks``: {output: kind}
    (see :func:`output_tasks`): how every artifact's outputs are compared; a dataset ``target`` that applies
    to no output is refused before any work. ``dims``: the model's dims setting (verification inputs and
    the TensorRT profile's opt at those sizes; ``shapes`` win where both name an input). ``targets`` may be an
    ``ExportRequest`` (``studio.core.requests``: what the CLI, the Export page and batch build), which brings
    its own options and is kept in the manifest (``request``); ``dataset`` is then the project dataset it
    names, opened by the caller."""
    request = targets if isinstance(targets, ExportRequest) else None
    if request is not None:
        r = request
        if r.dataset is not None and (dataset is None or getattr(dataset, "name", None) != r.dataset):
            raise StudioError(f"the export names the dataset '{r.dataset[:60]}': open it from its project and "
                              "pass it (dataset=)", code=ErrorCode.BAD_OPTION)
        targets, preset, precision, calibration, calibration_method = (r.targets, r.preset, r.precision,
                                                                       r.calibration, r.calibration_method)
        shapes, dims, ort_level, ort_format, name = list(r.shapes) or None, dict(r.dims), r.ort_level, r.ort_format, r.name
        max_batch, plugins, ort_custom_ops, ov_extensions = r.max_batch, r.plugins, r.ort_custom_ops, r.ov_extensions
        zip, ov_precisions, target, tasks = r.zip, r.ov_precisions, r.goal, dict(r.tasks) or None
    options = ExportOptions(targets=(targets,) if isinstance(targets, str) else tuple(targets), preset=preset,
                            precision=precision, request=request.to_dict() if request is not None else None,
                            calibration=user_data_path(calibration, label="calibration data") if calibration else None,
                            calibration_method=calibration_method, shapes=shapes or {}, dims=dict(dims or {}),
                            name=name,
                            ort_level=ort_level, ort_format=ort_format, max_batch=max_batch,
                            plugins=tuple(Path(p) for p in plugins), zip=zip, ov_precisions=ov_precisions,
                            ort_custom_ops=tuple(Path(p) for p in ort_custom_ops),
                            ov_extensions=tuple(Path(p) for p in ov_extensions))
    if target and dataset is None:
        raise StudioError("a task-metric target is judged on a dataset: give dataset= (--dataset NAME)",
                          code=ErrorCode.BAD_OPTION)
    checked_target(target, handle, tasks, dataset)
    result = export_model(handle, options, out_dir, pool_key=pool_key, on_tick=on_tick, on_progress=on_progress,
                          tasks=tasks)
    if dataset is None:
        return result
    return _dataset_parity(result, handle, dataset, target, pool_key, tasks)


def _dataset_parity(result: ExportResult, handle: ModelHandle, ds, target: str | None,
                    pool_key: str, tasks: Mapping[str, str] | None = None) -> ExportResult:
    """Task metrics of every ONNX / OpenVINO IR artifact against the original's golden outputs on the
    dataset, kept in the bundle (``parity.json``, and ``dataset_parity`` in manifest.json)."""
    golden = golden_outputs(ds, handle.path, limit=64, pool_key=pool_key, tasks=tasks)
    goal = parse_target(target) if target else None
    rows = []
    for t in result.targets:
        for art in t.artifacts:
            path = result.bundle / art.path
            engine = {"onnx": "onnxruntime", "openvino-ir": "openvino"}.get(art.kind)
            if engine is None or not path.is_file():
                continue
            report = evaluate(ds, golden, path, engine=engine, target=goal, candidate=art.path, pool_key=pool_key,
                              inputs_model=handle.path,
                              options=RunOptions(openvino_ir=art.kind == "openvino-ir"))
            rows.append({"artifact": art.path, "target": t.target, **report.to_dict()})
    parity = {"dataset": ds.name, "reference": golden.reference, "samples": len(golden.outputs),
              "task_target": target, "artifacts": rows,
              "all_met": all(r["target_met"] for r in rows) if goal is not None else None}
    outputs.write_json(result.bundle / "parity.json", parity)
    manifest = {**result.manifest, "dataset_parity": {k: parity[k] for k in ("dataset", "samples", "task_target",
                                                                              "all_met")}}
    outputs.write_json(result.bundle / "manifest.json", manifest)
    if result.zip_path is not None:

        write_zip(result.bundle, result.zip_path)       # the zip carries the parity report too
    return dataclasses.replace(result, manifest=manifest)

