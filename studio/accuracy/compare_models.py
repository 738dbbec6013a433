"""Compare two models, or one model on two engines, on the same inputs.

Shapes first (the real shapes the engines returned, never the declared ones,
which are reported when they disagree), then values with tolerances chosen from
what is compared: per output dtype for float32 runs, a cosine criterion for
quantized models, a loosened one for reduced precision (fp16 weights, OpenVINO
bf16). Every result names both sides: model, engine, engine version and the
precision the engine actually used.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from studio.accuracy.runs import run_feed_sets
from studio.core.compare import (
    QUANTIZED,
    REDUCED_PRECISION,
    Comparison,
    Tolerance,
    compare_outputs,
    merge_comparisons,
)
from studio.core.engines import RunOptions, engine_row, resolve_engine_name
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.feeds import FeedSet, Feeds, make_feeds
from studio.core.pictures import PictureChoice, choose_picture, int8_judged, output_scales
from studio.data.tasks import order_free_for, output_tasks
from studio.core.sandbox import Limits
from studio.core.quantized import QUANT_OPS
from studio.core.types import value_info
from studio.accuracy.layerwise import compare_layers

log = logging.getLogger(__name__)

__all__ = ["ModelComparison", "Side", "compare_models", "model_flavor", "padding_masks", "QUANT_OPS"]


@dataclass(frozen=True)
class Side:
    """One side of a comparison: which model ran where, and how."""

    label: str                      # "v0 · original" or a file name
    engine: str                     # canonical engine name
    engine_version: str | None
    precision: str                  # what the engine computed in, as it reported it
    flavor: str                     # fp32 | fp16 | int8 (from the model's ops and weights)
    note: str | None = None         # how the engine ran what it could not take as given (the runner's own words:
                                    # OpenVINO "converted at the input shapes ...")

    def describe(self) -> str:
        return f"{self.label} on {self.engine} {self.engine_version or ''} ({self.precision})".replace("  ", " ")

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True, eq=False)
class ModelComparison:
    """A comparison of two runs, truthy when every output matches within tolerance."""

    comparison: Comparison                    # merged over the input sets (worst case per output)
    reference: Side
    candidate: Side
    feeds: Mapping[str, Any]                  # FeedSet.to_dict(): where the inputs came from
    tolerance_note: str                       # which tolerance and why
    shape_notes: tuple[str, ...] = ()         # declared output shapes the engines did not honour, the shapes a
                                              # side was converted at (Side.note), the synthetic picture added
    set_errors: tuple[str, ...] = ()          # input sets a side could not run
    layerwise: Any = None                     # LayerwiseResult when asked
    extra: Mapping[str, Any] = field(default_factory=dict)
    tasks: tuple = ()                         # studio.data.tasks.OutputTask per output: how each was judged

    def __bool__(self) -> bool:
        return bool(self.comparison) and not self.set_errors

    @property
    def ok(self) -> bool:
        return bool(self)

    def notes_beside_summary(self) -> tuple[str, ...]:
        """The shape notes and failed input sets a report lists under its summary, less the failed set the
        summary already is (a failure was shown twice: as the verdict and again as a note)."""
        return (*self.shape_notes, *self.set_errors[1:])

    def summary(self) -> str:
        if self.set_errors:
            return self.set_errors[0]
        text = self.comparison.summary()
        if self.layerwise is not None and self.layerwise.first_divergence is not None:
            d = self.layerwise.first_divergence
            text += f"; first diverging layer: '{d.node[:80]}' ({d.op_type})"
        return text

    def to_dict(self) -> dict:
        return {"ok": self.ok, "summary": self.summary(), "reference": self.reference.to_dict(),
                "candidate": self.candidate.to_dict(), "feeds": dict(self.feeds),
                "tolerance": self.tolerance_note, "shape_notes": list(self.shape_notes),
                "set_errors": list(self.set_errors), "comparison": self.comparison.to_dict(),
                "layerwise": self.layerwise.to_dict() if self.layerwise is not None else None,
                "tasks": [t.to_dict() for t in self.tasks],
                **({"extra": dict(self.extra)} if self.extra else {})}


def model_flavor(model: onnx.ModelProto) -> str:
    """int8 when the graph holds quantization ops, fp16/bf16 when its float weights are, else fp32."""
    ops = {n.op_type for n in model.graph.node}
    if ops & QUANT_OPS:
        return "int8"
    kinds = {t.data_type for t in model.graph.initializer}
    casts = {a.i for n in model.graph.node if n.op_type == "Cast" for a in n.attribute if a.name == "to"}
    if onnx.TensorProto.FLOAT16 in kinds | casts and onnx.TensorProto.FLOAT not in kinds:
        return "fp16"
    if onnx.TensorProto.BFLOAT16 in kinds | casts and onnx.TensorProto.FLOAT not in kinds:
        return "bf16"
    return "fp32"


def _ov_precision(options: RunOptions, details: Mapping[str, Any]) -> str:
    eff = details.get("precision_effective")
    if not eff:         # it never compiled (the run failed first): what was asked, not a '?'
        asked = options.precision if options.precision != "default" else "the plugin's default"
        return f"{asked} asked, not compiled"
    return f"{eff}, {'pinned' if options.precision != 'default' else 'plugin default'}"


def _ort_precision(options: RunOptions, details: Mapping[str, Any]) -> str:
    return f"graph optimizations {options.graph_optimization_level}"


def _converted_precision(options: RunOptions, details: Mapping[str, Any]) -> str:
    """Converted formats: say how, and how outputs were matched back."""
    layout = details.get("layout") or {}
    moved = [k for k, v in layout.items() if "->" in v]
    return (f"{options.precision} weights, converted; outputs matched to ONNX names "
            f"{details.get('names_mapped') or details.get('outputs_mapped') or 'by name'}"
            + (f"; NHWC layout undone for {', '.join(moved[:4])}" if moved else "")
            + (f"; {details['fallback']}" if details.get("fallback") else ""))   # LiteRT: XNNPack refused


PrecisionText = Callable[[RunOptions, Mapping[str, Any]], str]
# This layer's per-engine table of how a side's precision is described: an engine's own, else its row's kind's.
PRECISION_TEXT: dict[str, PrecisionText] = {"openvino": _ov_precision, "onnxruntime": _ort_precision}
KIND_PRECISION_TEXT: dict[str, PrecisionText] = {"converted": _converted_precision}


def _precision_text(engine: str, options: RunOptions, details: Mapping[str, Any]) -> str:
    row = engine_row(engine)
    text = PRECISION_TEXT.get(engine) or KIND_PRECISION_TEXT.get(row.kind if row is not None else "")
    return text(options, details) if text is not None else options.precision + " (not verified here)"


def choose_tolerance(ref: Side, got: Side, options: Sequence[RunOptions]) -> tuple[Tolerance | None, bool, str]:
    """(tolerance or None for per-dtype defaults, cosine-criterion flag, why)."""
    if "int8" in (ref.flavor, got.flavor):
        return QUANTIZED, True, (f"quantized model: cosine >= {QUANTIZED.min_cosine} per output "
                                 "(elementwise errors are expected)")
    reduced = [s for s in (ref, got) if s.flavor in ("fp16", "bf16")]
    ov_reduced = [o for o in options if o.precision in ("bf16", "f16", "default")]
    if reduced or ov_reduced:
        why = "reduced precision (" + ", ".join(
            [f"{s.flavor} model" for s in reduced] + [f"OpenVINO {o.precision}" for o in ov_reduced]) + ")"
        return REDUCED_PRECISION, True, (f"{why}: cosine >= {REDUCED_PRECISION.min_cosine} per output "
                                         "(elementwise errors grow with depth)")
    return None, False, "per output dtype (float32: rtol 1e-4, atol 1e-4 x RMS of the reference)"


def declared_shape_notes(model: onnx.ModelProto, outputs: Mapping[str, Any], label: str) -> list[str]:
    """Outputs whose real shape contradicts the model's declaration (fixed dims only)."""
    notes = []
    declared = {o.name: value_info(o).shape for o in model.graph.output}
    for name, value in outputs.items():
        shape = declared.get(name)
        real = getattr(value, "shape", None)
        if shape is None or real is None:
            continue
        if len(shape) != len(real) or any(isinstance(d, int) and d != r for d, r in zip(shape, real)):
            notes.append(f"{label}: output '{name[:60]}' declares shape {list(shape)} but the engine returned "
                         f"{list(real)}; compared on the real shapes")
    return notes


