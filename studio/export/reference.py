"""The yardstick every artifact is measured against: seeded inputs at the
``opt`` shapes, the original model's outputs on ONNX Runtime CPU with graph
optimizations off (or the onnx reference evaluator when ORT cannot run the
original), and tolerances that follow the artifact's precision.

Criteria (stated in every verification record):

* fp32: the dtype defaults of ``studio.core.compare`` (float32: |a-b| <=
  max(1e-5, 1e-4*rms) + 1e-4*|b|);
* fp16 (OpenVINO FP16-compressed weights, TensorRT --fp16): rtol 1e-2,
  atol 1e-2*rms, at most 0.1 % of values outside, and cosine >= 0.999;
* int8 (QDQ models): cosine >= 0.98 per output (a few elements may move by a
  quantization step; the whole must keep its direction).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from onnx import ModelProto

from studio.core.compare import QUANTIZED, Tolerance, compare_outputs
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.feeds import (Feeds, choose_dims, concrete_shape, input_specs, random_feeds,
                               small_image_dims, unnamed_dim_key)
from studio.core.pictures import choose_picture
from studio.core.order_free import OrderFree, order_free_outputs
from studio.export.options import ShapeRange
from studio.export.results import FAILED, PASSED, Verification
from studio.inspect.decoder import recognize
from studio.inspect.decoder_feeds import decoder_steps
from studio.data.tasks import order_free_for, output_tasks
from studio.verification.verifier import Verifier
from diagnostics.input_search import search_runs
from studio.verification.verifier import run_sets
from studio.export.results import ERROR, NOT_VERIFIED

FP16_TOLERANCE = Tolerance(1e-2, 1e-3, 1e-2, min_cosine=0.999)


@dataclass(frozen=True)
class Criteria:
    tolerance: Tolerance | None      # None: dtype defaults
    quantized: bool
    text: str


def criteria_for(precision: str, *, quantized_model: bool = False) -> Criteria:
    if precision == "int8" or quantized_model:
        return Criteria(QUANTIZED, True, f"int8/QDQ: cosine >= {QUANTIZED.min_cosine} per output")
    if precision == "fp16":
        t = FP16_TOLERANCE
        return Criteria(t, False, f"fp16: rtol {t.rtol:g}, atol max({t.atol:g}, {t.atol_scale:g}*rms), "
                                  f"<= 0.1% of values outside, cosine >= {t.min_cosine}")
    return Criteria(None, False, "fp32: float32 rtol 1e-4, atol max(1e-5, 1e-4*rms); integers exact")


def feed_shapes(model: ModelProto, shapes: Mapping[str, ShapeRange],
                dims: Mapping[str, int] | None = None) -> dict[str, tuple[int, ...]]:
    """The concrete input shapes used for verification: a user's ``opt`` shape, else
    symbolic dims filled like everywhere else in the studio (batch 1, sequence 16...)."""
    specs = input_specs(model)
    unknown = sorted(set(shapes) - {s.name for s in specs})
    if unknown:
        raise StudioError(f"--shapes names unknown input(s): {', '.join(n[:40] for n in unknown[:5])}; inputs: "
                          f"{', '.join(s.name[:40] for s in specs[:10])}", code=ErrorCode.BAD_OPTION)
    # Symbolic dims named in a user's shape take its opt value everywhere they appear.
    chosen = dict(dims or {})
    for s in specs:
        rng = shapes.get(s.name)
        if rng is None or s.shape is None:
            continue
        if len(rng.opt) != len(s.shape):
            raise StudioError(f"--shapes {s.name[:40]}: rank {len(rng.opt)}, the input has rank {len(s.shape)}",
                              code=ErrorCode.BAD_OPTION)
        for axis, (d, lo, hi) in enumerate(zip(s.shape, rng.min, rng.max)):
            if isinstance(d, int) and not (lo == d == hi):
                raise StudioError(f"--shapes {s.name[:40]}: axis {axis} is fixed at {d} in the model",
                                  code=ErrorCode.BAD_OPTION)
        for d, v in zip(s.shape, rng.opt):
            if isinstance(d, str):
                chosen.setdefault(d, v)
    chosen = choose_dims(specs, chosen)
    out: dict[str, tuple[int, ...]] = {}
    for s in specs:
        if s.name in shapes:
            out[s.name] = shapes[s.name].opt
        elif s.shape is not None:
            out[s.name] = concrete_shape(s, chosen)
    return out


def small_image_shapes(model: ModelProto, shapes: Mapping[str, ShapeRange],
                       dims: Mapping[str, int] | None = None) -> dict[str, tuple[int, ...]] | None:
    """The verification shapes with every free image height/width at the small seeded size
    (text recognizers), or None when no image axis is free: the second try when the original
    cannot run at the first (as in the compatibility check)."""
    specs = tuple(s for s in input_specs(model) if s.name not in shapes)
    small = small_image_dims(specs, dict(dims or {}))
    return feed_shapes(model, shapes, {**dict(dims or {}), **small}) if small else None


def bound_shapes(model: ModelProto, shapes: Mapping[str, ShapeRange]) -> dict[str, list[tuple[int, int] | None]]:
    """Per-axis (min, max) bounds of every input that ``--shapes`` constrains, directly or
    through a symbolic dim it shares with a constrained input (``attention_mask`` follows
    ``input_ids``); ``None`` marks an axis left dynamic."""
    specs = input_specs(model)
    by_dim: dict[str, tuple[int, int]] = {}
    for s in specs:
        rng = shapes.get(s.name)
        if rng is not None and s.shape is not None:
            for d, lo, hi in zip(s.shape, rng.min, rng.max):
                if isinstance(d, str):
                    by_dim.setdefault(d, (lo, hi))
    out: dict[str, list[tuple[int, int] | None]] = {}
    for s in specs:
        if s.shape is None:
            continue
        if s.name in shapes:
            rng = shapes[s.name]
            out[s.name] = list(zip(rng.min, rng.max))
        elif any(isinstance(d, str) and d in by_dim for d in s.shape):
            out[s.name] = [(d, d) if isinstance(d, int) else by_dim.get(d) if isinstance(d, str) else None
                           for d in s.shape]
    return out


def decoder_feeds(model: ModelProto, shapes: Mapping[str, ShapeRange],
                  dims: Mapping[str, int] | None = None) -> Feeds | None:
    """A KV-cache decoder's decode step (past > 0, one new token, a mask of past + 1 ones, the next
    position; ``use_cache_branch`` True), the feeds every artifact is verified on, when the user gave no
    ``--shapes`` (else theirs rule); None for any other model. Seeded feeds drawn dim by dim would give
    a mask that is not past + new long, which engines refuse or crash on."""
    if shapes:
        return None

    try:
        spec = recognize(model)
        return decoder_steps(model, spec, dims=dims)[-1].feeds if spec is not None else None
    except StudioError:              # a cache that does not fit, sizes too large: the plain seeded feeds
        return None


def make_feeds(model: ModelProto, shapes_by_input: Mapping[str, tuple[int, ...]], seed: int = 0) -> Feeds:
    """Seeded random feeds with exactly these shapes (dtype ranges as in studio.core.feeds)."""
    specs = tuple(dataclasses.replace(s, shape=tuple(shapes_by_input[s.name])) if s.name in shapes_by_input else s
                  for s in input_specs(model))
    return random_feeds(specs, {}, seed=seed)


@dataclass(frozen=True)
class Reference:
    """The original's outputs on the feeds, and how they were computed."""

    feeds: Feeds
    outputs: dict | None
    label: str
    error: str | None = None
    engine_error: str | None = None    # ORT's own message for the first failed set (input search)
    order_free: Mapping[str, OrderFree] = dataclasses.field(default_factory=dict)   # TopK/NMS rows
    tasks: Mapping[str, object] = dataclasses.field(default_factory=dict)   # studio.data.tasks.OutputTask per output


