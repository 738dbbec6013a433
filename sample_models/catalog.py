"""Catalog of the bundled sample ONNX models.

The ``.onnx`` files live beside this module and are produced deterministically by
:mod:`sample_models.build` (``python -m sample_models.build --check`` verifies that
the committed bytes match the builders).
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

__all__ = ["SampleModel", "CATALOG", "DECODERS", "ALL_SAMPLES", "DEFAULT_SAMPLE", "SAMPLE_DIR", "get", "names", "path_of"]

SAMPLE_DIR = pathlib.Path(__file__).resolve().parent

DEFAULT_SAMPLE = "cnn_unfused"


@dataclass(frozen=True)
class SampleModel:
    """One bundled sample model."""

    name: str
    filename: str
    purpose: str
    opset: int  # default-domain ("ai.onnx") opset version
    runs_on_ort: bool
    extra_files: tuple[str, ...] = ()
    recipe_file: str = ""          # a preprocessing recipe (JSON) for the model's image input, if it has one
    tags: tuple[str, ...] = ()     # "decoder" (a KV-cache language model), "random-weights" (results mean nothing),
                                   # "trained" (real weights: perplexity / accuracy mean something)
    side_files: tuple[str, ...] = ()   # written beside the model by the build (a tokenizer, a held-out text)

    @property
    def path(self) -> pathlib.Path:
        return SAMPLE_DIR / self.filename

    @property
    def files(self) -> tuple[str, ...]:
        """The model file followed by any side files (external data, a recipe file)."""
        return (self.filename, *self.extra_files, *((self.recipe_file,) if self.recipe_file else ()), *self.side_files)


def _sample(name: str, purpose: str, *, opset: int = 17, runs_on_ort: bool = True, **extra) -> SampleModel:
    """A catalog entry whose file is ``<name>.onnx`` (every bundled sample's is)."""
    return SampleModel(name=name, filename=f"{name}.onnx", purpose=purpose, opset=opset, runs_on_ort=runs_on_ort,
                       **extra)


def _decoder(name: str, purpose: str) -> SampleModel:
    """A random-weights KV-cache decoder (opset 17, runs on ORT)."""
    return _sample(name, purpose, tags=("decoder", "random-weights"))


CATALOG: tuple[SampleModel, ...] = (
    _sample(
        "cnn_unfused",
        "Conv+BN fusion, Identity/Dropout cleanup, Shape->Gather->Unsqueeze->Concat->Reshape folding",
    ),
    _sample(
        "mobilenet_like",
        "Depthwise conv, Clip-as-ReLU6 and HardSwish activations, inverted residuals",
    ),
    _sample(
        "transformer_block",
        "Attention/LayerNorm/GELU fusion patterns with dynamic batch and sequence (int64 token inputs)",
    ),
    _sample(
        "gridsample_4d",
        "Standard 4-D GridSample (bilinear, zeros, align_corners=0) as an op-support baseline",
        opset=16,
    ),
    _sample(
        "gridsample_5d",
        "Volumetric 5-D GridSample with opset-20 mode names (linear) for backend-support checks",
        opset=20,
    ),
    _sample(
        "mmdeploy_grid_sampler",
        "Custom mmdeploy::grid_sampler op that ORT cannot run; diagnosis and rewrite to GridSample",
        opset=16,
        runs_on_ort=False,
    ),
    _sample(
        "com_microsoft_gridsample",
        "Contrib com.microsoft::GridSample (ORT-only op); rewrite to the standard GridSample",
        opset=16,
    ),
    _sample(
        "if_loop",
        "Control flow: If and Loop with outer-scope references, scan output and a nested If",
    ),
    _sample(
        "external_data",
        "Small MLP whose weights live in an external-data side file",
        extra_files=("external_data.onnx.data",),
    ),
    _sample(
        "constant_weights",
        "CNN whose weights are all Constant nodes (no initializers); constant-to-initializer lifting",
    ),
    _sample(
        "yolo_detector",
        "YOLOv8-style detector (Ultralytics scopes, C2f/SPPF, decoupled head); dynamic height/width "
            "with exporter dim formulas and imgsz metadata",
    ),
    _sample(
        "image_classifier",
        "Image classifier with an activation-outlier channel: plain INT8 loses top-1 on real images, "
            "accuracy-aware INT8 keeps it",
    ),
    _sample(
        "caffe_classifier",
        "Caffe-style 2-class classifier: NHWC float input of BGR pixels 0..255 minus the mean (outside the "
            "graph), [N,2] softmax; decisions follow the photos' colour statistics, so a wrong recipe changes "
            "them (caffe_classifier.recipe.json is the right one)",
        recipe_file="caffe_classifier.recipe.json",
    ),
    _sample(
        "imagenet_classifier",
        "1000-class ImageNet-style classifier: NCHW [1,3,224,224] ImageNet-normalized RGB, logits [1,1000]; "
            "the bundled photos get four different classes",
    ),
    _sample(
        "digits_classifier",
        "Handwritten-digit MLP trained on scikit-learn's load_digits (real 8x8 digits, raw pixels 0..16); its "
            "golden set of 500 held-out digits with true labels (+300 training digits to calibrate) beside it, "
            "for INT8 judged by top-1 accuracy",
        tags=("trained",),
        side_files=("digits_classifier.golden.jsonl",),
    ),
)

# KV-cache decoders (issue 26). Kept apart from CATALOG, whose every model the generic stages (export all,
# the edge-shape and fuzz corpora) feed with seeded inputs chosen dim by dim: a decoder needs feeds that
# keep its cache contract (mask length = past + new tokens), which those do not make yet.
DECODERS: tuple[SampleModel, ...] = (
    _decoder(
        "gpt2_decoder",
        "GPT-2-style decoder (MHA, learned positions, LayerNorm, GELU), random weights: optimum's "
            "decoder_model without past inputs (the first step), logits and present.N.key/value out",
    ),
    _decoder(
        "gpt2_decoder_with_past",
        "The same GPT-2-style decoder, random weights, as optimum's decoder_with_past_model: "
            "past_key_values.N.key/value in, present.N out",
    ),
    _decoder(
        "gpt2_decoder_merged",
        "The same GPT-2-style decoder, random weights, merged as optimum does: an If on use_cache_branch "
            "over the with-past and no-past graphs, shared weights outside",
    ),
    _decoder(
        "llama_optimum",
        "LLaMA-style decoder (RMSNorm, rotary, GQA 6 heads / 2 KV heads, SwiGLU), random weights, in the "
            "optimum convention (plain ONNX ops, past length 0 for the prefill)",
    ),
    _decoder(
        "llama_genai",
        "The LLaMA-style decoder, random weights, in the onnxruntime-genai convention: GroupQueryAttention, "
            "RotaryEmbedding, SkipSimplifiedLayerNormalization, MatMulNBits int4 (block 16)",
    ),
    _sample(
        "char_gpt2_decoder",
        "GPT-2-style character-level decoder, trained (closed-form character bigrams on CPython's pydoc_data "
            "prose), optimum with-past I/O; its tokenizer.json and held-out text lines beside it, for perplexity",
        tags=("decoder", "trained"),
        side_files=("char_gpt2_decoder.tokenizer.json", "char_gpt2_decoder.heldout.txt"),
    ),
)

ALL_SAMPLES: tuple[SampleModel, ...] = CATALOG + DECODERS

_BY_NAME = {m.name: m for m in ALL_SAMPLES}


def names() -> tuple[str, ...]:
    """Names of every sample (CATALOG, then DECODERS) in catalog order."""
    return tuple(m.name for m in ALL_SAMPLES)


def get(name: str) -> SampleModel:
    """Look up a sample by name (raises ``KeyError`` listing the known names)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown sample model {name!r}; known: {', '.join(_BY_NAME)}") from None


def path_of(name: str) -> pathlib.Path:
    """Path of the ``.onnx`` file for the sample called ``name``."""
    return SAMPLE_DIR / get(name).filename
