"""The precision variants the studio builds (one row each: engine, precision, the pass pipeline or builder that
makes it, run options) and which of them "auto" builds for a model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx

from passes.presets import FP16_FOLDS
from studio.core.engines import ENGINES, RunOptions, get_engine
from studio.core.errors import StudioError
from studio.core.quantized import quantization_ops
from studio.inspect.decoder import recognize
from studio.precision.cpu import cpu_has_bf16

__all__ = ["VARIANTS", "VariantSpec", "default_variants", "model_kind"]


@dataclass(frozen=True)
class VariantSpec:
    name: str
    label: str
    engine: str                                   # canonical engine name
    precision: str                                # fp32 | fp16 | bf16 | int8
    passes: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()   # pipeline producing the model
    run_options: RunOptions = RunOptions()
    builder: str = "passes"    # passes | nncf | nncf-sq | nncf-accuracy (OpenVINO-native INT8) | nncf-weights | ...


def _p(name: str, **opts: Any) -> tuple[str, tuple[tuple[str, Any], ...]]:
    return name, tuple(sorted(opts.items()))


VARIANTS: dict[str, VariantSpec] = {v.name: v for v in (
    VariantSpec("fp32", "fp32 · ONNX Runtime", "onnxruntime", "fp32"),
    VariantSpec("fp32-ov", "fp32 · OpenVINO (f32 pinned)", "openvino", "fp32", (), RunOptions(precision="f32")),
    VariantSpec("bf16-ov", "bf16 · OpenVINO", "openvino", "bf16", (), RunOptions(precision="bf16")),
    # BatchNormalization folded in float32 first (passes.presets.FP16_FOLDS: a variance beyond fp16's range; corpus
    # rapidocr_ppocrv3_det: fp16 failed at cosine 0.889 on a printed page, folded first 0.99989).
    VariantSpec("fp16", "fp16 · ONNX Runtime", "onnxruntime", "fp16",
                (*(_p(name) for name in FP16_FOLDS), _p("convert-fp16", measure=False))),
    # Plain INT8 (no float fallback: a missed target is reported, not refused) and INT8 with the
    # layers that add the most error kept in float until the target is met: two points of the trade-off.
    VariantSpec("int8", "INT8 static · ONNX Runtime", "onnxruntime", "int8",
                (_p("quantize-int8-static", fallback=False, require_target=False),)),
    VariantSpec("int8-mixed", "INT8 + float fallback · ONNX Runtime", "onnxruntime", "int8",
                (_p("quantize-int8-static"),)),
    VariantSpec("int8-dynamic", "INT8 dynamic · ONNX Runtime", "onnxruntime", "int8",
                (_p("quantize-int8-dynamic"),)),
    VariantSpec("int8-ov", "INT8 QDQ · OpenVINO", "openvino", "int8",
                (_p("quantize-int8-static", config="qdq-u8s8", fallback=False, require_target=False),),
                RunOptions(precision="f32")),
    # OpenVINO's own INT8: NNCF post-training quantization, and NNCF with accuracy control driven by
    # the task metric on a dataset (it keeps the costliest layers in float until the drop is met).
    VariantSpec("int8-nncf", "INT8 NNCF · OpenVINO", "openvino", "int8", (),
                RunOptions(precision="f32", openvino_ir=True), builder="nncf"),
    # The same NNCF IR with its float layers (what the transformer guard kept, softmax, layer norms) in bf16,
    # offered where the CPU computes bf16 (:func:`cpu_has_bf16`). Real MiniLM-L6 1x128 on a VNNI/BF16 EPYC (load
    # 14-20, 33 rounds): guarded 0.45x ORT fp32 with f32 islands -> 0.38x in bf16, real-token cosine 0.9923 both.
    VariantSpec("int8-nncf-bf16", "INT8 NNCF, float layers bf16 · OpenVINO", "openvino", "int8", (),
                RunOptions(precision="bf16", openvino_ir=True), builder="nncf"),
    # NNCF INT8 whose guard first tries SmoothQuant MatMul alphas (nncf_int8.SMOOTH_QUANT_ALPHAS) so that every MatMul,
    # the FFN down-projections too, stays INT8. Real MiniLM-L6 (issue 35, load 4-8): 0.32x ORT fp32 at real-token
    # cosine 0.992 (alpha 0.8) where int8-nncf keeps 6 layers in float (0.44x); its padding-token rows drift more.
    VariantSpec("int8-nncf-sq", "INT8 NNCF + SmoothQuant, every MatMul INT8 · OpenVINO", "openvino", "int8", (),
                RunOptions(precision="f32", openvino_ir=True), builder="nncf-sq"),
    VariantSpec("int8-nncf-aa", "INT8 NNCF accuracy-aware · OpenVINO", "openvino", "int8", (),
                RunOptions(precision="f32", openvino_ir=True), builder="nncf-accuracy"),
    # Weight-only (decoders, LLMs): MatMul weights in int4/int8 blocks, activations float. ORT's
    # MatMulNBitsQuantizer (com.microsoft MatMulNBits, ONNX Runtime only) and NNCF compress_weights.
    VariantSpec("int4", "int4 weights (MatMulNBits) · ONNX Runtime", "onnxruntime", "int4",
                (_p("quantize-weight-only", bits=4),)),
    VariantSpec("int8-weights", "int8 weights (MatMulNBits) · ONNX Runtime", "onnxruntime", "int8",
                (_p("quantize-weight-only", bits=8),)),
    # run as OpenVINO runs them by default: the CPU plugin quantizes their MatMuls' activations per group
    VariantSpec("int4-ov", "int4 weights NNCF compress_weights · OpenVINO", "openvino", "int4", (),
                RunOptions(precision="f32", openvino_ir=True, dynamic_quantization=True), builder="nncf-weights"),
    VariantSpec("int8-weights-ov", "int8 weights NNCF compress_weights · OpenVINO", "openvino", "int8", (),
                RunOptions(precision="f32", openvino_ir=True, dynamic_quantization=True), builder="nncf-weights"),
    # MNN and LiteRT: the conversion sets the precision (MNNConvert --fp16 / --weightQuantBits 8 stores
    # fp16 / int8 weights, computed in fp32 on x86; onnx2tf's float16 .tflite).
    VariantSpec("fp32-mnn", "fp32 · MNN", "mnn", "fp32", (), RunOptions(precision="f32")),
    VariantSpec("fp16-mnn", "fp16 weights · MNN", "mnn", "fp16", (), RunOptions(precision="f16")),
    # Full INT8 (activations too), calibrated on the calibration samples (the dataset's calibration part):
    # MNN's offline quantizer on the MNNConvert model; onnx2tf's integer quantization with those samples
    # as the representative dataset. Both build an artifact (.mnn / .tflite) that is then run as is.
    VariantSpec("int8-mnn", "INT8 · MNN (offline quantizer, calibrated)", "mnn", "int8", (),
                RunOptions(precision="int8"), builder="mnn-quant"),
    VariantSpec("int8w-mnn", "INT8 weights · MNN (weight-only)", "mnn", "int8", (), RunOptions(precision="int8")),
    VariantSpec("fp32-litert", "fp32 · LiteRT", "litert", "fp32", (), RunOptions(precision="f32")),
    VariantSpec("fp16-litert", "fp16 weights · LiteRT", "litert", "fp16", (), RunOptions(precision="f16")),
    VariantSpec("int8-litert", "INT8 · LiteRT (onnx2tf integer quantization, calibrated)", "litert", "int8", (),
                RunOptions(precision="int8"), builder="litert-quant"),
    # every other converted row of the engine table: its conversion's fp32 and fp16, from the row
    *(VariantSpec(f"fp{p[1:]}-{r.name}", f"fp{p[1:]} · {r.label}", r.name, f"fp{p[1:]}", (), RunOptions(precision=p))
      for r in ENGINES if r.converted and r.name not in ("mnn", "litert") for p in r.precisions if p in ("f32", "f16")),
    VariantSpec("fp16-trt", "fp16 · TensorRT", "tensorrt", "fp16", (), RunOptions(precision="f16")),
    VariantSpec("int8-trt", "INT8 QDQ · TensorRT", "tensorrt", "int8",
                (_p("quantize-int8-static", config="qdq-s8s8", fallback=False, require_target=False),),
                RunOptions(precision="f16")),
)}


def model_kind(model: onnx.ModelProto) -> str:
    """"transformer" (MatMul with weights + Softmax, no Conv), "cnn" (Conv), else "other"."""
    ops = [n.op_type for n in model.graph.node]
    inits = {t.name for t in model.graph.initializer}
    weighted_matmuls = sum(1 for n in model.graph.node if n.op_type in ("MatMul", "Gemm")
                           and any(i in inits for i in n.input[1:2]))
    if "Conv" in ops and ops.count("Conv") >= weighted_matmuls:
        return "cnn"
    if weighted_matmuls and ("Softmax" in ops or "Attention" in ops or "MultiHeadAttention" in ops):
        return "transformer"
    return "other"


def default_variants(model: onnx.ModelProto) -> tuple[str, ...]:
    """What "auto" builds: fp32 on both engines, OpenVINO bf16, fp16, and the INT8 flavour
    that fits the model (transformers: ORT dynamic and, where OpenVINO is installed, NNCF's transformer
    scheme with its cosine guard, the fastest verified INT8 measured on an encoder (issue 35); otherwise
    static, static with float fallback, and the OpenVINO twin). Which one is recommended is decided by
    the measured run on this CPU (:func:`recommend`, :func:`engine_gain_note`), not here. Where the CPU computes
    bf16 (:func:`cpu_has_bf16`) an encoder also gets ``int8-nncf-bf16``: the NNCF IR with its float layers in bf16.
    A KV-cache decoder (:func:`studio.inspect.decoder.recognize`) adds int4 weight-only, what decoders are
    shipped in: ORT MatMulNBits, and NNCF ``compress_weights`` where OpenVINO is installed. A model quantized
    already gets no INT8 or int4 variant (its "fp32" row is the model as given)."""
    base = ("fp32", "fp32-ov", "bf16-ov", "fp16")
    if quantization_ops(model):
        return base          # quantized already (QDQ, ConvInteger, MatMulNBits...): nothing is quantized again
    convention = _decoder_convention(model)
    ov_here = bool(get_engine("openvino").available())
    if model_kind(model) == "transformer":
        # a decoder is shipped weight-only (int4 below); full INT8 with NNCF is for encoders, and its float
        # layers in bf16 where the CPU computes bf16 (the same IR, not quantized twice)
        nncf = ("int8-nncf",) + (("int8-nncf-bf16",) if cpu_has_bf16() else ()) + ("int8-nncf-sq",)
        kind = base + ("int8-dynamic",) + (nncf if ov_here and convention is None else ())
    else:
        kind = base + ("int8", "int8-mixed", "int8-ov")
    if convention is None or any(n.op_type == "MatMulNBits" for n in model.graph.node):
        return kind                      # not a decoder, or its weights are N-bit already (a genai build)
    # NNCF compresses no MatMul inside If branches, where a merged decoder keeps them
    ov = convention != "merged-if" and ov_here
    return kind + ("int4",) + (("int4-ov",) if ov else ())


def _decoder_convention(model: onnx.ModelProto) -> str | None:
    """The convention of a KV-cache decoder with input ids and logits, else None (a broken cache contract
    is judged like any model)."""
    try:
        spec = recognize(model)
    except StudioError:
        return None
    return spec.convention if spec is not None and spec.logits and spec.input_ids else None
