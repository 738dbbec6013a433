"""quantize-int8-dynamic: float MatMul/Gemm/Attention weights  ⇒  INT8, activations quantized at run time.

No calibration data: activation ranges are computed per inference. Suits
transformer encoders (MatMul-bound, activations with outliers that static
ranges clip). For BERT-like graphs ONNX Runtime's transformer optimizer
(``onnxruntime.transformers.optimizer``) first fuses attention, LayerNorm and
GELU into contrib ops that the dynamic quantizer then turns into QAttention /
DynamicQuantizeMatMul; whether that is faster depends on the model size and
the CPU (measured here: faster for a 12-layer 768-wide encoder, slower for a
4-layer 256-wide one), so ``fuse="auto"`` measures both and keeps the faster
one that meets the accuracy target. Fused models run on ONNX Runtime only.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import ClassVar

import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass
from passes.quant_tools import already_quantized_note, job_context
from passes.base import register
from passes.transformer_fusion import MODEL_TYPES, contrib_fused_ops, fuse_file, names_of
from studio.core.compare import QUANTIZED, Tolerance
from studio.core.engines.ort_int8 import machine_int8_choice
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from passes import quant_tools as qt
from studio.core.model_io import save_result
from studio.core.feeds import make_feeds

log = logging.getLogger(__name__)



@register
class QuantizeInt8Dynamic(StudioPass):
    """Float MatMul/Gemm/Attention weights  ⇒  INT8 with run-time activation quantization."""

    name = "quantize-int8-dynamic"
    summary = ("Dynamic INT8 quantization (weights int8, activations at run time); for transformers, optionally "
               "after ONNX Runtime's attention/LayerNorm/GELU fusions, chosen by measurement.")
    calls_engines = True
    verify_tolerance: ClassVar[Tolerance | None] = QUANTIZED
    verify_quantized: ClassVar[bool] = True

    # Options: fuse ("auto" | "on" | "off"), model_type ("auto": read from the graph | "bert"...),
    # num_heads/hidden_size (0: detect), disable_fusions (FusionOptions switches), per_channel ("auto": from
    # the CPU, studio.core.engines.ort_int8.int8_kernel_choice; reduce_range always is), target_cosine,
    # samples (random accuracy sets), dims (values of symbolic input dims
    # for those sets and the latency measurement), op_types (default: ORT's list), nodes_to_exclude.
    def call(self, model: ir.Model) -> PassResult:
        fuse = str(self.options.get("fuse", "auto"))
        if fuse not in ("auto", "on", "off"):
            raise StudioError("fuse must be auto, on or off", code=ErrorCode.BAD_OPTION)
        model_type = str(self.options.get("model_type", "auto"))
        if model_type not in MODEL_TYPES:
            raise StudioError(f"model_type must be one of {', '.join(MODEL_TYPES)}", code=ErrorCode.BAD_OPTION)
        quantized = already_quantized_note(n.op_type for n in ir.traversal.RecursiveGraphIterator(model.graph))
        if quantized:
            return PassResult(model, False, (), {}, (quantized,))
        with tempfile.TemporaryDirectory(prefix="int8dyn-", dir=".") as tmp:
            return _run(model, Path(tmp).resolve(), self.options, fuse, model_type, job_context(self))


def _fuse(src: Path, out: Path, model_type: str, opts: dict) -> tuple[Path | None, dict]:
    """The ``fuse-transformers`` pass's fusion (one implementation), on the prepared file."""
    fusion = fuse_file(src, out, model_type=model_type, num_heads=int(opts.get("num_heads", 0)),
                       hidden_size=int(opts.get("hidden_size", 0)), disable=names_of(opts.get("disable_fusions")))
    return fusion.path, fusion.to_dict()


