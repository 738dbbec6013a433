"""Running a ``PrecisionRequest``, and what a kept variant records of it (issue 34, item 2).

Why here: the CLI, the Precision page, batch stages and remote targets all build one
:class:`~studio.core.requests.PrecisionRequest`; this is the one place it becomes the keywords of
:func:`~studio.precision.variants.evaluate_variants`, on whichever machine runs it, so no door can drop an
option. The report carries the request it ran (``PrecisionReport.request``), and a variant kept as a
version stores ``PrecisionReport.provenance``: that request and the variant's measured result, whoever keeps it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.feeds import ImagePreprocess
from studio.core.paths import user_data_path
from studio.core.requests import PrecisionRequest
from studio.data.metrics import parse_target
from studio.precision.report import PrecisionReport
from studio.precision.variants import evaluate_variants

__all__ = ["request_of", "run_request"]

DATA_FILES = ("calibration", "inputs")      # the request's fields that name files (they travel with it)


def request_of(*, variants=None, calibration: str | Path | None = None, inputs: str | Path | None = None,
               samples: int = 8, target_cosine: float = 0.99, dims: Mapping[str, int] | None = None,
               preprocess: ImagePreprocess | None = None, latency_budget_s: float = 60.0,
               calibration_method: str = "minmax", dataset=None, target: str | None = None,
               tasks: Mapping[str, str] | None = None, weight_options: Mapping[str, Any] | None = None,
               generation_steps: int = 8) -> PrecisionRequest:
    """The request ``api.precision``'s keywords describe (``target`` is the task-metric goal)."""
    weights = dict(weight_options or {})
    unknown = sorted(set(weights) - {"block_size", "symmetric", "accuracy_level", "ratio"})
    if unknown:
        raise StudioError(f"unknown weight-only option(s) {', '.join(unknown)[:60]}; known: block_size, symmetric, "
                          f"accuracy_level, ratio", code=ErrorCode.BAD_OPTION)
    return PrecisionRequest(variants=None if variants is None else tuple(variants), calibration=calibration,
                            calibration_method=calibration_method, samples=samples, inputs=inputs,
                            target_cosine=target_cosine, goal=target, dataset=dataset.name if dataset else None,
                            tasks=tasks or {}, dims=dims or {},
                            preprocess=preprocess.to_dict() if preprocess is not None else {},
                            latency_budget_s=latency_budget_s, generation_steps=generation_steps, **weights)


def run_request(model_path: Path, request: PrecisionRequest, *, dataset=None, out_dir: str | Path | None = None,
                pool_key: str = "default", on_progress: Callable[[int, int, str], None] | None = None,
                on_tick: Callable[[float], None] | None = None,
                files: Mapping[str, Path] | None = None) -> PrecisionReport:
    """Run ``request`` on ``model_path`` here. ``dataset``: the project dataset the request names, opened by
    the caller (a request naming one is refused without it: it is judged where its project is);
    ``files``: where the request's calibration/inputs are on this machine when they arrived beside it
    (a remote target), else its own paths are read."""
    if request.dataset is not None and (dataset is None or dataset.name != request.dataset):
        raise StudioError(f"dataset '{request.dataset[:60]}' is judged where its project is: run it there "
                          "(--project NAME, no remote --target)", code=ErrorCode.BAD_OPTION)
    if dataset is not None and request.dataset is None:
        raise StudioError("a dataset was given that the request does not name", code=ErrorCode.BAD_OPTION)
    here = dict(files or {})
    paths = {}
    for name in DATA_FILES:
        given = getattr(request, name)
        if name in here:
            paths[name] = Path(here[name])
        elif given is not None:
            paths[name] = user_data_path(given, label="calibration data" if name == "calibration" else "inputs file")
        else:
            paths[name] = None
    preprocess = ImagePreprocess(**{k: tuple(v) if isinstance(v, (list, tuple)) else v
                                    for k, v in request.preprocess}) if request.preprocess else None
    report = evaluate_variants(Path(model_path), variants=list(request.variants) if request.variants else None,
                               out_dir=Path(out_dir) if out_dir else None, calibration=paths["calibration"],
                               inputs=paths["inputs"], samples=request.samples, preprocess=preprocess,
                               dims=dict(request.dims) or None, target_cosine=request.target_cosine,
                               latency_budget_s=request.latency_budget_s, pool_key=pool_key,
                               on_progress=on_progress, on_tick=on_tick,
                               calibration_method=request.calibration_method, dataset=dataset,
                               target=parse_target(request.goal) if request.goal else None,
                               tasks=dict(request.tasks) or None, weight_options=request.weight_options,
                               generation_steps=request.generation_steps)
    return dataclasses.replace(report, request=request)

