"""Deterministic builders for the bundled sample ONNX models.

Every model is built in code with :mod:`onnx.helper` from a fixed-seed
``numpy.random.default_rng`` so that serialization is byte-identical across runs.
Node and value names follow the PyTorch exporter's conventions
(``/layer1/layer1.0/conv1/Conv`` producing ``/layer1/layer1.0/conv1/Conv_output_0``,
initializers named like ``layer1.0.conv1.weight``) so that name-scope hierarchies
can be derived from them.

Usage::

    python -m sample_models.build            # write missing files into sample_models/
    python -m sample_models.build --force    # rebuild every file
    python -m sample_models.build --check    # exit 1 if a committed file differs
    python -m sample_models.build --out DIR [NAME ...]
    python -m sample_models.build --large-decoder DIR   # ~1.1 G-parameter decoder for benchmarks (4.4 GB)
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

try:  # works both as ``sample_models.build`` and when run as a plain script
    from sample_models.catalog import ALL_SAMPLES, SAMPLE_DIR, get
    from sample_models.classifier import (CAFFE_RECIPE, build_caffe_classifier, build_image_classifier,
                                          build_imagenet_classifier)
    from sample_models.decoders import (build_gpt2_decoder, build_gpt2_merged, build_gpt2_with_past,
                                        build_llama_genai, build_llama_optimum, write_large_decoder)
    from sample_models.detector import build_yolo_detector
    from sample_models.digits import GOLDEN_FILE, build_digits_classifier, golden_jsonl
    from sample_models.trained_decoder import build_char_gpt2, heldout_text, tokenizer_json
    from sample_models.protos import GraphParts
    from sample_models.protos import sample_model as _model
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
    from sample_models.catalog import ALL_SAMPLES, SAMPLE_DIR, get
    from sample_models.classifier import (CAFFE_RECIPE, build_caffe_classifier, build_image_classifier,
                                          build_imagenet_classifier)
    from sample_models.decoders import (build_gpt2_decoder, build_gpt2_merged, build_gpt2_with_past,
                                        build_llama_genai, build_llama_optimum, write_large_decoder)
    from sample_models.detector import build_yolo_detector
    from sample_models.digits import GOLDEN_FILE, build_digits_classifier, golden_jsonl
    from sample_models.trained_decoder import build_char_gpt2, heldout_text, tokenizer_json
    from sample_models.protos import GraphParts
    from sample_models.protos import sample_model as _model

__all__ = [
    "BUILDERS",
    "build_all",
    "build_model",
    "build_cnn_unfused",
    "build_mobilenet_like",
    "build_transformer_block",
    "build_gridsample_4d",
    "build_gridsample_5d",
    "build_mmdeploy_grid_sampler",
    "build_com_microsoft_gridsample",
    "build_if_loop",
    "build_external_data",
    "build_constant_weights",
    "build_yolo_detector",
    "build_image_classifier",
    "build_caffe_classifier",
    "build_imagenet_classifier",
    "main",
]

EXTERNAL_DATA_THRESHOLD = 1024

F32 = TensorProto.FLOAT
I64 = TensorProto.INT64
BOOL = TensorProto.BOOL


# --------------------------------------------------------------------------- helpers


class _Graph(GraphParts):
    """Tiny accumulator for nodes/initializers with PyTorch-exporter naming."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self._const_counter: dict[str, int] = {}

    # -- tensors -----------------------------------------------------------
    def normal(self, shape: Sequence[int], std: float, mean: float = 0.0) -> np.ndarray:
        return (mean + std * self.rng.standard_normal(tuple(shape))).astype(np.float32)

    def uniform(self, shape: Sequence[int], low: float, high: float) -> np.ndarray:
        return self.rng.uniform(low, high, tuple(shape)).astype(np.float32)

    def he(self, shape: Sequence[int], fan_in: int) -> np.ndarray:
        """Kaiming-normal init (ReLU gain)."""
        return self.normal(shape, math.sqrt(2.0 / fan_in))

    # -- nodes ---------------------------------------------------------------
    def node(
        self,
        op_type: str,
        inputs: Sequence[str],
        name: str,
        outputs: Sequence[str] | None = None,
        domain: str = "",
        **attrs,
    ) -> str:
        """Append a node; returns its first output (default ``<name>_output_0``)."""
        outs = list(outputs) if outputs is not None else [f"{name}_output_0"]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, domain=domain or None, **attrs))
        return outs[0]

    def const(self, scope: str, array: np.ndarray) -> str:
        """A ``Constant`` node named ``<scope>/Constant[_k]`` (PyTorch numbering)."""
        k = self._const_counter.get(scope, 0)
        self._const_counter[scope] = k + 1
        name = f"{scope}/Constant" + (f"_{k}" if k else "")
        out = f"{name}_output_0"
        tensor = numpy_helper.from_array(np.asarray(array))
        self.nodes.append(helper.make_node("Constant", [], [out], name=name, value=tensor))
        return out

    def graph(
        self,
        name: str,
        inputs: Sequence[onnx.ValueInfoProto],
        outputs: Sequence[onnx.ValueInfoProto],
    ) -> onnx.GraphProto:
        return helper.make_graph(self.nodes, name, list(inputs), list(outputs), initializer=self.initializers)


def _vi(name: str, elem_type: int, shape: Sequence[int | str | None] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, shape)


def _scalar(value, dtype) -> np.ndarray:
    return np.array(value, dtype=dtype)