_MASK_TYPES = frozenset({onnx.TensorProto.BOOL, onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32,
                         onnx.TensorProto.INT64, onnx.TensorProto.UINT8, onnx.TensorProto.UINT16,
                         onnx.TensorProto.UINT32, onnx.TensorProto.UINT64})


def padding_masks(model: onnx.ModelProto) -> dict[str, str]:
    """{output: mask input} for the outputs whose padding rows may be left out of a comparison: only when it is
    unambiguous which rows are padding. The model has exactly one input named ``attention_mask`` (or ending so),
    it is 2-D integer/boolean, and the output's first two dims are that input's two dims (the same names, or the
    same sizes). Every other output (and every output of any other model) is compared whole."""
    inits = {t.name for t in model.graph.initializer}
    named = [i for i in model.graph.input if i.name not in inits and i.name.endswith("attention_mask")]
    if len(named) != 1:
        return {}
    mask = value_info(named[0])
    if mask.kind != "tensor" or mask.elem_type not in _MASK_TYPES or mask.rank != 2 or None in mask.shape:
        return {}
    found = {}
    for out in model.graph.output:
        info = value_info(out)
        if info.kind == "tensor" and info.rank is not None and info.rank >= 2 and info.shape[:2] == mask.shape:
            found[out.name] = mask.name
    return found