def with_tasks(reference: Reference, model: ModelProto, tasks: Mapping[str, str] | None) -> Reference:
    """``reference`` judging every output by its task (``studio.data.tasks``; ``tasks``: the user's
    {output: kind}): detection rows in any order, the figures each task has."""
    decided = output_tasks(model, tasks)
    return dataclasses.replace(reference, order_free=order_free_for(model, decided), tasks=decided)


def reference_outputs(original: Path, feeds: Feeds, *, pool_key: str = "default") -> Reference:
    """The original on ORT CPU, optimizations off (evaluator fallback for custom ops),
    computed in a sandbox worker."""
    verifier = Verifier(original, feeds=[feeds], pool_key=pool_key)
    ref = verifier.reference()
    if ref is None or not ref.outputs:
        return Reference(feeds, None, verifier.reference_label, verifier.reference_error or "no reference outputs",
                         verifier.run_error)
    reference = Reference(feeds, ref.outputs[0], f"{verifier.reference_label}, seeded inputs",
                          order_free=order_free_outputs(verifier.original))
    return _on_a_picture(reference, verifier, pool_key)


def _on_a_picture(reference: Reference, verifier: Verifier, pool_key: str) -> Reference:
    """Where ORT's outputs are numerically zero on the seeded inputs (a text detector's mask on noise), or a sliver
    of what a picture gives (``pictures.LIFT_RATIO``), the artifacts are verified on the synthetic picture
    instead (studio.core.pictures, the rule of optimize, precision and check); the reference's label says which.
    Unchanged otherwise."""

    def run(sets: list[Feeds]) -> tuple:
        return run_sets(verifier.original_path, sets, full=False, limits=None, pool_key=pool_key,
                        stage="reference outputs (original on ORT, synthetic pictures)").outputs

    try:
        choice = choose_picture(reference.feeds, verifier.original, [reference.outputs], run)
    except StudioError:
        return reference
    if choice is None:
        return reference
    return dataclasses.replace(reference, feeds=choice.feeds, outputs=dict(choice.outputs),
                               label=f"{verifier.reference_label}, on {choice.label} (outputs "
                                     f"{choice.smallness('the seeded inputs')}: {choice.rms_text()})")


