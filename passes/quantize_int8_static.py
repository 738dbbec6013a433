"""quantize-int8-static: float Conv/MatMul/...  ⇒  INT8 (QDQ or QOperator), calibrated on the studio's feeds.

Wraps ``onnxruntime.quantization.quantize_static`` and picks, by measurement on
this machine, the configuration that is fastest while meeting the accuracy
target. Measured here (2-core Zen 4 with AVX-512 VNNI, ORT 1.32, ResNet-50-like,
latency relative to fp32): ORT's documented default (QDQ, int8 activations)
0.80x; QDQ with uint8 activations 0.34x, with a Q/DQ pair per consumer 0.33x;
QOperator with uint8 activations 0.32x and with int8 activations 2.4x
(*slower*). Session options were measured too and are not used: allowing int8
QDQ kernels (``session.qdqisint8allowed=1``) makes int8 activations 3.8x
slower, and disabling ``QDQS8ToU8Transformer`` 1.4x; with uint8 activations no
optimizer needs disabling. Those numbers move between CPUs and ORT versions,
which is why "auto" measures instead of trusting a table.

Guards: calibration ranges of ~0 width (a dead output, calibration data that
never exercises a branch) would make a tensor read as all zeros; graph outputs
with such ranges stay float and every one is reported. A chosen configuration
slower than fp32 is reported as such. When no configuration meets the target
cosine, the layers that add the most error are kept in float until it is met
(``passes.quant_sensitivity``).

Builds of one precision run on the same model and calibration data (int8, int8-mixed, int8-ov) share their
preparation, calibration and measured configurations through the run's ``memo_dir`` (``passes.quant_memo``);
details["reused_in_run"] says what a build read back instead of computing.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import ClassVar

import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass
from passes.quant_tools import already_quantized_note, job_context
from passes.base import register
from studio.core.compare import QUANTIZED, Tolerance
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from passes.quant_tools import AUTO_CANDIDATES, STATIC_CONFIGS
from passes import quant_tools as qt
from studio.core.model_io import save_result
from studio.core.engines.ort_int8 import machine_int8_choice
from passes.quant_sensitivity import fallback, rank_nodes, quantizable_ops
from passes.quant_memo import MeasuredConfigs, open_memo
from studio.core.feeds import Feeds
from studio.core.pictures import PictureChoice, calibration_picture, choose_picture, int8_judged, output_scales

log = logging.getLogger(__name__)


@register
class QuantizeInt8Static(StudioPass):
    """Float Conv/MatMul/Gemm/...  ⇒  INT8 with calibrated activation ranges (fastest accurate configuration)."""

    name = "quantize-int8-static"
    summary = ("Static INT8 quantization (onnxruntime.quantization), calibrated on your inputs; the configuration "
               "is chosen by measuring latency and accuracy on this machine.")
    calls_engines = True
    verify_tolerance: ClassVar[Tolerance | None] = QUANTIZED
    verify_quantized: ClassVar[bool] = True
    path_options: ClassVar[tuple[str, ...]] = ("calibration",)

    # Options (JSON): config ("auto" | a name of passes.quant_tools.STATIC_CONFIGS), calibration
    # (.npz file or image folder), samples (random sets when no calibration data), method
    # (minmax | entropy | percentile), per_channel ("auto": from the CPU, ort_int8.int8_kernel_choice),
    # target_cosine, fallback, nodes_to_exclude, dims,
    # degenerate ("float": keep tensors with degenerate ranges in float | "warn"), qdq_only (only QDQ
    # configurations: what OpenVINO and TensorRT accept; export sets it), require_target (True: fail when
    # no configuration, with fallback if on, meets target_cosine; False: keep the most accurate one and
    # warn "target missed").
    def call(self, model: ir.Model) -> PassResult:
        opts = self.options
        config = str(opts.get("config", "auto"))
        if config != "auto" and config not in STATIC_CONFIGS:
            raise StudioError(f"unknown INT8 configuration {config[:40]!r}; choose auto or one of "
                              f"{', '.join(STATIC_CONFIGS)}", code=ErrorCode.BAD_OPTION)
        names = AUTO_CANDIDATES if config == "auto" else (config,)
        quantized = already_quantized_note(n.op_type for n in ir.traversal.RecursiveGraphIterator(model.graph))
        if quantized:
            return PassResult(model, False, (), {}, (quantized,))
        ops = {n.op_type for n in ir.traversal.RecursiveGraphIterator(model.graph) if n.domain in ("", "ai.onnx")}
        if not ops & quantizable_ops():
            # Nothing the quantizer covers (a scikit-learn model of ai.onnx.ml ops): its calibration would only
            # fail on ONNX Runtime's internals ('Graph ctor should have created NodeArg...').
            shown = ", ".join(sorted({n.op_type for n in ir.traversal.RecursiveGraphIterator(model.graph)})[:6])
            return PassResult(model, False, (), {}, (f"not applied: none of the model's ops ({shown}) is one INT8 "
                                                     "quantization covers (Conv, MatMul, Gemm...); the model is "
                                                     "left as it is",))
        if opts.get("qdq_only"):
            # QOperator models (QLinearConv...) run on ONNX Runtime only: OpenVINO's frontend fails on
            # them and TensorRT's explicit quantization needs Q/DQ pairs.
            names = tuple(n for n in names if STATIC_CONFIGS[n].quant_format == "QDQ")
            if not names:
                raise StudioError(f"INT8 configuration {config!r} is QOperator, but only QDQ was asked for",
                                  code=ErrorCode.BAD_OPTION)
        with tempfile.TemporaryDirectory(prefix="int8-", dir=".") as tmp:
            return _run(model, Path(tmp).resolve(), [STATIC_CONFIGS[n] for n in names], opts,
                        job_context(self))


def _run(model: ir.Model, workdir: Path, configs: list, opts: dict, ctx) -> PassResult:
    import onnx

    kernels = machine_int8_choice()             # per_channel / reduce_range for this CPU, and why
    asked = opts.get("per_channel", "auto")
    per_channel = kernels.per_channel if asked in ("auto", None) else bool(asked)
    target = float(opts.get("target_cosine", 0.99))
    src = save_result(model, workdir / "src" / "model.onnx")
    memo = open_memo(opts, src, per_channel)    # another build of this run on the same model and data
    shared = memo.calibrated() if memo is not None else None
    if shared is None:
        ctx.set_stage("INT8: preparing the model (shape inference, BatchNormalization folding)")
        prepared = qt.prepare(src, workdir, per_channel=per_channel)
    ctx.set_stage("INT8: calibration")
    calib, calib_source = qt.calibration_feeds(src, opts.get("calibration"), int(opts.get("samples", 8)),
                                               dims=opts.get("dims"))
    task = opts.get("task")     # judged by a task metric on a dataset's evaluation part, against golden outputs
    if task:
        holdout, holdout_source = qt.load_sets(task["holdout"]), f"dataset evaluation part ({task['metric']})"
        reference = qt.load_sets(task["golden"])
        judge = qt.task_judge(task)
        target = float(task["threshold"])
    else:
        random_source = opts.get("calibration") is None
        holdout, holdout_source = qt.holdout(calib, src, random_source, dims=opts.get("dims"))
        ctx.set_stage("INT8: fp32 reference outputs")
        reference = qt.ort_outputs(src, holdout, ctx)
        judge = qt.accuracy
        if random_source:
            picture = _picture_where_noise_says_little(src, calib, holdout, reference, ctx)
            if picture is not None:
                choice, redrawn = picture
                holdout, reference = [*holdout, choice.feeds], [*reference, dict(choice.outputs)]
                holdout_source += f", and {choice.label} ({choice.rms_text()} over the random sets)"
                if redrawn is not None:
                    calib = [*calib, redrawn]
                    calib_source += f", and {choice.label} drawn anew"
    if not task:     # each output judged in the sets where the original answers (pictures.int8_judged)
        scales = output_scales(reference)
        reference = [int8_judged(r, {}, scales, integer_quantized=True)[0] for r in reference]
    if shared is None:
        ranges = qt.calibrate(prepared.path, calib, str(opts.get("method", "minmax")), workdir)
        if memo is not None:
            memo.store_calibrated(prepared, ranges)
    else:
        prepared, ranges = shared
    header = onnx.load_model(str(prepared.path), load_external_data=False)
    degenerate = qt.degenerate_ranges(header, ranges)
    exclude = list(opts.get("nodes_to_exclude") or [])
    warnings: list[str] = []
    for d in degenerate:
        if d.graph_output or opts.get("degenerate", "float") == "float":
            exclude += [n for n in (d.producer, *d.consumers) if n]
        warnings.append(d.message() if (d.graph_output or opts.get("degenerate", "float") == "float")
                        else d.message().replace("kept in float", "quantized anyway (degenerate='warn')"))
    exclude = list(dict.fromkeys(exclude))
    # the configurations' candidates and timing, from an earlier build of this run that measured them all
    memo_key = json.dumps(exclude)
    reused = memo.measured([c.name for c in configs], memo_key) if memo is not None else None
    if reused is not None:
        measured, lat, rounds = list(reused.candidates), dict(reused.latency_ms), dict(reused.rounds)
        paths = {m.name: m.path for m in measured if m.path is not None}
    else:
        measured, paths, lat, rounds = _measure(configs, prepared, ranges, calib, exclude, src, holdout, reference,
                                                judge, workdir, opts, ctx)
        if memo is not None:
            memo.store_measured(MeasuredConfigs(tuple(measured), lat, rounds), memo_key)
    fp32_ms = lat["fp32"]
    measured = [m if m.path is None else qt.QuantCandidate(m.name, m.description, m.path, lat[m.name],
                                                     lat[m.name] / fp32_ms, m.cosine, m.top1)
                for m in measured]
    ctx.set_stage("INT8: choosing a configuration")
    chosen = qt.pick(measured, target)
    steps, kept, ranked = [], [], []
    if chosen is None and opts.get("fallback", True):
        fastest = min((m for m in measured if m.latency_ms is not None), key=lambda m: m.latency_ms)
        cfg = next(c for c in configs if c.name == fastest.name)
        qdq_cfg = cfg if cfg.quant_format == "QDQ" else qt.STATIC_CONFIGS["qdq-u8s8"]
        ctx.set_stage("INT8: ranking layers by the error they add")
        qdq_path = paths.get(qdq_cfg.name) or qt.quantize_static_config(
            prepared, workdir / "rank-qdq.onnx", qdq_cfg, ranges, calib, exclude)
        ranked = rank_nodes(prepared.path, qdq_path, holdout[0], ctx, workdir)
        mixed, kept, steps = fallback(prepared, cfg, ranges, calib, holdout, reference, ranked, target, exclude,
                                      workdir, ctx, judge=judge)
        if mixed is not None:
            # within the pass's budget too (it took 30 s whatever budget_s said: 20 rounds)
            lat2 = qt.measure_latencies({"fp32": src, "mixed": mixed}, holdout[0], ctx,
                                        budget_s=min(30.0, float(opts.get("budget_s", 60))))
            cos, top1 = judge(reference, qt.ort_outputs(mixed, holdout, ctx))
            chosen = qt.QuantCandidate(f"{cfg.name}-mixed", f"{cfg.describe()}, {len(kept)} layer(s) kept in float",
                                 mixed, lat2["mixed"], lat2["mixed"] / lat2["fp32"], cos, top1, excluded=tuple(kept))
            measured.append(chosen)
    # the build's own accuracy verdict, on its held-out sets (details["accuracy_claims"]): a flow that judges the
    # variant again on its own inputs (precision) says that verdict instead, never two that disagree
    accuracy_claims: list[str] = []
    if chosen is None:
        best = max((m for m in measured if m.path is not None and m.cosine is not None), key=lambda m: m.cosine)
        if not opts.get("require_target", True):
            # Plain INT8 without fallback (a trade-off point): the most accurate configuration, and
            # the missed target said, instead of no model at all.
            chosen = best
            accuracy_claims.append(f"target missed: no INT8 configuration reaches cosine {target:.10g} without "
                                   f"float fallback; {best.name} is the closest (cosine "
                                   f"{qt.cosine_text(best.cosine, target)}, on {holdout_source})")
            warnings += accuracy_claims
        else:
            all_float = " (keeping layers in float met it only with none left in INT8)" if any(
                s.meets_target for s in steps) else ""
            raise StudioError(f"no INT8 configuration reaches cosine {target:.10g} on held-out inputs (best: "
                              f"{best.name}, cosine {qt.cosine_text(best.cosine, target)}){all_float}; lower the "
                              "target, give real calibration data, or keep fp32", code=ErrorCode.INT8_ACCURACY)
    if getattr(chosen, "quant_format", None) == "QOperator" or "qop" in chosen.name:
        warnings.append(f"{chosen.name} is a QOperator model: it runs on ONNX Runtime only (OpenVINO and TensorRT "
                        "need QDQ; choose a qdq-* configuration or qdq_only for them)")
    # Speed claims rest on the ratio's spread over the interleaved rounds (the mixed model, timed
    # on its own, has one figure: said as such when it is not faster).
    # (named in details["speed_claims"]: a flow that times the variant itself drops these build-time figures)
    speed_claims: list[str] = []
    if chosen.name in rounds:
        speed_claims += [w for w in [qt.speed_vs_fp32(rounds, chosen.name, f"INT8 {chosen.name}")] if w]
    elif chosen.ratio is not None and chosen.ratio >= 1.0:
        speed_claims.append(f"INT8 ({chosen.description}) is not faster than fp32 on this machine "
                            f"({chosen.ratio:.2f}x of fp32 latency, one measurement): keep fp32 here, or use an "
                            "engine with fast INT8 kernels")
    speed_claims += [w for m in measured if m is not chosen and m.name in rounds
                     for w in [qt.speed_vs_fp32(rounds, m.name, f"configuration {m.name}")] if w]
    warnings += speed_claims
    quantized = qt.load_result(chosen.path)
    q_nodes = [n.name for n in quantized.graph if n.op_type.startswith(("QLinear", "DequantizeLinear", "QGemm"))]
    details = {
        "chosen": chosen.to_dict(), "target_cosine": target, "target_met": chosen.cosine >= target, "fp32_latency_ms": round(fp32_ms, 3),
        "candidates": [m.to_dict() for m in measured], "calibration": calib_source, "speed_claims": speed_claims,
        "accuracy_claims": accuracy_claims,
        "calibration_method": ranges.method, "accuracy_inputs": holdout_source, "preprocess": list(prepared.steps),
        "degenerate_ranges": [d.to_dict() for d in degenerate], "excluded_nodes": exclude + list(kept),
        "fallback_steps": [s.to_dict() for s in steps], "ranked_layers": [r.to_dict() for r in ranked[:50]],
        "engine": "onnxruntime (CPU, default graph optimizations)",
        "reused_in_run": [k for k, v in (("calibration", shared), ("configurations", reused)) if v is not None],
        "int8_kernels": {**kernels.to_dict(), "per_channel": prepared.per_channel,
                         "per_channel_source": "option" if asked not in ("auto", None) else "cpu",
                         "reduce_range_applies_to": "uint8 activations x int8 weights"},
    }
    detail = (f"{chosen.description}: {chosen.ratio:.2f}x of fp32 latency, cosine {qt.cosine_text(chosen.cosine)} "
              f"({holdout_source})")
    changes = [Change("replaced", tuple(n for n in _float_nodes(model) if n not in set(exclude + list(kept))),
                      detail)]
    if exclude or kept:
        changes.append(Change("changed", tuple(exclude + list(kept)), "kept in float"))
    return PassResult(quantized, True, tuple(changes),
                      {"configurations_measured": len(measured), "nodes_kept_float": len(exclude) + len(kept),
                       "degenerate_ranges": len(degenerate), "quantize_dequantize_nodes": len(q_nodes)},
                      warnings=tuple(warnings), details=details)


def _picture_where_noise_says_little(src: Path, calib: list, holdout: list, reference: list[dict], ctx
                                     ) -> tuple[PictureChoice, Feeds | None] | None:
    """Seeded noise leaves some image models' float outputs at zero or at a sliver of what they give a picture (a DB
    text detector's mask: RMS ~1e-9 or 0.004 on noise, 0.46 on a page): INT8 ranges calibrated there and a cosine
    judged there mean nothing (every layer ended in float). The Verifier's rule (``studio.core.pictures``): the
    synthetic picture ``choose_picture`` finds joins the held-out sets, and the same kind of picture drawn anew
    joins calibration. None when the model has no image input or no picture lifts anything."""
    import onnx

    header = onnx.load_model(str(src), load_external_data=False)
    ctx.set_stage("INT8: fp32 on synthetic pictures (what random inputs say little about)")
    choice = choose_picture(holdout[0], header, reference, lambda sets: qt.ort_outputs(src, sets, ctx))
    if choice is None:
        return None
    return choice, calibration_picture(choice, calib[0], header)


def _measure(configs: list, prepared: qt.Prepared, ranges: qt.Ranges, calib: list, exclude: list[str], src: Path,
             holdout: list, reference: list, judge, workdir: Path, opts: dict,
             ctx) -> tuple[list[qt.QuantCandidate], dict[str, Path], dict[str, float], dict[str, list[float]]]:
    """Quantize, judge and time each configuration: (candidates without latency, the usable models,
    latency per model with fp32's, per-round medians)."""
    measured: list[qt.QuantCandidate] = []
    paths: dict[str, Path] = {}
    for cfg in configs:
        ctx.set_stage(f"INT8: quantizing ({cfg.describe()})")
        out = workdir / f"{cfg.name}.onnx"
        try:
            qt.quantize_static_config(prepared, out, cfg, ranges, calib, exclude)
            qt.release_memory()
            outputs = qt.ort_outputs(out, holdout, ctx)
            cos, top1 = judge(reference, outputs)                  # float outputs by cosine (or the task metric)
            changed = qt.integer_differences(reference, outputs)   # integer ones exactly
            if changed is not None:
                measured.append(qt.QuantCandidate(cfg.name, cfg.describe(), None, None, None, cos, top1, changed))
                continue
            paths[cfg.name] = out
            measured.append(qt.QuantCandidate(cfg.name, cfg.describe(), out, None, None, cos, top1))
        except Exception as exc:  # noqa: BLE001 - one failing configuration must not stop the others
            msg = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
            measured.append(qt.QuantCandidate(cfg.name, cfg.describe(), None, None, None, None, None, msg))
    if not paths:
        raise StudioError(f"INT8 quantization failed for every configuration: {measured[0].error}")
    ctx.set_stage("INT8: measuring latency (fp32 and each configuration)")
    rounds: dict[str, list[float]] = {}
    lat = qt.measure_latencies({"fp32": src, **paths}, holdout[0], ctx, budget_s=float(opts.get("budget_s", 60)),
                               rounds_out=rounds)
    return measured, paths, lat, rounds


def _float_nodes(model: ir.Model) -> list[str]:
    ops = quantizable_ops()
    return [n.name for n in model.graph if n.op_type in ops and n.name]