# A search for inputs the reference runs on (the facade passes diagnostics.input_search's, a layer above):
# (reference header, its first error, run(sets) -> outputs per set or None, the user's dims) -> (feeds, text).
InputSearch = Callable[[onnx.ModelProto, str, Callable[[list[Feeds]], Sequence[Any]], Mapping[str, int]],
                       "tuple[Feeds, str] | None"]


def _require_candidate_inputs(candidate: onnx.ModelProto, feeds: FeedSet, labels: tuple[str, str]) -> None:
    """Both sides run on the same inputs: a candidate input no feed has (an unrelated model, a renamed input)
    is one line before any run, not a "missing feed" per set."""
    given = set(feeds.sets[0]) if feeds.sets else set()
    inits = {t.name for t in candidate.graph.initializer}
    lacking = [i.name for i in candidate.graph.input if i.name not in inits and i.name not in given]
    if lacking:
        raise StudioError(
            f"the candidate {labels[1][:60]} takes input(s) {', '.join(repr(n[:60]) for n in lacking[:4])} that the "
            f"inputs made for the reference {labels[0][:60]} do not have: compare runs both on the same inputs, so give "
            "two versions of one model (the same input names), or --inputs X.npz holding every input of both",
            code=ErrorCode.BAD_INPUT)


def _load_header(path: Path) -> onnx.ModelProto:
    try:
        return onnx.load_model(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - the loader in studio.core.model gave the clear message already
        raise StudioError(f"cannot read {Path(path).name[:60]} as ONNX ({type(exc).__name__})") from None


def _picture(model: onnx.ModelProto, feeds: FeedSet, outputs: Sequence[Any],
             run: Callable[[list[Feeds]], Sequence[Any]]) -> PictureChoice | None:
    """The synthetic picture to compare on where the reference's outputs are numerically zero on the seeded sets,
    or a sliver of what the picture gives (studio.core.pictures: the rule of optimize, precision, check and
    export); None otherwise."""
    if not feeds.sets:
        return None
    try:
        return choose_picture(feeds.sets[0], model, list(outputs), run)
    except StudioError:
        return None


def compare_models(reference: Path, candidate: Path, *, engine: str = "onnxruntime",
                   engine_b: str | None = None, feeds: FeedSet | None = None,
                   options: RunOptions | None = None, options_b: RunOptions | None = None,
                   tolerance: Tolerance | None = None, labels: tuple[str, str] | None = None,
                   dims: Mapping[str, int] | None = None, count: int = 2, limits: Limits | None = None,
                   pool_key: str = "default", on_tick: Callable[[float], None] | None = None,
                   layerwise: bool = False, layerwise_options: Mapping[str, Any] | None = None,
                   candidate_header: onnx.ModelProto | None = None,
                   tasks: Mapping[str, str] | None = None, padding_rows: bool = False,
                   search_inputs: InputSearch | None = None) -> ModelComparison:
    """Run ``reference`` on ``engine`` and ``candidate`` on ``engine_b`` (default: the same)
    with the same inputs, and compare every output by its task (``studio.data.tasks``; ``tasks``:
    {output: kind} chosen by the user): detection rows in any order, integers exactly, class
    scores with their top-1 agreement. ``feeds`` default to ``count`` seeded random sets built
    for the reference. ``layerwise`` adds the first diverging layer (see :mod:`studio.accuracy.layerwise`).
    ``padding_rows``: token outputs leave out the rows whose attention mask is 0 (:func:`padding_masks`; the
    whole-output cosine is kept beside), for callers whose use reads no padding row.
    ``search_inputs``: when the studio chose the inputs (no ``feeds``) and the reference ran on none of them, the
    set it finds replaces them (said in the feeds' source), as check, optimize and export do (R39)."""
    engine_a = resolve_engine_name(engine)
    engine_b = resolve_engine_name(engine_b or engine)
    options_a = options or RunOptions()
    options_b = options_b or options_a
    # candidate_header: the ONNX view of a candidate that is no ONNX file (an OpenVINO IR the studio wrote)
    ref_model, got_model = _load_header(reference), candidate_header or _load_header(candidate)
    chosen = feeds is None
    feeds = feeds or make_feeds(ref_model, count=count, dims=dims)
    labels = labels or (Path(reference).name, Path(candidate).name)
    _require_candidate_inputs(got_model, feeds, labels)
    runs_a = run_feed_sets(reference, engine_a, feeds.sets, options=options_a, limits=limits, pool_key=pool_key,
                           on_tick=on_tick)
    if chosen and search_inputs is not None and runs_a.first_error and all(o is None for o in runs_a.outputs):
        def run(sets: list[Feeds]) -> Sequence[Any]:
            return run_feed_sets(reference, engine_a, sets, options=options_a, limits=limits, pool_key=pool_key,
                                 on_tick=on_tick).outputs

        found = search_inputs(ref_model, runs_a.first_error, run, dict(dims or {}))
        if found is not None:
            feeds = FeedSet((found[0],), f"searched: {found[1]} (the seeded inputs fail on {labels[0][:60]}: "
                                         f"{str(runs_a.first_error)[:120]})", feeds.dims)
            runs_a = run_feed_sets(reference, engine_a, feeds.sets, options=options_a, limits=limits,
                                   pool_key=pool_key, on_tick=on_tick)
    picture = None
    if chosen:                   # seeded inputs that leave the reference's outputs at (near) zero compare little
        picture = _picture(ref_model, feeds, runs_a.outputs, lambda sets: run_feed_sets(
            reference, engine_a, sets, options=options_a, limits=limits, pool_key=pool_key, on_tick=on_tick).outputs)
        if picture is not None:
            feeds = FeedSet((*feeds.sets, picture.feeds), f"{feeds.source}; plus {picture.label}", feeds.dims)
            runs_a = run_feed_sets(reference, engine_a, feeds.sets, options=options_a, limits=limits,
                                   pool_key=pool_key, on_tick=on_tick)
    runs_b = run_feed_sets(candidate, engine_b, feeds.sets, options=options_b, limits=limits, pool_key=pool_key,
                           on_tick=on_tick)
    side_a = Side(labels[0], engine_a, runs_a.details.get("engine_version"),
                  _precision_text(engine_a, options_a, runs_a.details), model_flavor(ref_model),
                  runs_a.details.get("conversion_note"))
    side_b = Side(labels[1], engine_b, runs_b.details.get("engine_version"),
                  _precision_text(engine_b, options_b, runs_b.details), model_flavor(got_model),
                  runs_b.details.get("conversion_note"))
    auto_tol, quantized, why = choose_tolerance(side_a, side_b, (options_a, options_b))
    tol = tolerance or auto_tol
    if tolerance is not None:
        quantized = tolerance.min_cosine is not None and quantized
        why = f"given: rtol {tolerance.rtol:g}, atol {tolerance.atol:g}" + (
            f", cosine >= {tolerance.min_cosine}" if tolerance.min_cosine is not None else "")
    comparisons, set_errors = [], []
    scales = output_scales(runs_a.outputs) if tol == QUANTIZED else {}
    notes = [f"{s.label} on {s.engine}: {s.note}" for s in (side_a, side_b) if s.note]
    if picture is not None:
        notes.append(f"outputs {picture.smallness('the seeded inputs')} were also compared on {picture.label} "
                     f"({picture.rms_text()}); real inputs (--inputs X.npz) check more")
    decided = output_tasks(ref_model, tasks)
    order_free = order_free_for(ref_model, decided)  # TopK/NMS rows: same rows in another order are equal
    masks = padding_masks(ref_model) if padding_rows else {}
    for i, (a, b) in enumerate(zip(runs_a.outputs, runs_b.outputs)):
        rows = {out: (m, feeds.sets[i][m]) for out, m in masks.items() if m in feeds.sets[i]}
        if a is None or b is None:
            side, err = (side_a, runs_a.errors[i]) if a is None else (side_b, runs_b.errors[i])
            set_errors.append(f"input set {i + 1} fails on {side.label} ({side.engine}): {err}")
            continue
        if i == 0:
            notes += declared_shape_notes(ref_model, a, side_a.label)
            notes += declared_shape_notes(got_model, b, side_b.label)
        a, b = int8_judged(a, b, scales, tol == QUANTIZED)    # INT8: judged where the reference answers
        comparisons.append(compare_outputs(a, b, tol, quantized=quantized, order_free=order_free, tasks=decided,
                                           rows=rows))
    merged = merge_comparisons(comparisons)
    lw = None
    if layerwise:
        lw_opts = dict(layerwise_options or {})
        if tol is REDUCED_PRECISION and not lw_opts.get("layer_threshold"):
            lw_opts["layer_threshold"] = 0.05       # fp16/bf16 layers drift less than INT8 ones
        lw = compare_layers(reference, candidate, feeds=feeds.sets[-1 if picture is not None else 0],
                            engine=engine_a, engine_b=engine_b,
                            options=options_a, options_b=options_b, tolerance=tol, quantized=quantized,
                            limits=limits, pool_key=pool_key, on_tick=on_tick, **lw_opts)
    return ModelComparison(merged, side_a, side_b, feeds.to_dict(), why, tuple(dict.fromkeys(notes)),
                           tuple(set_errors), lw, tasks=tuple(decided.values()))