# The two CIFAR-sized CNNs' model docs.
_CNN_UNFUSED_DOC = (
    "ResNet-style CNN as exported by PyTorch without BatchNorm folding: Conv->BatchNormalization->Relu "
    "blocks with residual Adds, leftover Identity/Dropout nodes and a Shape->Gather->Unsqueeze->Concat->"
    "Reshape flatten chain before a Gemm classifier. Input [batch,3,32,32] -> logits [batch,10]."
)
_MOBILENET_DOC = (
    "MobileNet-like CNN: inverted residual blocks (1x1 expand, depthwise 3x3 Conv with group=channels, "
    "1x1 linear projection), Clip(0,6) as ReLU6 with min/max initializer inputs, HardSwish, a residual "
    "Add, GlobalAveragePool, Flatten and a Gemm classifier. Input [batch,3,32,32] -> logits [batch,10]."
)


def _logits_head(g: _Graph, y: str, param: str, node: str, doc: str) -> onnx.ModelProto:
    """The 32->10 Gemm classifier both CIFAR-sized CNNs end with, and their ``input[batch,3,32,32]`` model."""
    w = g.init(f"{param}.weight", g.normal((10, 32), 1.0 / math.sqrt(32)))
    b = g.init(f"{param}.bias", g.normal((10,), 0.05))
    g.node("Gemm", [y, w, b], node, outputs=["logits"], alpha=1.0, beta=1.0, transB=1)
    graph = g.graph(
        "main_graph",
        [_vi("input", F32, ["batch", 3, 32, 32])],
        [_vi("logits", F32, ["batch", 10])],
    )
    return _model(graph, 17, doc)


# ---------------------------------------------------------------- 1. cnn_unfused


