"""Build reduced-precision variants, judge each against fp32, recommend one (the flow).

A variant (:mod:`studio.precision.catalog`) is a model (the original, or the result of a pass pipeline:
``convert-fp16``, ``quantize-int8-static``, ``quantize-int8-dynamic``, or an NNCF / converter build) on an
engine with run options (OpenVINO's inference precision). Each is verified by its pipeline, compared with the
original on ORT fp32 on the same inputs (cosine, top-1/top-5 agreement, task metrics on a dataset), and timed
side by side with the others in one worker. Every ratio to fp32 comes with its spread: the per-round ratio of
medians over the interleaved rounds, its median and 95 % bootstrap interval (``ratio_ci``). The rows and the
report are :mod:`studio.precision.report`'s; which one is recommended, :mod:`studio.precision.recommend`'s.
TensorRT variants are listed as "not verified here" when TensorRT cannot run on this machine; their numbers are
never guessed.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from profilers.latency import LatencyRun
from studio.accuracy.compare_models import ModelComparison, compare_models
from studio.core.compare import QUANTIZED
from studio.core.engines import ENGINES, RunOptions, get_engine
from studio.core.engines.litert import MAX_REPRESENTATIVE
from studio.core.engines.mnn_quant import MAX_CALIBRATION_SAMPLES
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError, WorkerError
from studio.core.feeds import FeedSet, Feeds, ImagePreprocess, make_feeds, save_npz
from studio.core.model import model_weight_bytes
from studio.core.outputs import disk_error, remove_scratch, scratch_dir, writing_folder
from studio.core.pictures import calibration_picture, choose_picture, picture_input
from studio.core.quantized import quantization_ops, quantized_text
from studio.core.requests import OptimizeRequest
from studio.core.sandbox import Limits, require_memory, scaled_to_model
from studio.data.datasets import dataset_feeds
from studio.data.evaluate import evaluate, golden_outputs, output_specs
from studio.data.metrics import METRICS, Target, check_target, metric_options
from studio.precision.catalog import VARIANTS, VariantSpec, default_variants, model_kind
from studio.precision.latency import LatencyItem, measure
from studio.precision.nncf_int8 import SMOOTH_QUANT_ALPHAS, quantize_openvino
from studio.precision.recommend import ENGINE_FP32, engine_gain_note, recommend, recommendable, speed_note
from studio.precision.report import RANDOM_BASIS, PrecisionReport, VariantResult
from studio.precision.weight_only import (build_nncf_weights, check_weight_options, decoder_feed_sets, decoder_of,
                                          judge_decoder, weight_pass_options)

log = logging.getLogger(__name__)

__all__ = ["evaluate_variants"]


def _long_limits(limits: Limits | None, model_bytes: int) -> Limits:
    """Building variants holds a few copies of the weights at once: the model-scaled limits
    (:func:`studio.core.sandbox.scaled_to_model`) and 15 minutes per job, unless the caller set limits."""
    return scaled_to_model(limits, model_bytes, min_timeout_s=900.0)


def _verify_sets(eval_feeds: FeedSet) -> list[Feeds]:
    """The evaluation sets a build is verified on, the first and the last: a synthetic picture precision added is
    the last (where seeded noise leaves the outputs at a sliver, it is what the build's INT8 is judged on)."""
    return [eval_feeds.sets[0], eval_feeds.sets[-1]] if len(eval_feeds.sets) > 1 else list(eval_feeds.sets)


def _build(spec: VariantSpec, model_path: Path, out_dir: Path, extra: Mapping[str, Mapping[str, Any]],
           eval_feeds: FeedSet, limits: Limits, pool_key: str) -> tuple[Path, tuple[dict, ...], dict, list[str]]:
    """Run the variant's pipeline; (model, lineage, pass details, warnings)."""
    from passes.pipeline import run_pipeline  # heavy: passes import onnx_ir (~0.3 s)

    request = OptimizeRequest(passes=[name for name, _ in spec.passes],
                              pass_options={name: {**dict(opts), **dict(extra.get(name, {}))} for name, opts in spec.passes})
    # partial="none": a variant that failed leaves no file; the pipeline's default keeps the last verified
    # model (here the untouched fp32 one) under the variant's name, where it reads as that variant.
    result = run_pipeline(model_path, request, out_dir / spec.name / model_path.name,
                          feeds=_verify_sets(eval_feeds), limits=limits, pool_key=pool_key, partial="none")
    if not result.ok:
        raise StudioError(result.summary())
    if not result.modified or result.output is None:
        if result.output is not None:
            # scratch: the file this run's pipeline just wrote (the fp32 model under the variant's name)
            Path(result.output).unlink(missing_ok=True)
        said = next((n for r in result.records for n in r.notes if str(n).startswith("not applied")), None)
        raise StudioError(f"{', '.join(n for n, _ in spec.passes)} changed nothing in this model"
                          + (f" ({said[len('not applied: '):]})" if said else ""))
    details: dict = {}
    warnings: list[str] = []
    for rec in result.records:
        details.update(rec.details)
        # A pass's own latency and accuracy claims (quantize-int8-*: timed and judged while building, on the
        # pass's own held-out sets) are not repeated: the flow measures every variant side by side on its
        # evaluation inputs and says its one ratio (speed_note) and its one verdict (corpus magika_standard_v3_3
        # with --inputs: the row read 'met, 0.99999' beside the build's 'target missed ... cosine 0.9858').
        claims = set(rec.details.get("speed_claims") or ()) | set(rec.details.get("accuracy_claims") or ())
        warnings += [w for w in rec.warnings if w not in claims]
    return Path(result.output), tuple(result.lineage()), details, warnings


# Evaluation samples judged per variant (the golden set is this size): the field's INT8 standard is top-1 on
# 500+ labelled samples, and a bootstrap interval on fewer is too wide to tell a 1 % drop.
MAX_DATASET_EVAL = 500


def _dataset_feeds(ds, header: onnx.ModelProto, model_path: Path, dims: Mapping[str, int] | None,
                   pool_key: str, tasks: Mapping[str, str] | None = None) -> tuple[FeedSet, FeedSet, Any]:
    """Calibration and evaluation feeds from the dataset's parts, and the golden outputs."""
    if not ds.calibration:
        raise StudioError(f"dataset {ds.name[:40]} has no calibration part; add it with a calibration fraction > 0",
                          code=ErrorCode.BAD_INPUT)
    if not ds.evaluation:
        raise StudioError(f"dataset {ds.name[:40]} has no evaluation part; add it with a calibration fraction < 1",
                          code=ErrorCode.BAD_INPUT)
    cal = dataset_feeds(ds, header, part="calibration", limit=300, dims=dims)
    limit = min(MAX_DATASET_EVAL, len(ds.evaluation))
    ev = dataset_feeds(ds, header, part="evaluation", limit=limit, dims=dims)
    golden = golden_outputs(ds, model_path, part="evaluation", limit=limit, pool_key=pool_key, tasks=tasks)
    return (FeedSet(tuple(cal), f"dataset {ds.name[:40]}: {len(cal)} calibration sample(s)"),
            FeedSet(tuple(ev), f"dataset {ds.name[:40]}: {len(ev)} evaluation sample(s)"), golden)


def _metric_output(golden, metric: str) -> str:
    """The output the target's metric judges: the first one whose task it belongs to."""
    return check_target(Target(metric, ">=", 0.0), golden.specs)


def _max_drop(target) -> float:
    """NNCF's absolute max drop for a target met by the reference itself (agreement = 1, error = 0)."""
    if target.metric != target.base_metric:                 # map-drop<=d, top1-drop<=d
        return float(target.threshold)
    if METRICS[target.base_metric].higher_is_better:
        return max(0.0, 1.0 - float(target.threshold))
    return float(target.threshold)


def _task_option(target, golden, eval_feeds: FeedSet, work: Path) -> dict:
    """``quantize-int8-static``'s ``task`` option: its configuration choice and float-fallback search
    judge by the target's metric on the evaluation part against the golden outputs (higher is better:
    error metrics as 1 - value), so int8-mixed stops where the task target is met."""
    metric = target.base_metric
    if target.metric != metric:                                   # map-drop<=d: map50 >= 1 - d
        threshold = 1.0 - float(target.threshold)
    elif METRICS[metric].higher_is_better:
        threshold = float(target.threshold)
    else:
        threshold = 1.0 - float(target.threshold)
    output = _metric_output(golden, metric)
    holdout = save_npz(list(eval_feeds.sets), work / "task-holdout.npz")
    gold = save_npz([{output: g[output]} for g in golden.outputs], work / "task-golden.npz")
    return {"task": {"metric": metric, "output": output, "threshold": threshold, "holdout": str(holdout),
                     "golden": str(gold), "metric_options": _metric_options(golden, output),
                     "labels": golden.labelled}}


def _metric_options(golden, output: str) -> dict:
    """How the task metric judges ``output`` (a one-score classifier's threshold, a detection head's
    layout), for the jobs that get the metric by name."""
    return next((metric_options(s) for s in golden.specs if s.name == output), {})


def _build_converted_int8(spec: VariantSpec, model_path: Path, work: Path, calib: FeedSet, limits: Limits,
                          pool_key: str) -> tuple[Path, tuple[dict, ...], dict, list[str]]:
    """Full INT8 for MNN or LiteRT: the engine's own quantizer calibrated on ``calib``; an artifact."""
    engine = get_engine(spec.engine)
    cap = MAX_CALIBRATION_SAMPLES if spec.builder == "mnn-quant" else MAX_REPRESENTATIVE   # each quantizer's own
    samples = list(calib.sets[:cap])
    if spec.builder == "mnn-quant":
        conv = engine.quantize(model_path, work / f"{spec.name}.mnn", samples, limits=limits, pool_key=pool_key)
    else:
        shapes = {n: tuple(int(d) for d in np.shape(v)) for n, v in samples[0].items()}
        conv = engine.convert(model_path, work / f"{spec.name}.tflite", shapes=shapes, precision="int8",
                              calibration=samples, limits=limits, pool_key=pool_key)
    if not conv.ok or conv.artifact is None:
        raise StudioError(f"{engine.label} could not build INT8: {conv.error or 'no artifact written'}")
    source = f"{len(samples)} calibration sample(s) ({calib.source})"
    details = {"converter_command": conv.command_line, "converter_version": conv.converter_version,
               "convert_seconds": round(conv.seconds, 3), "calibration": source}
    lineage = ({"pass": "mnn.quantize" if spec.engine == "mnn" else "onnx2tf.integer_quantization",
                "tool": f"{spec.engine} {conv.converter_version or '?'}", "seconds": round(conv.seconds, 3)},)
    return conv.artifact, lineage, details, [f"calibrated on {source}"]


def _artifact_options(spec: VariantSpec, path: Path, model_path: Path) -> RunOptions:
    """A converted artifact (.mnn, .tflite) runs bound to the ONNX model it came from."""
    if path.suffix in (".mnn", ".tflite"):
        return dataclasses.replace(spec.run_options, source_model=str(model_path))
    return spec.run_options


# Exact rewrites made before NNCF quantizes: what they remove would otherwise stay in the INT8 IR and block
# OpenVINO's fusions (a dead NaN guard after Softmax stops its attention fusion: real MiniLM-L6 INT8 7.5 -> 6.7 ms).
BEFORE_NNCF = ("remove-dead-guards",)


# (the model NNCF starts from, lineage, notes) by the file written and the model it was made from (path, size,
# mtime: a rerun into the same folder after the model changed builds it again): a run builds it once for all its
# NNCF variants
_BEFORE_NNCF_BUILT: dict[tuple, tuple[Path, tuple[dict, ...], list[str]]] = {}


def _before_nncf(model_path: Path, work: Path, eval_feeds: FeedSet, limits: Limits, pool_key: str
                 ) -> tuple[Path, tuple[dict, ...], list[str]]:
    """The model NNCF starts from: ``BEFORE_NNCF`` applied and verified once per run (shared by every NNCF
    variant), or the model itself where they change nothing or cannot run (a model the pipeline refuses, such as
    one failing ONNX's full check, is quantized as given); (path, lineage, notes)."""
    from passes.pipeline import run_pipeline  # heavy: passes import onnx_ir (~0.3 s)

    out = work / "before-nncf" / model_path.name
    st = model_path.stat()
    key = (str(out), str(model_path.resolve()), st.st_size, st.st_mtime_ns)
    built = _BEFORE_NNCF_BUILT.get(key)
    if built is not None and built[0].is_file():
        return built
    request = OptimizeRequest(passes=list(BEFORE_NNCF))
    try:
        result = run_pipeline(model_path, request, out, feeds=_verify_sets(eval_feeds), limits=limits,
                              pool_key=pool_key, partial="none")
    except StudioError as exc:
        log.debug("before NNCF: %s not applied: %s", ", ".join(BEFORE_NNCF), exc)
        return model_path, (), []
    if not result.ok or not result.modified or result.output is None:
        if result.output is not None:
            Path(result.output).unlink(missing_ok=True)  # scratch: the file this run's pipeline just wrote
        return model_path, (), []
    notes = [f"before NNCF, {r.name}: {len(c.nodes)} nodes {c.kind} ({c.detail})"
             for r in result.records for c in r.changes]
    _BEFORE_NNCF_BUILT[key] = built = (Path(result.output), tuple(result.lineage()), notes)
    return built


def _build_nncf(spec: VariantSpec, model_path: Path, work: Path, calib: FeedSet, eval_feeds: FeedSet, golden,
                target, limits: Limits, pool_key: str, target_cosine: float = 0.99
                ) -> tuple[Path, tuple[dict, ...], dict, list[str]]:
    """NNCF INT8 for OpenVINO (``nncf``; ``nncf-sq``: SmoothQuant alphas tried before any float layer, refused when
    none meets the target), or with accuracy control by the task metric (``nncf-accuracy``), of the model with
    ``BEFORE_NNCF`` applied."""
    model_path, before, before_notes = _before_nncf(model_path, work, eval_feeds, limits, pool_key)
    if spec.builder == "nncf-accuracy":
        if golden is None or target is None:
            raise StudioError("accuracy-aware NNCF needs a dataset and a task-metric target (--dataset, --target)")
        output = _metric_output(golden, target.base_metric)
        r = quantize_openvino(model_path, calib.sets, work / spec.name, mode="accuracy-control",
                              evaluation=eval_feeds.sets, golden=list(golden.outputs), metric=target.base_metric,
                              output=output, max_drop=_max_drop(target), limits=limits, pool_key=pool_key,
                              metric_options=_metric_options(golden, output), labels=golden.labelled)
    else:
        # the transformer guard's floor is the flow's own target: a guarded variant is built to meet it
        alphas = SMOOTH_QUANT_ALPHAS if spec.builder == "nncf-sq" else ()
        r = quantize_openvino(model_path, calib.sets, work / spec.name, limits=limits, pool_key=pool_key,
                              guard_cosine=target_cosine, smooth_quant_alphas=alphas)
        if alphas and r.smooth_quant_alpha is None and r.guard_cosine and r.guard_cosine[0] < target_cosine:
            tried = ", ".join(f"{a:g}: {c:.4f}" for a, c in r.smooth_quant_tried)
            raise StudioError(f"SmoothQuant did not bring full INT8 to cosine {target_cosine:g} on the calibration "
                              f"samples (alphas tried: {tried}); int8-nncf keeps layers in float instead")
    details = {"nncf_version": r.nncf_version, "nncf_seconds": round(r.seconds, 3), "nncf_model_type": r.model_type}
    if r.int8_metric is not None:
        details.update(nncf_metric=r.metric, nncf_fp32_metric=r.fp32_metric, nncf_int8_metric=r.int8_metric)
    if r.guard_cosine:
        details.update(guard_cosine=list(r.guard_cosine), float_layers=list(r.float_layers),
                       smooth_quant_alpha=r.smooth_quant_alpha,
                       smooth_quant_tried=[list(t) for t in r.smooth_quant_tried])
    lineage = (*before, {"pass": f"nncf.{'quantize_with_accuracy_control' if r.mode != 'basic' else 'quantize'}",
                         "tool": f"nncf {r.nncf_version}", "seconds": round(r.seconds, 3)})
    return r.ir_path, lineage, details, [*before_notes, *r.notes, *guard_notes(r, target_cosine)]


def guard_notes(r, floor: float) -> list[str]:
    """What NNCF's transformer guard did (``NNCFResult.guard_cosine``/``float_layers``), in one note: the
    worst calibration cosine of the full INT8 model, and when it was under ``floor`` the FFN down-projections
    left in float and the guarded cosine. Nothing when the guard did not run (not a transformer)."""
    if not r.guard_cosine:
        return []
    full = r.guard_cosine[0]
    after = f"{r.guard_cosine[1]:.4f}" if len(r.guard_cosine) > 1 else "n/a"
    tried = ", ".join(f"{a:g}: {c:.4f}" for a, c in r.smooth_quant_tried)
    if not r.float_layers and r.smooth_quant_tried and r.smooth_quant_alpha is not None:
        return [f"NNCF transformer scheme: full INT8 reached calibration cosine {full:.4f} < {floor:g}; with "
                f"SmoothQuant MatMul alpha {r.smooth_quant_alpha:g} every MatMul stays INT8 at cosine {after} "
                f"(alphas tried: {tried})"]
    if not r.float_layers:
        return [f"NNCF transformer scheme, every MatMul INT8 (worst calibration cosine {full:.4f} >= {floor:g})"]
    return [f"NNCF transformer scheme: full INT8 reached calibration cosine {full:.4f} < {floor:g}"
            + (f" (and with SmoothQuant alphas {tried})" if tried else "") + ", so "
            f"{len(r.float_layers)} FFN down-projection(s) stay in float (cosine {after}): "
            f"{', '.join(r.float_layers)[:200]}"]


def _task_metrics(ds, golden, path: Path, spec: VariantSpec, eval_feeds: FeedSet, target,
                  pool_key: str, options: RunOptions | None = None) -> tuple[dict | None, bool, list[str]]:
    """The variant's task metrics on the dataset's evaluation part (MetricReport as a dict), whether it meets
    the target, and its notes: the accuracy against true labels with its interval (a labelled dataset), the
    missed target."""
    try:
        report = evaluate(ds, golden, path, engine=spec.engine, options=options or spec.run_options, target=target,
                          candidate=spec.label, pool_key=pool_key, feeds=list(eval_feeds.sets))
    except StudioError as exc:
        return None, False, [f"task metrics could not be computed: {exc}"]
    notes = [report.accuracy_text()] if report.accuracy_text() else []
    if target is not None and not report.target_met:
        v = report.target_value
        why = next((n.split(": ", 1)[-1] for n in report.notes if n.startswith("target metric")), "not computed")
        notes.append(f"target missed: {target.text()} (got {f'n/a: {why}' if v is None else f'{v:.4g}'})")
    return report.to_dict(), bool(report.target_met), notes




def _calibration_and_holdout(header: onnx.ModelProto, calibration: Path | None, samples: int,
                             dims: Mapping[str, int] | None, preprocess: ImagePreprocess | None,
                             split: bool) -> tuple[FeedSet, FeedSet | None]:
    """Calibration sets and, when the user gave real data (and ``split``), samples of it held
    out from calibration to judge accuracy on: random inputs say little about real accuracy."""
    if calibration is None:
        return make_feeds(header, count=max(samples, 1), dims=dims, seed=0), None
    if Path(calibration).is_dir():
        extra = max(2, samples // 4) if split else 0
        data = make_feeds(header, images=Path(calibration), count=max(samples, 1) + extra, dims=dims,
                          preprocess=preprocess)
        keep = min(extra, len(data) - 1) if len(data) >= 2 else 0
    else:
        data = make_feeds(header, inputs=Path(calibration))
        keep = (max(1, len(data) // 4) if len(data) >= 2 else 0) if split else 0
    if not split:
        return data, None
    if keep == 0:
        return data, FeedSet(data.sets, f"{data.source} (the only calibration sample: not held out)", data.dims)
    n = len(data) - keep
    calib = FeedSet(data.sets[:n], f"{n} of {data.source}", data.dims)
    held = FeedSet(data.sets[n:], f"{keep} held-out sample(s) of {data.source} (not used for calibration)",
                   data.dims)
    return calib, held


def _under_out_dir(evaluate: Callable[..., PrecisionReport]) -> Callable[..., PrecisionReport]:
    """Run ``evaluate`` with its ``out_dir`` (when one is given) as a writing folder: a full or read-only disk
    there stops the run with one line, and what it wrote there so far is removed again."""
    @functools.wraps(evaluate)
    def run(model_path: Path, *, out_dir: Path | None = None, **options: Any) -> PrecisionReport:
        if out_dir is None:
            return evaluate(model_path, out_dir=None, **options)
        with writing_folder(out_dir):
            return evaluate(model_path, out_dir=Path(out_dir), **options)
    return run


# A built variant: (model or artifact, lineage, pass details, warnings).
Built = tuple[Path, tuple[dict, ...], dict, list[str]]


@dataclass(frozen=True)
class _Context:
    """What every step of one evaluation shares, so each step's signature says only what it adds."""
    model_path: Path
    header: onnx.ModelProto
    work: Path                       # where variant models are written (a temp folder when the caller gave none)
    limits: Limits                   # the long limits building variants needs (see _long_limits)
    pool_key: str
    on_tick: Callable[[float], None] | None
    tasks: Mapping[str, str] | None
    dataset: Any                     # studio.data.datasets.Dataset or None
    target: Any                      # studio.data.metrics.Target or None
    target_cosine: float
    weight_options: Mapping[str, Any] = field(default_factory=dict)   # weight-only: block/group size, ratio...
    prompts: Any = None              # decoders: the text dataset the generation is judged on (else seeded ids)


@dataclass(frozen=True)
class _Inputs:
    """The feeds every variant is calibrated and judged on, and what the report says they are."""
    calib: FeedSet
    eval_feeds: FeedSet
    golden: Any                      # the dataset's golden outputs, None without a dataset
    basis: str
    notes: tuple[str, ...] = ()      # said in the report (the synthetic picture the variants were judged on)


class _Progress:
    """``on_progress(step, steps, label)`` counted step by step, and its final "done" call."""

    def __init__(self, on_progress: Callable[[int, int, str], None] | None, steps: int) -> None:
        self.on_progress, self.steps, self.step = on_progress, steps, 0

    def __call__(self, label: str) -> None:
        if self.on_progress:
            self.on_progress(self.step, self.steps, label)
        self.step += 1

    def done(self) -> None:
        if self.on_progress:
            self.on_progress(self.steps, self.steps, "done")


def _variant_names(header: onnx.ModelProto, variants: Sequence[str] | None) -> list[str]:
    """The variants to build: "auto" expanded, unknown names refused, fp32 always first (every ratio's baseline)."""
    names = list(variants or default_variants(header))
    if "auto" in names:
        names = list(dict.fromkeys([*default_variants(header), *[n for n in names if n != "auto"]]))
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise StudioError(f"unknown variant(s) {', '.join(unknown)[:80]}; choose from {', '.join(VARIANTS)}",
                          code=ErrorCode.BAD_OPTION)
    if "fp32" not in names:
        names.insert(0, "fp32")              # the baseline every ratio is measured against
    return names


def _check_options(header: onnx.ModelProto, target_cosine: float, calibration_method: str, dataset: Any,
                   target: Any, tasks: Mapping[str, str] | None) -> None:
    """Refuse bad options before any work: a wrong one should cost a line, not a half-built report."""
    if not 0.0 < target_cosine <= 1.0:
        raise StudioError("the target cosine must be in (0, 1]", code=ErrorCode.BAD_OPTION)

    from passes.quant_tools import METHODS  # start-up: ~60 ms the CLI parser would pay (it reads VARIANTS)

    if calibration_method not in METHODS:
        raise StudioError(f"calibration method must be one of {', '.join(METHODS)}, got {calibration_method[:20]!r}",
                          code=ErrorCode.BAD_OPTION)
    if target is not None and dataset is None:
        raise StudioError("a task-metric target needs a dataset to judge it on (--dataset NAME)",
                          code=ErrorCode.BAD_OPTION)
    if target is not None:                   # before any work: a target no output's task has is refused

        check_target(target, output_specs(header, tasks),
                     has_labels=any(s.label is not None for s in dataset.samples))


def _prepare_inputs(ctx: _Context, calibration: Path | None, inputs: Path | None, samples: int,
                    dims: Mapping[str, int] | None, preprocess: ImagePreprocess | None) -> _Inputs:
    """Calibration and evaluation feeds: the dataset's parts (with golden outputs) when there is one, else the
    user's data with a held-out part, else seeded random inputs (and the basis then says "estimate")."""
    if ctx.dataset is not None:
        calib, eval_feeds, golden = _dataset_feeds(ctx.dataset, ctx.header, ctx.model_path, dims, ctx.pool_key,
                                                   ctx.tasks)
        basis = (f"dataset {ctx.dataset.name[:60]}: {len(calib)} calibration / {len(eval_feeds)} evaluation samples, "
                 f"judged against stored golden outputs")
        return _Inputs(calib, eval_feeds, golden, basis)
    calib, held_out = _calibration_and_holdout(ctx.header, calibration, samples, dims, preprocess,
                                               split=inputs is None)
    if inputs is not None:
        eval_feeds = make_feeds(ctx.header, inputs=Path(inputs))
    elif held_out is not None:
        eval_feeds = held_out            # real inputs the calibration never saw
    else:
        eval_feeds = make_feeds(ctx.header, count=4, dims=dims, seed=1000)
    if calibration is None and inputs is None:
        found = _searched_dims(ctx, eval_feeds, dims)
        if found is not None:        # the seeded sizes do not fit the model: every set at the searched ones
            calib = make_feeds(ctx.header, count=max(samples, 1), dims=found[0], seed=0)
            eval_feeds = make_feeds(ctx.header, count=4, dims=found[0], seed=1000)
            eval_feeds = FeedSet(eval_feeds.sets, f"{eval_feeds.source}, at searched sizes (the seeded ones do "
                                 f"not run the original; ran on {found[1]})", eval_feeds.dims)
    if len(eval_feeds) > 16:
        eval_feeds = FeedSet(eval_feeds.sets[:16], eval_feeds.source + " (first 16)", eval_feeds.dims)
    notes: tuple[str, ...] = ()
    if calibration is None and inputs is None:
        calib, eval_feeds, notes = _with_picture(ctx, calib, eval_feeds)
    basis = (f"{RANDOM_BASIS} (seeded random inputs: add a dataset, or give calibration data)"
             if calibration is None and inputs is None else
             f"calibration {calib.source}; judged on {eval_feeds.source}")
    return _Inputs(calib, eval_feeds, None, basis, notes)


def _with_picture(ctx: _Context, calib: FeedSet, eval_feeds: FeedSet
                  ) -> tuple[FeedSet, FeedSet, tuple[str, ...]]:
    """Seeded noise leaves some image models' float outputs at zero or at a sliver of what a picture gives (a DB
    text detector's mask, RMS ~1e-9 or 4e-05 on noise, 0.46 on a page), so every variant would be judged on
    rounding: the synthetic picture that lifts them highest (the Verifier's rule,
    ``studio.core.pictures.choose_picture``) joins the evaluation feeds, and the note says which and by how much.
    Unchanged when the model answers on noise, has no image input, or no picture lifts it."""
    if picture_input(ctx.header) is None:      # no image input: no fp32 run spent on looking
        return calib, eval_feeds, ()
    from studio.verification.verifier import run_sets  # heavy: onnx_ir; the CLI's parser loads this module

    def run(sets: list[Feeds]) -> tuple:
        return run_sets(ctx.model_path, sets, full=False, limits=ctx.limits, pool_key=ctx.pool_key,
                        stage="fp32 on the evaluation feeds and synthetic pictures (ORT)").outputs

    try:
        choice = choose_picture(eval_feeds.sets[0], ctx.header, run(list(eval_feeds.sets)), run)
    except (WorkerError, StudioError) as exc:
        log.info("synthetic pictures not run for precision: %s", exc)
        return calib, eval_feeds, ()
    if choice is None:
        return calib, eval_feeds, ()
    eval_feeds = FeedSet((*eval_feeds.sets, choice.feeds), f"{eval_feeds.source}, and {choice.label}",
                         eval_feeds.dims)
    note = (f"fp32 outputs are {choice.smallness('random inputs')}, so every variant was also judged on {choice.label} "
            f"({choice.rms_text()})")
    redrawn = calibration_picture(choice, calib.sets[0], ctx.header)
    if redrawn is not None:          # INT8 ranges from noise alone miss what the model does on a page
        calib = FeedSet((*calib.sets, redrawn), f"{calib.source}, and {choice.label} drawn anew", calib.dims)
        note += "; static INT8 was also calibrated on the same kind of picture drawn anew (not the one judged on)"
    return calib, eval_feeds, (note + "; real inputs (--inputs X.npz, --calibration DIR or --dataset) check more",)


def _searched_dims(ctx: _Context, seeded: FeedSet, dims: Mapping[str, int] | None) -> tuple[dict[str, int], str] | None:
    """The input search's dims when the original refuses the seeded sets for their sizes (corpus silero_vad_v5:
    16 samples for a reflect Pad of 64), so calibration, accuracy and latency run at sizes it takes."""
    from studio.verification.verifier import searched_dims  # heavy: onnx_ir; the CLI's parser loads this module

    try:
        return searched_dims(ctx.model_path, ctx.header, seeded.sets[0], dims=dims, limits=ctx.limits,
                             pool_key=ctx.pool_key)
    except StudioError as exc:       # no session at all (custom ops...): the variants say why, as before
        log.info("input search for precision skipped: %s", exc)
        return None


def _pass_options(ctx: _Context, inp: _Inputs, calibration_method: str,
                  latency_budget_s: float, memo: Path | None = None) -> dict[str, dict[str, Any]]:
    """Each pass's options from this run (calibration file, targets, dims, the task metric), written under
    ``ctx.work`` where a pass needs a file. The INT8 passes time their configurations to choose one: within the
    run's latency budget too (they took their own 60 s default, so ``--budget 1`` still timed 20 rounds of
    fp32 and every configuration, ~7 s of a 27 s run on cnn_unfused). ``memo``: this run's folder where the
    static INT8 builds (int8, int8-mixed, int8-ov...) share calibration and measured configurations
    (``passes.quant_memo``)."""
    calib_npz = save_npz(inp.calib.sets, ctx.work / "calibration.npz")
    dims_opt = {"dims": dict(inp.eval_feeds.dims)} if inp.eval_feeds.dims else {}
    task_opt = _task_option(ctx.target, inp.golden, inp.eval_feeds, ctx.work) \
        if inp.golden is not None and ctx.target is not None else {}
    return {"quantize-int8-static": {"calibration": str(calib_npz), "target_cosine": ctx.target_cosine,
                                     "method": calibration_method, "budget_s": latency_budget_s, **dims_opt,
                                     **task_opt, **({"memo_dir": str(memo)} if memo is not None else {})},
            "quantize-int8-dynamic": {"target_cosine": ctx.target_cosine, "budget_s": latency_budget_s,
                                      **dims_opt},
            "quantize-weight-only": _weight_pass_options(ctx.weight_options),
            # fp16 measures its float32 ranges (the nodes it keeps float32) and judges itself on the sets the
            # build is verified on, not on sets of its own at guessed sizes
            "convert-fp16": {**dims_opt, "inputs": str(save_npz(_verify_sets(inp.eval_feeds),
                                                                 ctx.work / "fp16-inputs.npz"))}}


def _weight_pass_options(opts: Mapping[str, Any]) -> dict[str, Any]:
    return weight_pass_options(opts)


def _failed(spec: VariantSpec, exc: Exception, path: Path | None = None) -> VariantResult:
    """One variant's failure as its row of the report; a disk error at the output folder stops the whole run."""
    if disk_error(exc) is not None:
        raise exc                       # the output folder's disk, not the variant: the run stops
    msg = str(exc) if isinstance(exc, StudioError) else f"{type(exc).__name__}: {exc}"
    return VariantResult(spec.name, spec.label, spec.engine, spec.precision, "failed", path=path,
                         error=" ".join(msg.split())[:400])


def _build_one(ctx: _Context, inp: _Inputs, spec: VariantSpec, built: Mapping[str, Built],
               pass_extra: Mapping[str, Mapping[str, Any]]) -> Built:
    """One variant's model: the engine's own quantizer, NNCF, the original, a model already built by the same
    pipeline, plain INT8 standing in for int8-mixed when it meets the target alone, or the pass pipeline."""
    reuse = next((n for n in built if VARIANTS[n].passes == spec.passes), None)
    plain = built.get("int8")
    if spec.builder in ("mnn-quant", "litert-quant"):
        return _build_converted_int8(spec, ctx.model_path, ctx.work, inp.calib, ctx.limits, ctx.pool_key)
    if spec.builder == "nncf-weights":
        return build_nncf_weights(spec.name, ctx.model_path, ctx.header, ctx.work, ctx.weight_options, ctx.limits,
                                  ctx.pool_key)
    twin = next((n for n in built if VARIANTS[n].builder == "nncf"), None) if spec.builder == "nncf" else None
    if twin is not None:
        return built[twin]             # the same NNCF IR, run at another precision (int8-nncf-bf16)
    if spec.builder.startswith("nncf"):
        return _build_nncf(spec, ctx.model_path, ctx.work, inp.calib, inp.eval_feeds, inp.golden, ctx.target,
                           ctx.limits, ctx.pool_key, ctx.target_cosine)
    if not spec.passes:
        return ctx.model_path, (), {}, []
    if reuse is not None:
        return built[reuse]
    if spec.name == "int8-mixed" and plain is not None and plain[2].get("target_met"):
        # Plain INT8 meets the target on its own: no layer needs float fallback.
        return (plain[0], plain[1], plain[2], [
            *[w for w in plain[3] if not w.startswith("target missed")],
            "plain INT8 meets the target: no layer needed float fallback (the int8 model)"])
    return _build(spec, ctx.model_path, ctx.work, pass_extra, inp.eval_feeds, ctx.limits, ctx.pool_key)


def _build_variants(ctx: _Context, inp: _Inputs, names: Sequence[str], pass_extra: Mapping[str, Mapping[str, Any]],
                    progress: _Progress) -> tuple[dict[str, Built], dict[str, VariantResult]]:
    """Build every variant whose engine runs here; the others are "not verified here" and a failed build is a
    "failed" row, so one variant never stops the report."""
    built: dict[str, Built] = {}
    results: dict[str, VariantResult] = {}
    for name in names:
        spec = VARIANTS[name]
        progress(f"building {spec.label}")
        engine = get_engine(spec.engine)
        avail = engine.available()
        if not avail.ok:
            results[name] = VariantResult(name, spec.label, spec.engine, spec.precision, "not verified here",
                                          notes=(avail.reason or f"{engine.label} is not available here",))
            continue
        try:
            built[name] = _build_one(ctx, inp, spec, built, pass_extra)
        except Exception as exc:  # noqa: BLE001 - one variant failing must not stop the report
            results[name] = _failed(spec, exc)
    return built, results


def _compare_variants(ctx: _Context, inp: _Inputs, built: Mapping[str, Built], results: dict[str, VariantResult],
                      progress: _Progress) -> dict[str, ModelComparison]:
    """Verify each built variant against the original on ORT fp32 on the evaluation feeds (a failure is its row
    in ``results``); converted artifacts are compared with the quantized tolerance."""
    comparisons: dict[str, ModelComparison] = {}
    for name in sorted(built, key=lambda n: not _converts_f16(VARIANTS[n], Path(built[n][0]))):
        path = built[name][0]
        spec = VARIANTS[name]
        progress(f"comparing {spec.label} with fp32")
        try:
            ir = spec.run_options.openvino_ir or Path(path).suffix in (".mnn", ".tflite")
            comparisons[name] = compare_models(ctx.model_path, path, engine="onnxruntime", engine_b=spec.engine,
                                               feeds=inp.eval_feeds,
                                               options_b=_artifact_options(spec, Path(path), ctx.model_path),
                                               labels=("fp32 · ONNX Runtime", spec.label), limits=ctx.limits,
                                               pool_key=ctx.pool_key, on_tick=ctx.on_tick,
                                               candidate_header=ctx.header if ir else None,
                                               tolerance=QUANTIZED if ir else None, tasks=ctx.tasks,
                                               padding_rows=True)
        except Exception as exc:  # noqa: BLE001
            results[name] = _failed(spec, exc, path=path)
    return {n: comparisons[n] for n in built if n in comparisons}


def _converts_f16(spec: VariantSpec, path: Path) -> bool:
    """A converted engine's f16 variant converted on open: compared first, because onnx2tf's f16 run also writes
    the fp32 file, which the LiteRT worker then reuses for the fp32 variant (``litert.CONVERSIONS``)."""
    return spec.run_options.precision == "f16" and path.suffix == ".onnx" and \
        any(r.converted and r.name == spec.engine for r in ENGINES)


def _measure_latency(ctx: _Context, inp: _Inputs, built: Mapping[str, Built], timed: Sequence[str],
                     budget_s: float) -> LatencyRun | None:
    """Time the verified variants side by side in one worker (interleaved rounds), so every ratio to fp32 comes
    from the same run; None when nothing is left to time."""
    if not timed:
        return None
    return measure([LatencyItem(n, built[n][0], VARIANTS[n].engine,
                                _artifact_options(VARIANTS[n], Path(built[n][0]), ctx.model_path)) for n in timed],
                   inp.eval_feeds.sets[0], budget_s=budget_s, limits=ctx.limits, pool_key=ctx.pool_key,
                   on_tick=ctx.on_tick)


_OV_COMPUTES = {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}


def computed_precision(spec: VariantSpec, reported: str | None, executed: Mapping[str, int] | None = None) -> str:
    """The precision ``spec`` computes in on this machine, from the engine's own report: OpenVINO's
    compiled ``INFERENCE_PRECISION_HINT`` as the comparison read it ("f32, pinned") and the runtime model's
    execution precisions (``executed``: {"f32": 38, "u8": 10...}). An OpenVINO bf16 variant on a CPU without
    bf16 (AVX2 only) computes f32; an OpenVINO INT8 variant none of whose ops executes in i8/u8 computes in
    float. Weight-only variants say "weights" in their names and other engines report nothing to read:
    they are what they are built as."""
    if spec.engine != "openvino":
        return spec.precision
    if spec.precision in ("bf16", "fp16") and reported:
        return _OV_COMPUTES.get(reported.split(",")[0].strip().lower(), spec.precision)
    if spec.precision == "int8" and spec.builder != "nncf-weights" and executed:
        if not any(executed.get(k) for k in ("i8", "u8")):
            return "bf16" if executed.get("bf16") else "fp32"
    return spec.precision


def named_for_what_runs(result: VariantResult, computed: str) -> VariantResult:
    """``result`` labelled with the precision the engine computes in when that is not the one asked
    (``asked_precision`` kept; :func:`recommendable` never offers such a row: it repeats another)."""
    spec = VARIANTS.get(result.name)
    if spec is None or computed == spec.precision:
        return result
    engine = spec.label.split(" · ")[-1]
    executed = result.details.get("execution_precisions") if isinstance(result.details, Mapping) else None
    said = f"; its runtime ops execute in {', '.join(f'{k} {v}' for k, v in executed.items())}" if executed else ""
    note = (f"{spec.precision} asked, but {engine} computes {computed} on this CPU (its own report{said}): "
            f"named for what runs and not recommended")
    return dataclasses.replace(result, label=f"{computed} · {engine} ({spec.precision} not supported here)",
                               precision=computed, asked_precision=spec.precision,
                               notes=tuple(dict.fromkeys((note, *result.notes))))


def _engine_notes(spec: VariantSpec, details: Mapping[str, Any], cmp: ModelComparison) -> list[str]:
    """What the engine actually did (OpenVINO's effective precision, contrib ops), and a feed set that failed."""
    notes = []
    if spec.engine == "openvino":
        eff = cmp.candidate.precision
        notes.append(f"OpenVINO computed in {eff}")
        if cmp.candidate.note:      # converted at the run's input shapes (a tensor of unknown rank)
            notes.append(cmp.candidate.note)
        if spec.precision == "bf16" and not eff.startswith("bf16"):
            notes.append("this CPU has no bf16 support in OpenVINO; bf16 ran as " + eff.split(",")[0])
    if spec.engine == "onnxruntime" and details.get("runs_on") == ["onnxruntime"]:
        notes.append("uses ONNX Runtime contrib ops: runs on ONNX Runtime only")
    if cmp.set_errors:
        notes.append(cmp.set_errors[0])
    if cmp.comparison is not None and cmp.comparison.missing:   # no cosine for them: say so, never "n/a" silently
        notes.append(f"{spec.label} gave no output named {', '.join(cmp.comparison.missing)[:120]}: not compared")
    return notes


@dataclass(frozen=True)
class _Agreement:
    """How a variant's outputs agree with fp32: float outputs by cosine, top-1/top-5 and max abs (the worst
    output decides), integer/boolean ones (ids passed through, masks) exactly."""
    cosine: float | None
    top1: float | None
    top5: float | None
    max_abs: float | None
    floats: int                      # float outputs compared
    int_bad: tuple[Any, ...]         # integer outputs that differ from fp32
    padding: Mapping[str, Any] = field(default_factory=dict)   # padding rows left out (:func:`_padding`)
    # float outputs whose fp32 values are numerically zero (RMS under the float32 noise floor): no direction
    # to keep, their cosine is rounding noise; judged value by value (their OutputDiff.match) instead
    noise: tuple[Any, ...] = ()
    judged: float | None = None      # the worst cosine of the outputs above the noise floor (what decides)


def _agreement(cmp: ModelComparison) -> _Agreement:
    """The worst agreement over the variant's outputs (see :class:`_Agreement`)."""
    measured = [d for d in cmp.comparison.outputs.values() if d.cosine is not None]
    diffs = [d for d in measured if not d.noise_floor]
    noise = tuple(d for d in cmp.comparison.outputs.values() if d.noise_floor and d.mode != "exact")
    int_bad = tuple(d for d in cmp.comparison.outputs.values() if d.mode == "exact" and not d.match)
    return _Agreement(min((d.cosine for d in measured), default=None),
                      min((d.top1_agreement for d in diffs if d.top1_agreement is not None), default=None),
                      min((d.top5_overlap for d in diffs if d.top5_overlap is not None), default=None),
                      max((d.max_abs for d in measured if d.max_abs is not None), default=None),
                      len(diffs) + len(noise), int_bad, _padding(diffs), noise,
                      min((d.cosine for d in diffs), default=None))


def _judged_text(agree: _Agreement, target_cosine: float) -> str | None:
    """The summary's words for what judged the target where outputs at float32 noise level were judged value
    by value (their cosine is rounding noise), consistent with the row's note; None: the cosine judged it."""
    if not agree.noise:
        return None
    from passes.quant_tools import cosine_text  # start-up: ~60 ms the CLI parser would pay (it reads VARIANTS)

    worst = max((d.max_abs or 0.0) for d in agree.noise)
    names = ", ".join(f"'{d.name[:40]}'" for d in agree.noise[:3]) + (" ..." if len(agree.noise) > 3 else "")
    within = "within" if all(d.match for d in agree.noise) else "outside"
    text = (f"max abs {worst:.3g}, output{'s' if len(agree.noise) > 1 else ''} {names} at float32 noise level "
            f"(judged value by value, {within} the tolerance)")
    if agree.judged is None:
        return text
    return f"cosine {cosine_text(agree.judged, target_cosine)} on the other outputs; {text}"


PADDING_NOTE = "padding rows (attention_mask = 0) not compared: no downstream use reads them"


def _padding(diffs: Sequence[Any]) -> dict[str, Any]:
    """Both figures where token outputs were judged on their real-token rows only (the comparison left out the
    rows whose attention mask is 0): the cosine over the kept rows, which decides, and the whole output's, kept
    so the user sees what the padding did. Empty when no row was left out."""
    masked = [d for d in diffs if d.rows_left_out]
    if not masked:
        return {}
    return {"cosine_real_rows": min((d.cosine for d in diffs), default=None),
            "cosine_whole_output": min(d.cosine_whole if d.rows_left_out else d.cosine for d in diffs),
            "padding_rows_left_out": {d.name: d.rows_left_out for d in masked}, "padding_mask": masked[0].rows_mask}


def _speed(run: LatencyRun | None, name: str, latency: Any, base_ms: float | None
           ) -> tuple[float | None, tuple[float, float] | None, int]:
    """The ratio to fp32 with its interval and rounds from the interleaved run (the plain ratio of p10s when the
    run has no estimate); fp32 itself has no interval."""
    estimate = run.ratio("fp32", name) if name != "fp32" and run is not None else None
    ratio = estimate.ratio if estimate is not None else (
        (latency.p10_ms / base_ms) if (latency and latency.p10_ms and base_ms) else None)
    ratio_ci = (estimate.ci_low, estimate.ci_high) if estimate is not None and estimate.ci_low is not None \
        else None
    return ratio, ratio_ci, estimate.rounds if estimate is not None else 0


def _judge_variant(ctx: _Context, inp: _Inputs, name: str, entry: Built, cmp: ModelComparison,
                   run: LatencyRun | None, base_ms: float | None) -> VariantResult:
    """One variant's row: agreement with fp32, its latency and ratio with the interval, and whether it meets the
    target (the task metric when a dataset and target judge it, else the cosine); the notes say why not."""
    spec = VARIANTS[name]
    path, lineage, details, warnings = entry
    agree = _agreement(cmp)
    # the engine's own report of what it executes in (OpenVINO's runtime model), from the timing run
    executed = dict((run.details.get(name) or {}).get("execution_precisions") or {}) if run is not None else {}
    latency = run.stats(name) if run is not None and run.measured(name) else None
    latency_error = run.errors.get(name) if run is not None else "not measured"
    notes = list(warnings) + _engine_notes(spec, details, cmp)
    if agree.padding:
        whole = agree.padding["cosine_whole_output"]
        notes.append(f"{PADDING_NOTE} (cosine {agree.cosine or float('nan'):.4f} on real-token rows, "
                     f"{'n/a' if whole is None else f'{whole:.4f}'} whole output)")
    ratio, ratio_ci, rounds = _speed(run, name, latency, base_ms)
    meets = (agree.judged >= ctx.target_cosine if agree.judged is not None else bool(agree.noise)) \
        and all(d.match for d in agree.noise) and not cmp.set_errors and not agree.int_bad
    for d in agree.noise if name != "fp32" else ():
        notes.append(f"output '{d.name[:60]}' is at float32 noise level in fp32: judged value by value, "
                     f"{'within' if d.match else 'outside'} the tolerance (max abs {(d.max_abs or 0.0):.3g}); its cosine "
                     f"{'n/a' if d.cosine is None else f'{d.cosine:.4f}'} is not meaningful"
                     + ("" if d.match else "; these inputs leave it near zero: judge the variant on real ones "
                        "(--inputs X.npz, --calibration DIR or --dataset)"))
    judged = _judged_text(agree, ctx.target_cosine) if name != "fp32" else None
    if not agree.floats and not agree.int_bad and not cmp.set_errors and cmp.comparison:
        meets = True                       # only integer outputs, all equal: nothing approximated
        notes.append("integer outputs only, all equal to fp32: cosine n/a (no float output to measure)")
        judged = "integer outputs only, all equal to fp32"
    task = None
    if inp.golden is not None:
        task, task_meets, task_notes = _task_metrics(ctx.dataset, inp.golden, path, spec, inp.eval_feeds, ctx.target,
                                                    ctx.pool_key, _artifact_options(spec, Path(path), ctx.model_path))
        notes.extend(task_notes)
        if ctx.target is not None:
            meets = task_meets             # the task metric decides, not the cosine
    if agree.int_bad:
        notes.append(f"integer output '{agree.int_bad[0].name[:60]}' differs from fp32: {agree.int_bad[0].note}")
    if agree.judged is not None and agree.judged < ctx.target_cosine and name != "fp32" and ctx.target is None:
        from passes.quant_tools import cosine_text  # start-up: ~60 ms the CLI parser would pay (it reads VARIANTS)

        notes.append(f"target missed: cosine {cosine_text(agree.judged, ctx.target_cosine)} < "
                     f"{ctx.target_cosine:.10g}")
    speed = speed_note(ratio, ratio_ci, rounds) if name != "fp32" else None
    if speed:
        notes.append(speed)
    gain = engine_gain_note(name, run)
    if gain:
        notes.append(gain)
    return named_for_what_runs(VariantResult(
        name, spec.label, spec.engine, spec.precision, "ok" if latency and not latency_error else "failed",
        path=path if path != ctx.model_path else None, latency_p10_ms=latency.p10_ms if latency else None,
        p90_ms=latency.p90_ms if latency else None, median_ms=latency.p50_ms if latency else None,
        ratio=ratio, ratio_ci=ratio_ci, ratio_rounds=rounds, cosine=agree.cosine, top1=agree.top1, top5=agree.top5,
        max_abs=agree.max_abs, meets_target=meets, notes=tuple(dict.fromkeys(notes)),
        error=latency_error, lineage=lineage, details={**details, **({"execution_precisions": executed} if executed
                                                                     else {}), **agree.padding}, task=task,
        no_gain_over=ENGINE_FP32[spec.engine] if gain else None, judged=judged),
        computed_precision(spec, cmp.candidate.precision if spec.engine == "openvino" else None, executed))


def _recommendation(names: Sequence[str], results: Mapping[str, VariantResult]
                    ) -> tuple[tuple[VariantResult, ...], VariantResult | None, dict[str, str]]:
    """The rows in the order asked for, marked with the recommendation, the recommended one, and the fastest
    recommendable variant on each engine."""
    ordered = [results[n] for n in names if n in results]
    eligible = [v for v in ordered if recommendable(v)]
    best = recommend(ordered)
    per_engine: dict[str, str] = {}
    for v in eligible:
        cur = per_engine.get(v.engine)
        if cur is None or v.latency_p10_ms < results[cur].latency_p10_ms:
            per_engine[v.engine] = v.name
    final = tuple(dataclasses.replace(v, recommended=best is not None and v.name == best.name) for v in ordered)
    return final, best, per_engine


def _report(ctx: _Context, inp: _Inputs, final: tuple[VariantResult, ...], best: VariantResult | None,
            per_engine: Mapping[str, str], own: bool) -> PrecisionReport:
    """The report: the rows (without paths when the folder was a temporary one, removed afterwards), the
    evaluation's basis and a note on fp16 on ORT's CPU provider when it was not faster."""
    fp16 = next((v for v in final if v.name == "fp16"), None)
    report_notes = list(inp.notes)
    if fp16 is not None and fp16.ratio and fp16.ratio >= 1.0:
        report_notes.append("ONNX Runtime's CPU provider has no fast fp16 path (most fp16 ops run through "
                            "Casts): fp16 is for GPU targets")
    quantized = quantization_ops(ctx.header)
    if quantized:
        report_notes.append(f"the model is already quantized ({quantized_text(quantized)}): its fp32 row is the "
                            "model as given, and it is not quantized again (no INT8 or int4 variant is built on it)")
    if own:
        final = tuple(dataclasses.replace(v, path=None) for v in final)
    return PrecisionReport(final, best.name if best else None, per_engine, ctx.target_cosine, inp.calib.source,
                           {**inp.eval_feeds.to_dict(), "baseline": "fp32 on ONNX Runtime CPU, default graph "
                                                                    "optimizations"},
                           model_kind(ctx.header), None if own else ctx.work, tuple(report_notes), inp.basis,
                           ctx.target.text() if ctx.target is not None else None)


@_under_out_dir
def evaluate_variants(model_path: Path, *, variants: Sequence[str] | None = None, out_dir: Path | None = None,
                      calibration: Path | None = None, inputs: Path | None = None, samples: int = 8,
                      preprocess: ImagePreprocess | None = None, dims: Mapping[str, int] | None = None,
                      target_cosine: float = 0.99, latency_budget_s: float = 60.0, limits: Limits | None = None,
                      pool_key: str = "default", on_progress: Callable[[int, int, str], None] | None = None,
                      on_tick: Callable[[float], None] | None = None,
                      calibration_method: str = "minmax", dataset=None, target=None,
                      tasks: Mapping[str, str] | None = None, weight_options: Mapping[str, Any] | None = None,
                      generation_steps: int = 8) -> PrecisionReport:
    """Build, verify, compare and time each variant (see module docs).

    ``dataset`` (a :class:`studio.data.datasets.Dataset`): calibrate on its calibration part and
    judge every variant on its evaluation part against the stored golden outputs with task
    metrics; ``target`` (a :class:`studio.data.metrics.Target`, e.g. top1-agreement>=0.99) is then
    what a variant must meet, refused before any work when it applies to no output (``tasks``:
    {output: kind} chosen by the user, see :mod:`studio.data.tasks`). Without real data the report
    is a random-input estimate.

    ``calibration``: an .npz or an image folder for INT8 calibration (else ``samples``
    seeded random sets); ``inputs``: an .npz judged on (else: real samples of the
    calibration data held out from calibration when it is given, 4 fresh random sets
    when it is not). ``calibration_method``: minmax, entropy or percentile.
    A KV-cache decoder is also judged over ``generation_steps`` greedy tokens (next-token agreement, KL;
    a text ``dataset`` gives the prompts, see :mod:`studio.precision.weight_only`); ``weight_options``
    (block_size, symmetric, accuracy_level, ratio) shape the weight-only int4/int8 variants.
    Variant models are written under ``out_dir`` (a temporary folder when None,
    removed afterwards). A full or read-only disk at ``out_dir`` stops the run with one
    line, and the variants written there so far are removed again (nothing is left half done)."""
    model_path = Path(model_path)
    header = onnx.load_model(str(model_path), load_external_data=False)
    names = _variant_names(header, variants)

    weight_options = check_weight_options(weight_options)
    decoder = decoder_of(header, model_path)
    prompts_from = None
    if decoder is not None and dataset is not None and dataset.kind == "text":
        if target is not None:
            raise StudioError("a decoder is judged by next-token agreement and KL over a generation; a task-metric "
                              "--target does not apply to it", code=ErrorCode.BAD_OPTION)
        prompts_from, dataset = dataset, None       # the text gives the prompts; feeds stay the cache-aware ones
    _check_options(header, target_cosine, calibration_method, dataset, target, tasks)
    # each variant's worker holds the weights (int4 weight-only peaked at 1.19x on the 6.36 GiB decoder)
    require_memory(model_path, "precision", copies=1.3, limits=limits)
    own = out_dir is None
    work = Path(tempfile.mkdtemp(prefix="onnx-studio-precision-")) if own else Path(out_dir)
    work.mkdir(parents=True, exist_ok=True)
    ctx = _Context(model_path, header, work, _long_limits(limits, model_weight_bytes(model_path)), pool_key, on_tick,
                   tasks, dataset, target, target_cosine, weight_options, prompts_from)
    progress = _Progress(on_progress, len(names) * 2 + 2 + (decoder is not None))
    try:
        progress("preparing inputs")
        inp = _prepare_inputs(ctx, calibration, inputs, samples, dims, preprocess)
        if decoder is not None and calibration is None and inputs is None and ctx.dataset is None:
            calib, eval_feeds = decoder_feed_sets(header, decoder, dims, samples)
            inp = dataclasses.replace(inp, calib=calib, eval_feeds=eval_feeds)
        memo = scratch_dir(work.resolve(), ".int8-shared-")   # the INT8 builds' shared work, this run only
        try:
            built, results = _build_variants(ctx, inp, names, _pass_options(ctx, inp, calibration_method,
                                                                              latency_budget_s, memo), progress)
        finally:
            remove_scratch(memo)
        comparisons = _compare_variants(ctx, inp, built, results, progress)
        progress("measuring latency side by side")
        timed = [n for n in built if n in comparisons]
        run = _measure_latency(ctx, inp, built, timed, latency_budget_s)
        base = run.stats("fp32") if run is not None and run.measured("fp32") else None
        for name in timed:
            results[name] = _judge_variant(ctx, inp, name, built[name], comparisons[name], run,
                                           base.p10_ms if base is not None else None)
        extra_notes: tuple[str, ...] = ()
        if decoder is not None:
            progress("judging the decoder over a greedy generation")
            cands = [(n, VARIANTS[n].engine, Path(built[n][0]),
                      _artifact_options(VARIANTS[n], Path(built[n][0]), ctx.model_path), built[n][2])
                     for n, row in results.items() if n != "fp32" and n in built and row.status == "ok"]
            judged, extra_notes = judge_decoder(ctx.model_path, ctx.header, decoder, ctx.prompts,
                                                inp.eval_feeds.sets[0], cands, generation_steps,
                                                limits=ctx.limits, pool_key=ctx.pool_key)
            for n, (gen, errors, notes) in judged.items():
                results[n] = dataclasses.replace(results[n], generation=gen, matmul_errors=errors,
                                                 notes=tuple(dict.fromkeys(results[n].notes + notes)))
        progress("recommending")
        final, best, per_engine = _recommendation(names, results)
        report = _report(ctx, inp, final, best, per_engine, own)
        return dataclasses.replace(report, notes=report.notes + extra_notes) if extra_notes else report
    finally:
        progress.done()
        if own:
            shutil.rmtree(work, ignore_errors=True)  # scratch: the temp folder made above (own)