def _run(model: ir.Model, workdir: Path, opts: dict, fuse: str, model_type: str, ctx) -> PassResult:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    target = float(opts.get("target_cosine", 0.99))
    src = save_result(model, workdir / "src" / "model.onnx")
    ctx.set_stage("INT8 dynamic: preparing the model")
    kernels = machine_int8_choice()                  # per_channel / reduce_range for this CPU, and why
    asked = opts.get("per_channel", "auto")
    per_channel = kernels.per_channel if asked in ("auto", None) else bool(asked)
    prepared = qt.prepare(src, workdir, per_channel=per_channel, min_opset=11)
    bases: dict[str, Path] = {}
    fusion_stats: dict = {}
    already = contrib_fused_ops(onnx.load_model(str(prepared.path), load_external_data=False))
    if fuse in ("auto", "off") or already:
        bases["plain"] = prepared.path      # fused before (fuse-transformers): quantized as it is
    if fuse in ("auto", "on") and not already:
        ctx.set_stage("INT8 dynamic: transformer fusions (onnxruntime.transformers.optimizer)")
        try:
            fused, fusion_stats = _fuse(prepared.path, workdir / "fused.onnx", model_type, opts)
        except Exception as exc:  # noqa: BLE001 - fusion is an option, not a requirement
            fused, fusion_stats = None, {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        qt.release_memory()
        if fused is not None:
            bases["fused"] = fused
        elif fuse == "on":
            raise StudioError(f"the {model_type} transformer optimizer found nothing to fuse in this model; "
                              "use fuse=off", code=ErrorCode.NOTHING_TO_FUSE)
    header = onnx.load_model(str(src), load_external_data=False)

    holdout = list(make_feeds(header, count=int(opts.get("samples", 4)), seed=1000, dims=opts.get("dims")).sets)
    reference = qt.ort_outputs(src, holdout, ctx)
    measured, paths = [], {}
    for key, base in bases.items():
        name = "dynamic" if key == "plain" else "fused-dynamic"
        desc = ("dynamic INT8 of the already-fused graph (QAttention, DynamicQuantizeMatMul; ONNX Runtime only)"
                if key == "plain" and already else "dynamic INT8 (MatMulInteger/DynamicQuantizeMatMul)"
                if key == "plain" else
                "transformer fusions + dynamic INT8 (QAttention, DynamicQuantizeMatMul; ONNX Runtime only)")
        ctx.set_stage(f"INT8 dynamic: quantizing ({desc})")
        out = workdir / f"{name}.onnx"
        try:
            quantize_dynamic(str(base), str(out), per_channel=prepared.per_channel,
                             weight_type=QuantType.QInt8, op_types_to_quantize=opts.get("op_types") or None,
                             nodes_to_exclude=list(opts.get("nodes_to_exclude") or []),
                             extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
                             use_external_data_format=qt.uses_external_data(base),
                             reduce_range=kernels.reduce_range)   # u8 activations x s8 weights
            qt.release_memory()
            outputs = qt.ort_outputs(out, holdout, ctx)
            cos, top1 = qt.accuracy(reference, outputs)       # float outputs by cosine
            changed = qt.integer_differences(reference, outputs)   # integer ones exactly
            if changed is not None:
                measured.append(qt.QuantCandidate(name, desc, None, None, None, cos, top1, changed))
                continue
            paths[name] = out
            measured.append(qt.QuantCandidate(name, desc, out, None, None, cos, top1))
        except Exception as exc:  # noqa: BLE001
            measured.append(qt.QuantCandidate(name, desc, None, None, None, None, None,
                                        f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"))
    if not paths:
        raise StudioError(f"dynamic INT8 quantization failed: {measured[0].error}")
    ctx.set_stage("INT8 dynamic: measuring latency")
    rounds: dict[str, list[float]] = {}
    lat = qt.measure_latencies({"fp32": src, **paths}, holdout[0], ctx, budget_s=float(opts.get("budget_s", 60)),
                               rounds_out=rounds)
    measured = [m if m.path is None else qt.QuantCandidate(m.name, m.description, m.path, lat[m.name],
                                                     lat[m.name] / lat["fp32"], m.cosine, m.top1) for m in measured]
    ctx.set_stage("INT8 dynamic: choosing a configuration")
    chosen = qt.pick(measured, target)
    if chosen is None:
        best = max((m for m in measured if m.path is not None and m.cosine is not None), key=lambda m: m.cosine)
        raise StudioError(f"dynamic INT8 does not reach cosine {target:.10g} (best: {best.name}, cosine "
                          f"{qt.cosine_text(best.cosine, target)}); lower the target or exclude sensitive nodes",
                          code=ErrorCode.INT8_ACCURACY)
    # Speed claims rest on the ratio's spread over the interleaved rounds, not on one figure.
    # Named in details["speed_claims"]: a flow that times the variant itself (precision) drops these
    # build-time figures rather than print two ratios for one comparison.
    warnings = [w for w in [qt.speed_vs_fp32(rounds, chosen.name, "dynamic INT8")] if w]
    warnings += [w for m in measured if m is not chosen and m.path is not None
                 for w in [qt.speed_vs_fp32(rounds, m.name, m.name)] if w]
    speed_claims = list(warnings)
    result = qt.load_result(chosen.path)
    details = {"chosen": chosen.to_dict(), "target_cosine": target, "fp32_latency_ms": round(lat["fp32"], 3),
               "candidates": [m.to_dict() for m in measured], "fusions": fusion_stats, "speed_claims": speed_claims,
               "preprocess": list(prepared.steps),
               "int8_kernels": {**kernels.to_dict(), "per_channel": prepared.per_channel,
                                "per_channel_source": "option" if asked not in ("auto", None) else "cpu"},
               "accuracy_inputs": f"{len(holdout)} random sets (seed 1000)",
               "engine": "onnxruntime (CPU, default graph optimizations)",
               "runs_on": ["onnxruntime"] if chosen.name == "fused-dynamic" or already
               else ["onnxruntime", "openvino"]}
    ops = {n.op_type for n in result.graph}
    changes = [Change("replaced", (), f"{chosen.description}: {chosen.ratio:.2f}x of fp32 latency, cosine "
                                      f"{chosen.cosine:.4f}; ops now {', '.join(sorted(ops))[:300]}")]
    counts = {"configurations_measured": len(measured),
              "integer_matmuls": sum(1 for n in result.graph if n.op_type in (
                  "MatMulInteger", "DynamicQuantizeMatMul", "QAttention", "MatMulIntegerToFloat")),
              "fused_ops": sum((fusion_stats.get("fused") or {}).values()) if chosen.name != "dynamic" else 0}
    return PassResult(result, True, tuple(changes), counts, warnings=tuple(warnings), details=details)