def _conv_bn(
    g: _Graph,
    x: str,
    scope: str,
    conv: str,
    bn: str,
    cin: int,
    cout: int,
    k: int,
    stride: int = 1,
    relu: str | None = None,
    param: str = "",
) -> str:
    """PyTorch-style unfused Conv(bias=False) -> BatchNormalization [-> Relu].

    ``scope`` is the node-name scope (``/layer1/layer1.0``), ``param`` the module path used
    for initializer names (``layer1.0``).
    """
    pfx = param + "." if param else ""
    w = g.init(f"{pfx}{conv}.weight", g.he((cout, cin, k, k), cin * k * k))
    y = g.node(
        "Conv",
        [x, w],
        f"{scope}/{conv}/Conv",
        dilations=[1, 1],
        group=1,
        kernel_shape=[k, k],
        pads=[k // 2] * 4,
        strides=[stride, stride],
    )
    scale = g.init(f"{pfx}{bn}.weight", g.normal((cout,), 0.1, mean=1.0))
    bias = g.init(f"{pfx}{bn}.bias", g.normal((cout,), 0.1))
    mean = g.init(f"{pfx}{bn}.running_mean", g.normal((cout,), 0.1))
    var = g.init(f"{pfx}{bn}.running_var", g.uniform((cout,), 0.5, 1.5))
    y = g.node("BatchNormalization", [y, scale, bias, mean, var], f"{scope}/{bn}/BatchNormalization", epsilon=1e-5, momentum=0.9)
    if relu is not None:
        y = g.node("Relu", [y], f"{scope}/{relu}/Relu")
    return y


def build_cnn_unfused() -> onnx.ModelProto:
    """ResNet-like CNN exported without BN folding, with exporter leftovers."""
    g = _Graph(seed=1001)
    x = "input"
    # stem
    y = _conv_bn(g, x, "", "conv1", "bn1", 3, 16, 3, relu="relu")
    y = g.node("MaxPool", [y], "/maxpool/MaxPool", ceil_mode=0, kernel_shape=[2, 2], pads=[0, 0, 0, 0], strides=[2, 2])
    y = g.node("Identity", [y], "/Identity")
    # layer1.0: BasicBlock with identity shortcut
    s = "/layer1/layer1.0"
    t = _conv_bn(g, y, s, "conv1", "bn1", 16, 16, 3, relu="relu", param="layer1.0")
    t = _conv_bn(g, t, s, "conv2", "bn2", 16, 16, 3, param="layer1.0")
    t = g.node("Add", [t, y], f"{s}/Add")
    y = g.node("Relu", [t], f"{s}/relu_1/Relu")
    y = g.node("Dropout", [y], f"{s}/dropout/Dropout")  # inference form, no ratio input
    # layer2.0: BasicBlock with strided 1x1 downsample shortcut
    s = "/layer2/layer2.0"
    t = _conv_bn(g, y, s, "conv1", "bn1", 16, 32, 3, stride=2, relu="relu", param="layer2.0")
    t = _conv_bn(g, t, s, "conv2", "bn2", 32, 32, 3, param="layer2.0")
    d = _conv_bn(g, y, f"{s}/downsample", "downsample.0", "downsample.1", 16, 32, 1, stride=2, param="layer2.0")
    t = g.node("Add", [t, d], f"{s}/Add")
    y = g.node("Relu", [t], f"{s}/relu_1/Relu")
    # layer3.0: plain conv block
    y = _conv_bn(g, y, "/layer3/layer3.0", "conv1", "bn1", 32, 32, 3, relu="relu", param="layer3.0")
    y = g.node("GlobalAveragePool", [y], "/avgpool/GlobalAveragePool")
    # x = x.view(x.size(0), -1)
    shape = g.node("Shape", [y], "/Shape")
    idx = g.const("", _scalar(0, np.int64))
    n = g.node("Gather", [shape, idx], "/Gather", axis=0)
    axes = g.const("", np.array([0], dtype=np.int64))
    n = g.node("Unsqueeze", [n, axes], "/Unsqueeze")
    minus1 = g.const("", np.array([-1], dtype=np.int64))
    new_shape = g.node("Concat", [n, minus1], "/Concat", axis=0)
    y = g.node("Reshape", [y, new_shape], "/Reshape", allowzero=0)
    ratio = g.init("dropout.ratio", _scalar(0.2, np.float32))
    y = g.node("Dropout", [y, ratio], "/dropout/Dropout")  # inference form, ratio input
    y = g.node("Identity", [y], "/Identity_1")
    return _logits_head(g, y, "fc", "/fc/Gemm", _CNN_UNFUSED_DOC)


# ------------------------------------------------------------- 2. mobilenet_like


def build_mobilenet_like() -> onnx.ModelProto:
    """MobileNetV2/V3-flavoured net (BN already folded into conv biases)."""
    g = _Graph(seed=1002)
    relu6_min = g.init("onnx::Clip_min", _scalar(0.0, np.float32))
    relu6_max = g.init("onnx::Clip_max", _scalar(6.0, np.float32))

    def conv(x: str, scope: str, param: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1) -> str:
        fan_in = (cin // group) * k * k
        w = g.init(f"{param}.weight", g.he((cout, cin // group, k, k), fan_in))
        b = g.init(f"{param}.bias", g.normal((cout,), 0.05))
        return g.node(
            "Conv",
            [x, w, b],
            f"{scope}/Conv",
            dilations=[1, 1],
            group=group,
            kernel_shape=[k, k],
            pads=[k // 2] * 4,
            strides=[stride, stride],
        )

    def act(x: str, scope: str, kind: str) -> str:
        if kind == "relu6":
            return g.node("Clip", [x, relu6_min, relu6_max], f"{scope}/Clip")
        return g.node("HardSwish", [x], f"{scope}/HardSwish")

    def inverted_residual(x: str, idx: int, cin: int, cout: int, expand: int, stride: int, kind: str) -> str:
        s = f"/features/features.{idx}/conv"
        p = f"features.{idx}.conv"
        hid = cin * expand
        y = conv(x, f"{s}/conv.0/conv.0.0", f"{p}.0.0", cin, hid, 1)
        y = act(y, f"{s}/conv.0/conv.0.2", kind)
        y = conv(y, f"{s}/conv.1/conv.1.0", f"{p}.1.0", hid, hid, 3, stride=stride, group=hid)  # depthwise
        y = act(y, f"{s}/conv.1/conv.1.2", kind)
        y = conv(y, f"{s}/conv.2", f"{p}.2", hid, cout, 1)  # linear bottleneck
        if stride == 1 and cin == cout:
            y = g.node("Add", [x, y], f"/features/features.{idx}/Add")
        return y

    y = conv("input", "/features/features.0/features.0.0", "features.0.0", 3, 16, 3, stride=2)
    y = act(y, "/features/features.0/features.0.2", "hardswish")
    y = inverted_residual(y, 1, 16, 16, 4, 1, "relu6")
    y = inverted_residual(y, 2, 16, 24, 4, 2, "relu6")
    y = inverted_residual(y, 3, 24, 24, 4, 1, "hardswish")
    y = conv(y, "/features/features.4/features.4.0", "features.4.0", 24, 96, 1)
    y = act(y, "/features/features.4/features.4.2", "hardswish")
    y = g.node("GlobalAveragePool", [y], "/avgpool/GlobalAveragePool")
    y = g.node("Flatten", [y], "/Flatten", axis=1)
    w = g.init("classifier.0.weight", g.he((32, 96), 96))
    b = g.init("classifier.0.bias", g.normal((32,), 0.05))
    y = g.node("Gemm", [y, w, b], "/classifier/classifier.0/Gemm", alpha=1.0, beta=1.0, transB=1)
    y = g.node("HardSwish", [y], "/classifier/classifier.1/HardSwish")
    return _logits_head(g, y, "classifier.3", "/classifier/classifier.3/Gemm", _MOBILENET_DOC)


# ---------------------------------------------------------- 3. transformer_block

VOCAB_SIZE = 1000
EMBED_SIZE = 8  # ALBERT-style factorized embedding keeps the file small
HIDDEN = 64
HEADS = 4
FFN = 256
MAX_POSITIONS = 64


def _layer_norm(g: _Graph, x: str, scope: str, param: str, dim: int) -> str:
    """LayerNorm decomposed exactly as the PyTorch exporter emits it at opset < 17."""
    mean = g.node("ReduceMean", [x], f"{scope}/ReduceMean", axes=[-1], keepdims=1)
    d = g.node("Sub", [x, mean], f"{scope}/Sub")
    two = g.const(scope, _scalar(2.0, np.float32))
    sq = g.node("Pow", [d, two], f"{scope}/Pow")
    var = g.node("ReduceMean", [sq], f"{scope}/ReduceMean_1", axes=[-1], keepdims=1)
    eps = g.const(scope, _scalar(1e-12, np.float32))
    var = g.node("Add", [var, eps], f"{scope}/Add")
    std = g.node("Sqrt", [var], f"{scope}/Sqrt")
    y = g.node("Div", [d, std], f"{scope}/Div")
    w = g.init(f"{param}.weight", g.normal((dim,), 0.05, mean=1.0))
    b = g.init(f"{param}.bias", g.normal((dim,), 0.02))
    y = g.node("Mul", [y, w], f"{scope}/Mul")
    return g.node("Add", [y, b], f"{scope}/Add_1")


def _linear(g: _Graph, x: str, scope: str, param: str, fan_in: int, fan_out: int, std: float | None = None) -> str:
    """nn.Linear exported as MatMul (pre-transposed weight) + Add."""
    std = std if std is not None else 1.0 / math.sqrt(fan_in)
    w = g.init(f"onnx::MatMul_{param}", g.normal((fan_in, fan_out), std))
    b = g.init(f"{param}.bias", g.normal((fan_out,), 0.02))
    y = g.node("MatMul", [x, w], f"{scope}/MatMul")
    return g.node("Add", [b, y], f"{scope}/Add")


def build_transformer_block() -> onnx.ModelProto:
    """ALBERT/BERT-like encoder with one fully decomposed layer."""
    g = _Graph(seed=1003)
    head_dim = HIDDEN // HEADS

    # ---- embeddings (dynamic batch and sequence, no Range)
    s = "/embeddings"
    word = g.init("embeddings.word_embeddings.weight", g.normal((VOCAB_SIZE, EMBED_SIZE), 1.0))
    h = g.node("Gather", [word, "input_ids"], f"{s}/word_embeddings/Gather", axis=0)
    shape = g.node("Shape", ["input_ids"], f"{s}/Shape")
    one = g.const(s, _scalar(1, np.int64))
    seq = g.node("Gather", [shape, one], f"{s}/Gather", axis=0)
    seq = g.node("Unsqueeze", [seq, g.const(s, np.array([0], dtype=np.int64))], f"{s}/Unsqueeze")
    pos_ids = g.init("embeddings.position_ids", np.arange(MAX_POSITIONS, dtype=np.int64)[None, :])
    pos_ids = g.node(
        "Slice",
        [pos_ids, g.const(s, np.array([0], dtype=np.int64)), seq, g.const(s, np.array([1], dtype=np.int64))],
        f"{s}/Slice",
    )
    pos_tab = g.init("embeddings.position_embeddings.weight", g.normal((MAX_POSITIONS, EMBED_SIZE), 0.5))
    pos = g.node("Gather", [pos_tab, pos_ids], f"{s}/position_embeddings/Gather", axis=0)
    h = g.node("Add", [h, pos], f"{s}/Add")
    h = _layer_norm(g, h, f"{s}/LayerNorm", "embeddings.LayerNorm", EMBED_SIZE)
    h = _linear(g, h, "/encoder/embedding_hidden_mapping_in", "encoder.embedding_hidden_mapping_in", EMBED_SIZE, HIDDEN)

    # ---- extended attention mask: (1 - mask[:, None, None, :]) * -10000
    m = g.node("Unsqueeze", ["attention_mask", g.const("", np.array([1], dtype=np.int64))], "/Unsqueeze")
    m = g.node("Unsqueeze", [m, g.const("", np.array([2], dtype=np.int64))], "/Unsqueeze_1")
    m = g.node("Cast", [m], "/Cast", to=F32)
    m = g.node("Sub", [g.const("", _scalar(1.0, np.float32)), m], "/Sub")
    mask = g.node("Mul", [m, g.const("", _scalar(-10000.0, np.float32))], "/Mul")

    # ---- encoder layer 0
    L = "/encoder/layer.0"
    P = "encoder.layer.0"
    a = f"{L}/attention/self"
    heads_shape = g.const(a, np.array([0, 0, HEADS, head_dim], dtype=np.int64))

    def to_heads(t: str, tag: str, perm: list[int]) -> str:
        t = g.node("Reshape", [t, heads_shape], f"{a}/Reshape{tag}", allowzero=0)
        return g.node("Transpose", [t], f"{a}/Transpose{tag}", perm=perm)

    q = _linear(g, h, f"{a}/query", f"{P}.attention.self.query", HIDDEN, HIDDEN)
    k = _linear(g, h, f"{a}/key", f"{P}.attention.self.key", HIDDEN, HIDDEN)
    v = _linear(g, h, f"{a}/value", f"{P}.attention.self.value", HIDDEN, HIDDEN)
    q = to_heads(q, "", [0, 2, 1, 3])
    k = to_heads(k, "_1", [0, 2, 3, 1])  # K^T directly, as the exporter folds transpose(-1,-2)
    v = to_heads(v, "_2", [0, 2, 1, 3])
    scores = g.node("MatMul", [q, k], f"{a}/MatMul")
    scores = g.node("Div", [scores, g.const(a, _scalar(math.sqrt(head_dim), np.float32))], f"{a}/Div")
    scores = g.node("Add", [scores, mask], f"{a}/Add")
    probs = g.node("Softmax", [scores], f"{a}/Softmax", axis=-1)
    ctx = g.node("MatMul", [probs, v], f"{a}/MatMul_1")
    ctx = g.node("Transpose", [ctx], f"{a}/Transpose_3", perm=[0, 2, 1, 3])
    ctx = g.node("Reshape", [ctx, g.const(a, np.array([0, 0, HIDDEN], dtype=np.int64))], f"{a}/Reshape_3", allowzero=0)
    o = f"{L}/attention/output"
    t = _linear(g, ctx, f"{o}/dense", f"{P}.attention.output.dense", HIDDEN, HIDDEN)
    t = g.node("Add", [t, h], f"{o}/Add")
    h = _layer_norm(g, t, f"{o}/LayerNorm", f"{P}.attention.output.LayerNorm", HIDDEN)

    # feed-forward with erf-GELU: x * 0.5 * (1 + erf(x / sqrt(2)))
    i = f"{L}/intermediate"
    t = _linear(g, h, f"{i}/dense", f"{P}.intermediate.dense", HIDDEN, FFN)
    ga = f"{i}/intermediate_act_fn"
    e = g.node("Div", [t, g.const(ga, _scalar(math.sqrt(2.0), np.float32))], f"{ga}/Div")
    e = g.node("Erf", [e], f"{ga}/Erf")
    e = g.node("Add", [e, g.const(ga, _scalar(1.0, np.float32))], f"{ga}/Add")
    e = g.node("Mul", [t, e], f"{ga}/Mul")
    t = g.node("Mul", [e, g.const(ga, _scalar(0.5, np.float32))], f"{ga}/Mul_1")
    o = f"{L}/output"
    t = _linear(g, t, f"{o}/dense", f"{P}.output.dense", FFN, HIDDEN)
    t = g.node("Add", [t, h], f"{o}/Add")
    h = _layer_norm(g, t, f"{o}/LayerNorm", f"{P}.output.LayerNorm", HIDDEN)
    g.node("Identity", [h], "/encoder/Identity", outputs=["last_hidden_state"])

    graph = g.graph(
        "main_graph",
        [_vi("input_ids", I64, ["batch", "sequence"]), _vi("attention_mask", I64, ["batch", "sequence"])],
        [_vi("last_hidden_state", F32, ["batch", "sequence", HIDDEN])],
    )
    return _model(
        graph,
        17,
        f"BERT/ALBERT-like encoder (vocab {VOCAB_SIZE}, factorized embedding {EMBED_SIZE} -> hidden {HIDDEN}, "
        f"{HEADS} heads, FFN {FFN}, max {MAX_POSITIONS} positions) with one layer written out op by op: "
        "Q/K/V MatMuls, head Reshape/Transpose, scaled dot-product with additive mask and Softmax, decomposed "
        "LayerNorm (ReduceMean/Sub/Pow/Sqrt/Div) and erf-GELU. Dynamic batch and sequence; position ids come "
        "from a Shape->Gather->Slice of a position_ids buffer (no Range).",
    )


# ------------------------------------------------------- 4/6/7. GridSample family

_GRID_DOC_TAIL = "Input [1,3,16,16] and grid [1,8,8,2] (normalized xy in [-1,1]) -> output [1,4,8,8]."

# variant -> (op type, domain, attributes, doc): the same bilinear/zeros/align_corners=0 sampler in three spellings.
_GRID_VARIANTS: dict[str, tuple[str, str, dict[str, int | str], str]] = {
    "onnx": ("GridSample", "", {"align_corners": 0, "mode": "bilinear", "padding_mode": "zeros"},
             "Conv+Relu followed by a standard ai.onnx GridSample (mode=bilinear, padding_mode=zeros, align_corners=0). "),
    "mmdeploy": ("grid_sampler", "mmdeploy", {"interpolation_mode": 0, "padding_mode": 0, "align_corners": 0},
                 "Conv+Relu followed by mmdeploy's custom mmdeploy::grid_sampler (interpolation_mode=0 bilinear, "
                 "padding_mode=0 zeros, align_corners=0) as exported by mmdeploy; ONNX Runtime has no kernel for it. "),
    "com.microsoft": ("GridSample", "com.microsoft", {"align_corners": 0, "mode": "bilinear", "padding_mode": "zeros"},
                      "Conv+Relu followed by the ONNX Runtime contrib op com.microsoft::GridSample (bilinear, zeros, "
                      "align_corners=0). "),
}


def _gridsample_net(variant: str) -> onnx.ModelProto:
    g = _Graph(seed=1004)  # same seed: identical weights across the three variants
    w = g.init("conv.weight", g.he((4, 3, 3, 3), 27))
    b = g.init("conv.bias", g.normal((4,), 0.05))
    y = g.node("Conv", ["input", w, b], "/conv/Conv", dilations=[1, 1], group=1, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
    y = g.node("Relu", [y], "/relu/Relu")
    if variant not in _GRID_VARIANTS:  # pragma: no cover
        raise ValueError(variant)
    op, domain, attrs, doc = _GRID_VARIANTS[variant]
    g.node(op, [y, "grid"], f"/{op}", outputs=["output"], domain=domain, **attrs)
    extra = [(domain, 1)] if domain else []
    graph = g.graph(
        "main_graph",
        [_vi("input", F32, [1, 3, 16, 16]), _vi("grid", F32, [1, 8, 8, 2])],
        [_vi("output", F32, [1, 4, 8, 8])],
    )
    return _model(graph, 16, doc + _GRID_DOC_TAIL, extra_opsets=extra)


def build_gridsample_4d() -> onnx.ModelProto:
    return _gridsample_net("onnx")


def build_mmdeploy_grid_sampler() -> onnx.ModelProto:
    return _gridsample_net("mmdeploy")


def build_com_microsoft_gridsample() -> onnx.ModelProto:
    return _gridsample_net("com.microsoft")


# -------------------------------------------------------------- 5. gridsample_5d


def build_gridsample_5d() -> onnx.ModelProto:
    g = _Graph(seed=1005)
    w = g.init("conv.weight", g.he((2, 2, 3, 3, 3), 54))
    b = g.init("conv.bias", g.normal((2,), 0.05))
    y = g.node(
        "Conv",
        ["input", w, b],
        "/conv/Conv",
        dilations=[1, 1, 1],
        group=1,
        kernel_shape=[3, 3, 3],
        pads=[1, 1, 1, 1, 1, 1],
        strides=[1, 1, 1],
    )
    y = g.node("Relu", [y], "/relu/Relu")
    g.node("GridSample", [y, "grid"], "/GridSample", outputs=["output"], align_corners=0, mode="linear", padding_mode="zeros")
    graph = g.graph(
        "main_graph",
        [_vi("input", F32, [1, 2, 4, 8, 8]), _vi("grid", F32, [1, 4, 4, 4, 3])],
        [_vi("output", F32, [1, 2, 4, 4, 4])],
    )
    return _model(
        graph,
        20,
        "Conv3d+Relu followed by a volumetric (5-D) GridSample using the opset-20 mode names "
        "(mode=linear, padding_mode=zeros, align_corners=0). Input [1,2,4,8,8] and grid [1,4,4,4,3] "
        "(normalized xyz) -> output [1,2,4,4,4].",
        ir_version=9,
    )


# -------------------------------------------------------------------- 8. if_loop

IF_LOOP_FEATURES = 16
IF_LOOP_TRIPS = 3


def build_if_loop() -> onnx.ModelProto:
    g = _Graph(seed=1008)
    n = IF_LOOP_FEATURES
    std = 1.0 / math.sqrt(n)
    w_then = g.init("then_fc.weight", g.he((n, n), n))
    b_then = g.init("then_fc.bias", g.normal((n,), 0.05))
    w_else = g.init("else_fc.weight", g.normal((n, n), std))
    b_else = g.init("else_fc.bias", g.normal((n,), 0.05))
    w_loop = g.init("cell.weight", g.normal((n, n), std))
    b_loop = g.init("cell.bias", g.normal((n,), 0.05))
    g.init("trip_count", _scalar(IF_LOOP_TRIPS, np.int64))
    g.init("loop_cond", _scalar(True, np.bool_))
    g.init("two", _scalar(2, np.int64))
    g.init("zero_i64", _scalar(0, np.int64))

    # condition computed from the data: sum(input) > 0
    total = g.node("ReduceSum", ["input"], "/ReduceSum", keepdims=0)
    cond = g.node("Greater", [total, g.const("", _scalar(0.0, np.float32))], "/Greater")

    # then: Relu(x @ W_then + b_then)  (x, W, b are outer-scope values)
    tb = _Graph(seed=0)
    t = tb.node("MatMul", ["input", w_then], "/If/then/fc/MatMul")
    t = tb.node("Add", [t, b_then], "/If/then/fc/Add")
    tb.node("Relu", [t], "/If/then/Relu", outputs=["/If/then/Relu_output_0"])
    then_g = tb.graph("then_branch", [], [_vi("/If/then/Relu_output_0", F32, ["batch", n])])
    # else: Relu(-(x @ W_else) + b_else)
    eb = _Graph(seed=0)
    e = eb.node("MatMul", ["input", w_else], "/If/else/fc/MatMul")
    e = eb.node("Neg", [e], "/If/else/Neg")
    e = eb.node("Add", [e, b_else], "/If/else/fc/Add")
    eb.node("Relu", [e], "/If/else/Relu", outputs=["/If/else/Relu_output_0"])
    else_g = eb.graph("else_branch", [], [_vi("/If/else/Relu_output_0", F32, ["batch", n])])
    h0 = g.node("If", [cond], "/If", then_branch=then_g, else_branch=else_g)

    # Loop body: h' = h + (iter even ? Relu : Tanh)(h @ W + b); scan output h'
    lb = _Graph(seed=0)
    t = lb.node("MatMul", ["h_in", w_loop], "/Loop/body/cell/MatMul")
    t = lb.node("Add", [t, b_loop], "/Loop/body/cell/Add")
    parity = lb.node("Mod", ["iter_num", "two"], "/Loop/body/Mod", fmod=0)
    even = lb.node("Equal", [parity, "zero_i64"], "/Loop/body/Equal")
    ib_then = _Graph(seed=0)
    ib_then.node("Relu", [t], "/Loop/body/If/then/Relu", outputs=["/Loop/body/If/then/Relu_output_0"])
    ib_else = _Graph(seed=0)
    ib_else.node("Tanh", [t], "/Loop/body/If/else/Tanh", outputs=["/Loop/body/If/else/Tanh_output_0"])
    inner_if = lb.node(
        "If",
        [even],
        "/Loop/body/If",
        then_branch=ib_then.graph("then_branch", [], [_vi("/Loop/body/If/then/Relu_output_0", F32, ["batch", n])]),
        else_branch=ib_else.graph("else_branch", [], [_vi("/Loop/body/If/else/Tanh_output_0", F32, ["batch", n])]),
    )
    lb.node("Add", ["h_in", inner_if], "/Loop/body/Add", outputs=["h_out"])
    lb.node("Identity", ["h_out"], "/Loop/body/Identity", outputs=["scan_out"])
    lb.node("Identity", ["cond_in"], "/Loop/body/Identity_1", outputs=["cond_out"])
    body = lb.graph(
        "loop_body",
        [_vi("iter_num", I64, []), _vi("cond_in", BOOL, []), _vi("h_in", F32, ["batch", n])],
        [_vi("cond_out", BOOL, []), _vi("h_out", F32, ["batch", n]), _vi("scan_out", F32, ["batch", n])],
    )
    g.node("Loop", ["trip_count", "loop_cond", h0], "/Loop", outputs=["output", "trace"], body=body)

    graph = g.graph(
        "main_graph",
        [_vi("input", F32, ["batch", n])],
        [_vi("output", F32, ["batch", n]), _vi("trace", F32, [IF_LOOP_TRIPS, "batch", n])],
    )
    return _model(
        graph,
        17,
        "Control-flow sample whose work sits in subgraphs: an If on sum(input) > 0 with MatMul+Add+Relu "
        "branches that read outer-scope initializers, then a Loop (trip count 3) carrying a hidden state "
        "h <- h + act(h @ W + b) with a scan output, where act is chosen by an If nested in the loop body "
        f"(Relu on even iterations, Tanh on odd ones). Input [batch,{n}] -> output [batch,{n}] and "
        f"trace [{IF_LOOP_TRIPS},batch,{n}].",
    )


# -------------------------------------------------------------- 9. external_data

EXTERNAL_DATA_FILE = "external_data.onnx.data"


def build_external_data() -> onnx.ModelProto:
    """MLP; the weights are moved to ``external_data.onnx.data`` when saved."""
    g = _Graph(seed=1009)
    dims = [128, 128, 128, 10]
    y = "input"
    for i, (fi, fo) in enumerate(zip(dims[:-1], dims[1:])):
        s = f"/net/net.{2 * i}"
        w = g.init(f"onnx::MatMul_net.{2 * i}", g.he((fi, fo), fi))
        b = g.init(f"net.{2 * i}.bias", g.normal((fo,), 0.05))
        y = g.node("MatMul", [y, w], f"{s}/MatMul")
        last = i == len(dims) - 2
        y = g.node("Add", [b, y], f"{s}/Add", outputs=["output"] if last else None)
        if not last:
            y = g.node("Relu", [y], f"/net/net.{2 * i + 1}/Relu")
    graph = g.graph("main_graph", [_vi("input", F32, ["batch", 128])], [_vi("output", F32, ["batch", 10])])
    return _model(
        graph,
        17,
        "Three-layer MLP (128 -> 128 -> 128 -> 10, MatMul/Add/Relu) whose weight tensors are stored in the "
        f"external-data file {EXTERNAL_DATA_FILE} (tensors >= {EXTERNAL_DATA_THRESHOLD} bytes); small biases stay inline.",
    )


# ----------------------------------------------------------- 10. constant_weights


def build_constant_weights() -> onnx.ModelProto:
    """Small CNN whose parameters are Constant nodes (no initializers at all)."""
    g = _Graph(seed=1010)

    def conv(x: str, scope: str, cin: int, cout: int, stride: int) -> str:
        w = g.const(scope, g.he((cout, cin, 3, 3), cin * 9))
        b = g.const(scope, g.normal((cout,), 0.05))
        return g.node("Conv", [x, w, b], f"{scope}/Conv", dilations=[1, 1], group=1, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[stride, stride])

    y = conv("input", "/conv1", 3, 8, 1)
    y = g.node("Relu", [y], "/relu1/Relu")
    y = conv(y, "/conv2", 8, 16, 2)
    y = g.node("Relu", [y], "/relu2/Relu")
    y = g.node("GlobalAveragePool", [y], "/pool/GlobalAveragePool")
    y = g.node("Flatten", [y], "/Flatten", axis=1)
    w = g.const("/fc", g.normal((16, 10), 1.0 / math.sqrt(16)))
    b = g.const("/fc", g.normal((10,), 0.05))
    y = g.node("MatMul", [y, w], "/fc/MatMul")
    g.node("Add", [y, b], "/fc/Add", outputs=["logits"])
    graph = g.graph("main_graph", [_vi("input", F32, ["batch", 3, 16, 16])], [_vi("logits", F32, ["batch", 10])])
    assert not graph.initializer
    return _model(
        graph,
        17,
        "Small CNN (Conv/Relu x2, GlobalAveragePool, Flatten, MatMul+Add) whose weights and biases are all "
        "Constant nodes instead of initializers, as some exporters emit. Input [batch,3,16,16] -> logits [batch,10].",
    )


# ----------------------------------------------------------------------- driver

BUILDERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "cnn_unfused": build_cnn_unfused,
    "mobilenet_like": build_mobilenet_like,
    "transformer_block": build_transformer_block,
    "gridsample_4d": build_gridsample_4d,
    "gridsample_5d": build_gridsample_5d,
    "mmdeploy_grid_sampler": build_mmdeploy_grid_sampler,
    "com_microsoft_gridsample": build_com_microsoft_gridsample,
    "if_loop": build_if_loop,
    "external_data": build_external_data,
    "constant_weights": build_constant_weights,
    "yolo_detector": build_yolo_detector,
    "image_classifier": build_image_classifier,
    "caffe_classifier": build_caffe_classifier,
    "imagenet_classifier": build_imagenet_classifier,
    "digits_classifier": build_digits_classifier,
    "gpt2_decoder": build_gpt2_decoder,
    "gpt2_decoder_with_past": build_gpt2_with_past,
    "gpt2_decoder_merged": build_gpt2_merged,
    "llama_optimum": build_llama_optimum,
    "llama_genai": build_llama_genai,
    "char_gpt2_decoder": build_char_gpt2,
}
RECIPES: dict[str, dict] = {"caffe_classifier": CAFFE_RECIPE}
# Text side files by sample (file name -> writer), in the catalog entry's side_files order.
SIDE_FILES: dict[str, dict[str, Callable[[], str]]] = {
    "char_gpt2_decoder": {"char_gpt2_decoder.tokenizer.json": tokenizer_json,
                          "char_gpt2_decoder.heldout.txt": heldout_text},
    "digits_classifier": {GOLDEN_FILE: golden_jsonl},
}
assert tuple(BUILDERS) == tuple(m.name for m in ALL_SAMPLES), "BUILDERS must follow the catalog order"


def build_model(name: str) -> onnx.ModelProto:
    """Build the in-memory model for ``name`` (external-data tensors still inline)."""
    get(name)  # validates the name
    return BUILDERS[name]()


def _save(name: str, model: onnx.ModelProto, out_dir: pathlib.Path) -> list[pathlib.Path]:
    entry = get(name)
    path = out_dir / entry.filename
    recipe = []
    if entry.recipe_file:
        recipe = [out_dir / entry.recipe_file]
        recipe[0].write_text(json.dumps(RECIPES[name], indent=1) + "\n", encoding="utf-8")
    assert tuple(SIDE_FILES.get(name, {})) == entry.side_files, name
    for side, write in SIDE_FILES.get(name, {}).items():
        recipe.append(out_dir / side)
        recipe[-1].write_text(write(), encoding="utf-8")
    if entry.extra_files:
        (data_file,) = entry.extra_files
        data_path = out_dir / data_file
        # onnx appends to an existing data file; start from scratch for identical bytes.
        data_path.unlink(missing_ok=True)
        onnx.save_model(
            model,
            str(path),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=data_file,
            size_threshold=EXTERNAL_DATA_THRESHOLD,
        )
        data_path.chmod(0o644)  # onnx creates the data file 0600
        return [path, data_path, *recipe]
    path.write_bytes(model.SerializeToString())
    return [path, *recipe]


def build_all(out_dir: pathlib.Path | str, names: Iterable[str] | None = None) -> list[pathlib.Path]:
    """Build the named samples (all by default) into ``out_dir``, overwriting; returns written paths."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    selected = list(names) if names is not None else [m.name for m in ALL_SAMPLES]
    written: list[pathlib.Path] = []
    for name in selected:
        written.extend(_save(name, build_model(name), out_dir))
    return written


def _missing(out_dir: pathlib.Path) -> list[str]:
    return [m.name for m in ALL_SAMPLES if any(not (out_dir / f).exists() for f in m.files)]


def check(out_dir: pathlib.Path, names: Iterable[str] | None = None) -> list[str]:
    """Return the files in ``out_dir`` that are missing or differ from a fresh build."""
    selected = list(names) if names is not None else [m.name for m in ALL_SAMPLES]
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="onnx-studio-samples-") as tmp:
        tmp_dir = pathlib.Path(tmp)
        build_all(tmp_dir, selected)
        for name in selected:
            for f in get(name).files:
                committed = out_dir / f
                if not committed.exists():
                    problems.append(f"{f}: missing")
                elif committed.read_bytes() != (tmp_dir / f).read_bytes():
                    problems.append(f"{f}: differs from a fresh build")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sample_models.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="sample names (default: all)")
    parser.add_argument("--out", type=pathlib.Path, default=SAMPLE_DIR, help="output directory (default: %(default)s)")
    parser.add_argument("--force", action="store_true", help="rebuild every selected file")
    parser.add_argument("--check", action="store_true", help="build into a temp dir and fail if committed files differ")
    parser.add_argument("--large-decoder", type=pathlib.Path, metavar="DIR",
                        help="instead: write the ~1.1 G-parameter LLaMA-shaped decoder (4.4 GB of external data, "
                             "streamed) into DIR, for benchmarks; not a catalog sample")
    parser.add_argument("--large-convention", choices=("genai", "optimum"), default="genai",
                        help="with --large-decoder: the export convention (default: %(default)s)")
    parser.add_argument("--large-fill", choices=("random", "zeros"), default="random",
                        help="with --large-decoder: random weights, or a sparse all-zero data file (instant)")
    args = parser.parse_args(argv)
    if args.large_decoder is not None:
        path = write_large_decoder(args.large_decoder, convention=args.large_convention, fill=args.large_fill)
        print(f"wrote {path} and {path.name}.data ({(path.parent / (path.name + '.data')).stat().st_size} bytes)")
        return 0
    try:
        for n in args.names:
            get(n)
    except KeyError as exc:
        parser.error(str(exc.args[0]))
    names = args.names or [m.name for m in ALL_SAMPLES]

    if args.check:
        problems = check(args.out, names)
        for p in problems:
            print(f"MISMATCH {p}", file=sys.stderr)
        if problems:
            print("run `python -m sample_models.build --force` and commit the result", file=sys.stderr)
            return 1
        print(f"ok: {len(names)} sample model(s) up to date in {args.out}")
        return 0

    todo = names if args.force else [n for n in _missing(args.out) if n in names]
    for path in build_all(args.out, todo):
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    if not todo:
        print("nothing to do (all files present; use --force to rebuild)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
