"""Comparing two models on the same inputs, precision variants, and the inputs a user gives.

A room of the facade (``studio.api`` names it; docs/architecture.md section 1)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from diagnostics.input_search import search_runs
from studio.accuracy.compare_models import compare_models
from studio.core.engines import resolve_engine_name, RunOptions
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.feeds import FeedSet
from studio.core.model import load as _load, ModelHandle
from studio.data.datasets import dataset_feeds
from studio.facade.data import checked_target, evaluate_on_dataset
from studio.facade.inspect import make_inputs, path_of
from studio.core.requests import CompareRequest, PrecisionRequest
from studio.precision.run import request_of, run_request
from studio.precision.catalog import VARIANTS as PRECISION_VARIANTS
from studio.precision.catalog import default_variants as default_precision_variants


__all__ = [
    "compare", "precision", "PRECISION_VARIANTS", "default_precision_variants",
]


def compare(a: ModelHandle | str | Path, b: ModelHandle | str | Path, request: CompareRequest | None = None, *,
            engine: str = "ort",
            engine_b: str | None = None, feeds=None, inputs: str | Path | None = None,
            images: str | Path | None = None, count: int = 2, dims: Mapping[str, int] | None = None,
            ov_precision: str = "f32", ov_precision_b: str | None = None, tolerance=None, layerwise: bool = False,
            layer_threshold: float | None = None, labels: tuple[str, str] | None = None,
            pool_key: str = "default", on_tick=None, dataset=None, dataset_part: str = "evaluation",
            limit: int | None = None, target: str | None = None, tasks: Mapping[str, str] | None = None,
            files: Mapping[str, str | Path | None] | None = None):
    """Compare model ``a`` on ``engine`` with model ``b`` on ``engine_b`` (default: the same) on the
    same inputs: shapes first, then max abs/rel, L2, cosine, top-1/top-5 agreement per output
    (a ``ModelComparison``, truthy when everything matches). ``layerwise`` adds the first
    diverging layer and per-layer errors (``result.layerwise.node_errors()``). ``dataset``: run on its
    ``dataset_part`` samples and add task metrics of B against A's golden outputs (``result.extra["task"]``),
    judged by ``target`` when given (refused before any run when it applies to no output). Every output
    is compared by its task (``tasks``: {output: kind} chosen by the user, see :func:`output_tasks`).

    ``request``: a ``CompareRequest`` (``studio.core.requests``: what the CLI and the Compare page build), in
    place of the keywords it holds; the call keeps what is this process's: ``feeds`` already made, the
    opened ``dataset`` the request names, ``labels``, ``pool_key``, ``on_tick``, and ``files`` (where the
    request's ``inputs``/``images`` are on this machine: a page's uploads)."""
    if request is not None:
        r, located = request, files or {}
        if r.dataset and dataset is None:
            raise StudioError(f"the request compares on dataset '{r.dataset[:60]}': open it from its project and "
                              "pass dataset=", code=ErrorCode.BAD_REQUEST)
        return compare(a, b, engine=r.engine, engine_b=r.engine_b, feeds=feeds,
                       inputs=located.get("inputs") or r.inputs, images=located.get("images") or r.images,
                       count=r.count, dims=dict(r.dims), ov_precision=r.ov_precision, ov_precision_b=r.ov_precision_b,
                       tolerance=tolerance, layerwise=r.layerwise, layer_threshold=r.layer_threshold, labels=labels,
                       pool_key=pool_key, on_tick=on_tick, dataset=dataset, dataset_part=dataset_part, limit=limit,
                       target=r.goal, tasks=dict(r.tasks))
    pa, pb = path_of(a), path_of(b)
    if target and dataset is None:
        raise StudioError("a task-metric target is judged on a dataset: give dataset=", code=ErrorCode.BAD_OPTION)
    checked_target(target, a if isinstance(a, ModelHandle) else pa, tasks, dataset)
    if dataset is not None and feeds is None:

        header = a.proto if isinstance(a, ModelHandle) else _load(pa).proto
        sets = dataset_feeds(dataset, header, part=dataset_part, limit=limit or 64, dims=dims)
        feeds = FeedSet(tuple(sets), f"dataset {dataset.name[:40]}: {len(sets)} {dataset_part} sample(s)")
    if feeds is None and (inputs or images):
        feeds = make_inputs(a if isinstance(a, ModelHandle) else _load(pa), inputs=inputs, images=images,
                            count=count, dims=dims)
    labels = labels or ((a.name if isinstance(a, ModelHandle) else pa.name),
                        (b.name if isinstance(b, ModelHandle) else pb.name))
    result = compare_models(pa, pb, engine=engine, engine_b=engine_b, feeds=feeds,
                          options=RunOptions(precision=ov_precision),
                          options_b=RunOptions(precision=ov_precision_b or ov_precision), tolerance=tolerance,
                          labels=labels, dims=dims, count=count, pool_key=pool_key, on_tick=on_tick,
                          layerwise=layerwise,
                          layerwise_options={"layer_threshold": layer_threshold} if layer_threshold else None,
                          tasks=tasks, search_inputs=_searched_inputs)
    if dataset is None:
        return result

    task = evaluate_on_dataset(dataset, pa, pb, engine=resolve_engine_name(engine_b or engine), target=target,
                               part=dataset_part, limit=limit or 64, pool_key=pool_key, tasks=tasks)
    return dataclasses.replace(result, extra={**dict(result.extra), "task": task.to_dict()})


def _searched_inputs(model, first_error: str, run, dims: Mapping[str, int]):
    """The input search of check, optimize and export (diagnostics.input_search) for compare: (feeds, text)."""
    found = search_runs(model, run, first_error, dims=dims)
    return None if found is None else (found.feeds, found.text)


def precision(handle: ModelHandle | str | Path, request: PrecisionRequest | None = None, *, variants=None,
              calibration: str | Path | None = None, inputs: str | Path | None = None, samples: int = 8,
              target_cosine: float = 0.99, out_dir: str | Path | None = None,
              dims: Mapping[str, int] | None = None, preprocess=None,
              latency_budget_s: float = 60.0, pool_key: str = "default", on_progress=None, on_tick=None,
              calibration_method: str = "minmax", dataset=None, target: str | None = None,
              tasks: Mapping[str, str] | None = None, weight_options: Mapping[str, Any] | None = None,
              generation_steps: int = 8, files: Mapping[str, Path] | None = None):
    """Build fp16/bf16/INT8 variants, compare each with fp32 and time them side by side; the
    ``PrecisionReport`` recommends the fastest variant meeting ``target_cosine`` that is faster
    than fp32 (fp32 itself when none is). ``calibration_method``: minmax, entropy or percentile.
    With calibration data and no ``inputs``, accuracy is judged on samples held out from it.
    ``dataset`` (see :func:`dataset`): calibrate on its calibration part, judge on its evaluation part
    against stored golden outputs by task metrics; ``target`` (``top1-agreement>=0.99``,
    ``map-drop<=0.01``...) is then what a variant must meet; one that applies to no output (with
    ``tasks``: {output: kind}, see :func:`output_tasks`) is refused before any work. Without real data
    the report says it is a random-input estimate, not a recommendation. Weight-only variants (int4,
    int8-weights, int4-ov, int8-weights-ov) take ``weight_options`` (block_size, symmetric,
    accuracy_level, ratio); a KV-cache decoder is judged over ``generation_steps`` greedy tokens
    (next-token agreement and KL with fp32; a text ``dataset`` gives the prompts). ``request`` (what the
    CLI, the page, batch and remote targets build) stands for every option keyword, which are then unused;
    ``files``: where its calibration/inputs are here when they came beside it. ``report.request`` is what ran."""
    if request is None:
        request = request_of(variants=variants, calibration=calibration, inputs=inputs, samples=samples,
                             target_cosine=target_cosine, dims=dims, preprocess=preprocess,
                             latency_budget_s=latency_budget_s, calibration_method=calibration_method,
                             dataset=dataset, target=target, tasks=tasks, weight_options=weight_options,
                             generation_steps=generation_steps)
    return run_request(path_of(handle), request, dataset=dataset, out_dir=out_dir, pool_key=pool_key,
                       on_progress=on_progress, on_tick=on_tick, files=files)