def searched_reference(original: Path, model: ModelProto, failed: Reference, shapes: Mapping[str, ShapeRange], *,
                       pool_key: str = "default") -> Reference | None:
    """The original could not run on the seeded inputs: the input search's sets
    (``diagnostics.input_search``; sizes of inputs the user gave with ``--shapes`` stay), the
    first it runs on as the reference; None when none runs or the failure is not the inputs'."""
    fixed: dict[str, int] = {}
    for s in input_specs(model):
        rng = shapes.get(s.name)
        for axis, d in enumerate(s.shape or ()) if rng is not None else ():
            if not isinstance(d, int):
                fixed[d if isinstance(d, str) else unnamed_dim_key(s.name, axis)] = int(rng.opt[axis])

    def run(sets: list[Feeds]) -> tuple:
        return run_sets(original, sets, full=False, limits=None, pool_key=pool_key,
                        stage="reference outputs (original on ORT, searched inputs)").outputs

    try:
        found = search_runs(model, run, failed.engine_error, dims=fixed)
    except StudioError:
        return None
    if found is None:
        return None
    return Reference(found.feeds, found.outputs, f"{failed.label}, searched inputs ({found.text})",
                     order_free=order_free_outputs(model))


def verify_outputs(reference: Reference, got: Mapping[str, object] | None, criteria: Criteria, *,
                   engine: str, error: str | None = None, checker: str | None = None) -> Verification:
    """Compare an artifact's outputs with the reference and say so in one line."""
    if error is not None:
        return Verification(ERROR, error, engine, criteria.text, None, checker)
    if reference.outputs is None:
        return Verification(NOT_VERIFIED, f"outputs not compared: {reference.error}", engine, criteria.text, None,
                            checker, reason=str(reference.error))
    comparison = compare_outputs(reference.outputs, dict(got or {}), criteria.tolerance, quantized=criteria.quantized,
                                 order_free=reference.order_free, tasks=reference.tasks)
    status = PASSED if comparison else FAILED
    message = comparison.summary()
    if checker not in (None, "passed"):
        status, message = FAILED, f"onnx.checker full check fails: {checker}"
    return Verification(status, message, engine, criteria.text, comparison, checker)


def shapes_of(feeds: Feeds) -> dict[str, list[int]]:
    return {k: list(np.shape(v)) for k, v in feeds.items()}
