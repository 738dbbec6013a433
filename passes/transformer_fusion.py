"""ONNX Runtime's transformer fusions, once: which model type a graph is, and running
``onnxruntime.transformers.optimizer.optimize_model`` on a file with ``FusionOptions``.

Used by the ``fuse-transformers`` pass and by ``quantize-int8-dynamic`` (which fuses before
quantizing), so the two never disagree on what "fused" means. ORT picks its fusions by
``model_type`` and otherwise guesses from the producer name ("pytorch"), which says nothing about
the graph; here the type is read from the graph (KV-cache decoder -> gpt2, image input into a Conv
-> vit, else bert) or given. What counts as fused is what the optimizer's own statistics
(``get_fused_operator_statistics``) count *beyond* the input's op counts: a graph that already had
``LayerNormalization`` has not been fused again.

Imports ``onnxruntime``: call it where engines run (a sandbox worker).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError

log = logging.getLogger(__name__)

MODEL_TYPES = ("auto", "bert", "bart", "gpt2", "gpt_neox", "phi", "t5", "vit", "swin", "clip", "unet", "vae",
               "conformer", "tnlr", "sam2", "mmdit")
# FusionOptions switches a user may turn off (``disable``), by their FusionOptions name without "enable_".
SWITCHES = ("gelu", "layer_norm", "attention", "rotary_embeddings", "skip_layer_norm", "embed_layer_norm",
            "bias_skip_layer_norm", "bias_gelu", "gelu_approximation", "gemm_fast_gelu")
# Switches that change numerics beyond float rounding (tanh GELU approximation): off unless enabled.
_OFF_BY_DEFAULT = ("gelu_approximation", "gemm_fast_gelu")
# Ops that only exist after ORT's fusions (com.microsoft): a graph holding one runs on ORT only.
CONTRIB_FUSED = frozenset({"Attention", "MultiHeadAttention", "GroupQueryAttention", "SkipLayerNormalization",
                           "SkipSimplifiedLayerNormalization", "BiasGelu", "FastGelu", "QuickGelu",
                           "EmbedLayerNormalization", "SimplifiedLayerNormalization", "RotaryEmbedding",
                           "BiasSplitGelu", "BiasAdd", "GroupNorm", "SkipGroupNorm", "PackedAttention",
                           "PackedMultiHeadAttention"})


@dataclass(frozen=True)
class ModelType:
    name: str | None           # an ORT model type, or None: no transformer pattern
    reason: str


@dataclass(frozen=True)
class Fusion:
    """What the optimizer did to one file. ``path`` is None when it fused nothing new."""

    path: Path | None
    model_type: str
    type_reason: str
    statistics: dict[str, int]                 # get_fused_operator_statistics(), non-zero entries
    fused: dict[str, int]                      # op -> how many the fusions added (statistics - input)
    switches: dict[str, bool] = field(default_factory=dict)
    note: str = ""

    def to_dict(self) -> dict:
        return {"model_type": self.model_type, "model_type_reason": self.type_reason,
                "statistics": dict(self.statistics), "fused": dict(self.fused), "fusion_options": dict(self.switches),
                **({"note": self.note} if self.note else {})}


def _ops(graph: onnx.GraphProto) -> Counter:
    return Counter(n.op_type for n in graph.node)


def detect_model_type(model: onnx.ModelProto) -> ModelType:
    """The ORT ``model_type`` whose fusions fit this graph, read from its I/O and ops (no weights)."""
    ops = _ops(model.graph)
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    names = " ".join(i.name.lower() for i in inputs) + " " + " ".join(o.name.lower() for o in model.graph.output)
    if ops.keys() & {"GroupQueryAttention", "RotaryEmbedding"} or "past" in names or "present" in names:
        return ModelType("gpt2", "a KV-cache decoder (past/present I/O or GroupQueryAttention): gpt2-style "
                                 "fusions, which ORT also uses for llama-style graphs")
    attention = ops["Softmax"] or ops.keys() & {"Attention", "MultiHeadAttention"}
    norm = ops["ReduceMean"] or ops.keys() & {"LayerNormalization", "SimplifiedLayerNormalization"}
    gelu = ops["Erf"] or ops["Tanh"] or ops.keys() & {"Gelu", "FastGelu", "BiasGelu"}
    if not (attention or norm or gelu):
        return ModelType(None, "no attention (Softmax), LayerNorm (ReduceMean) or GELU (Erf/Tanh) pattern")
    first = {n.op_type for n in model.graph.node if any(i.name in n.input for i in inputs)}
    image = any(len(i.type.tensor_type.shape.dim) == 4 and i.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
                for i in inputs)
    if image and "Conv" in first and attention:
        return ModelType("vit", "a 4-D float input into a Conv (patch embedding) and Softmax attention")
    if attention:
        return ModelType("bert", "Softmax attention without a KV cache: an encoder (bert-style fusions)")
    return ModelType("bert", "LayerNorm/GELU patterns without attention: bert-style fusions of those")


def is_transformer(model: onnx.ModelProto) -> bool:
    """Attention-bearing and MatMul-bound (more weighted MatMul/Gemm than Conv, and Softmax or a fused
    attention op): what NNCF's ``ModelType.TRANSFORMER`` is for. A CNN with a Softmax head is not."""
    ops = _ops(model.graph)
    inits = {t.name for t in model.graph.initializer}
    weighted = sum(1 for n in model.graph.node if n.op_type in ("MatMul", "Gemm") and any(i in inits for i in n.input))
    attention = ops["Softmax"] or ops.keys() & {"Attention", "MultiHeadAttention", "GroupQueryAttention"}
    return bool(attention) and (weighted > ops["Conv"] or bool(ops.keys() & {"Attention", "MultiHeadAttention"}))


def fusion_switches(disable: Iterable[str] = (), enable: Iterable[str] = ()) -> dict[str, bool]:
    """FusionOptions switches (name -> on) after the user's ``disable``/``enable`` lists."""
    disable, enable = set(disable), set(enable)
    bad = sorted((disable | enable) - set(SWITCHES))
    if bad:
        raise StudioError(f"unknown fusion {bad[0][:40]!r}; fusions: {', '.join(SWITCHES)}", code=ErrorCode.BAD_OPTION)
    return {s: (s in enable) or (s not in disable and s not in _OFF_BY_DEFAULT) for s in SWITCHES}


def _fusion_options(model_type: str, switches: Mapping[str, bool]):
    from onnxruntime.transformers.fusion_options import FusionOptions

    fo = FusionOptions(model_type)
    for name, on in switches.items():
        attr = f"enable_{name}"
        if hasattr(fo, attr):
            setattr(fo, attr, bool(on))
    return fo


def names_of(value) -> list[str]:
    """An option given as a list or a comma-separated string."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


def fuse_file(src: Path, out: Path, *, model_type: str = "auto", num_heads: int = 0, hidden_size: int = 0,
              disable: Iterable[str] = (), enable: Iterable[str] = ()) -> Fusion:
    """Run ORT's transformer optimizer (``opt_level=0``: its Python fusions only, no ORT graph
    optimizations baked in) on ``src``; the result goes to ``out`` when it fused anything new."""
    from onnxruntime.transformers.optimizer import optimize_model

    if model_type not in MODEL_TYPES:
        raise StudioError(f"model_type must be one of {', '.join(MODEL_TYPES)}", code=ErrorCode.BAD_OPTION)
    switches = fusion_switches(disable, enable)
    header = onnx.load_model(str(src), load_external_data=False)
    before = _ops(header.graph)
    if model_type == "auto":
        detected = detect_model_type(header)
        if detected.name is None:
            return Fusion(None, "none", detected.reason, {}, {}, switches,
                          f"no transformer pattern ({detected.reason}): nothing for ORT's transformer optimizer "
                          "to fuse; the model is unchanged")
        model_type, reason = detected.name, detected.reason
    else:
        reason = "given"
    already = contrib_fused_ops(header)
    del header
    m = optimize_model(str(src), model_type=model_type, num_heads=int(num_heads), hidden_size=int(hidden_size),
                       optimization_options=_fusion_options(model_type, switches), opt_level=0, use_gpu=False)
    stats = {k: int(v) for k, v in m.get_fused_operator_statistics().items() if v}
    undone = unfuse_onnx_domain_extensions(m.model)
    for op, n in undone.items():
        stats[op] = stats.get(op, 0) - n
    stats = {k: v for k, v in stats.items() if v > 0}
    fused = {k: v - before[k] for k, v in stats.items() if v > before[k]}
    if not fused:
        done = ", ".join(f"{n} {op}" for op, n in sorted(already.items()))
        return Fusion(None, model_type, reason, stats, {}, switches,
                      f"nothing new for ORT's {model_type} optimizer to fuse (already fused: {done}); the model is "
                      "unchanged" if already else
                      f"ORT's {model_type} optimizer found no transformer pattern to fuse "
                      f"(ops: {', '.join(sorted(before))[:200]}); the model is unchanged")
    out.parent.mkdir(parents=True, exist_ok=True)
    # scratch: worker: the pass's temporary folder
    m.save_model_to_file(str(out), use_external_data_format=m.model.ByteSize() > 1_800_000_000)
    note = (f"{', '.join(f'{n} {op}' for op, n in undone.items())} left decomposed: ONNX Runtime registers that op "
            "in the ONNX domain, where onnx.checker does not know it" if undone else "")
    return Fusion(out, model_type, reason, stats, fused, switches, note)


def unfuse_onnx_domain_extensions(model: onnx.ModelProto) -> dict[str, int]:
    """ORT's ``SimplifiedLayerNormalization`` (RMSNorm) sits in the *ONNX* domain, which onnx.checker
    refuses; a standalone one (not merged into com.microsoft SkipSimplifiedLayerNormalization) is
    written back as ``x / sqrt(mean(x^2) + eps) * gamma`` over the last axis. Returns op -> count."""
    from onnx import helper

    if onnx.defs.has("SimplifiedLayerNormalization", ""):
        return {}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    graph, done = model.graph, 0
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type != "SimplifiedLayerNormalization" or node.domain not in ("", "ai.onnx") \
                or int(attrs.get("axis", -1)) != -1 or len(node.output) != 1:
            nodes.append(node)
            continue
        x, gamma, y, p = node.input[0], node.input[1], node.output[0], f"{node.name or node.output[0]}/rms"
        eps = helper.make_tensor(f"{p}/eps", onnx.TensorProto.FLOAT, [], [float(attrs.get("epsilon", 1e-5))])
        graph.initializer.append(eps)
        mean = [helper.make_node("ReduceMean", [f"{p}/sq"], [f"{p}/mean"], f"{p}/ReduceMean", axes=[-1], keepdims=1)]
        if opset >= 18:
            graph.initializer.append(helper.make_tensor(f"{p}/axes", onnx.TensorProto.INT64, [1], [-1]))
            mean = [helper.make_node("ReduceMean", [f"{p}/sq", f"{p}/axes"], [f"{p}/mean"], f"{p}/ReduceMean",
                                     keepdims=1)]
        nodes += [helper.make_node("Mul", [x, x], [f"{p}/sq"], f"{p}/Square"), *mean,
                  helper.make_node("Add", [f"{p}/mean", f"{p}/eps"], [f"{p}/var"], f"{p}/AddEps"),
                  helper.make_node("Sqrt", [f"{p}/var"], [f"{p}/std"], f"{p}/Sqrt"),
                  helper.make_node("Div", [x, f"{p}/std"], [f"{p}/normed"], f"{p}/Div"),
                  helper.make_node("Mul", [f"{p}/normed", gamma], [y], f"{p}/Scale")]
        done += 1
    if done:
        del graph.node[:]
        graph.node.extend(nodes)
    return {"SimplifiedLayerNormalization": done} if done else {}


def contrib_fused_ops(model: onnx.ModelProto) -> dict[str, int]:
    """ORT-only fused ops already in ``model`` (it went through the fusions before)."""
    return {k: v for k, v in _ops(model.graph).items()
            if k in CONTRIB_FUSED and any(n.op_type == k and n.domain == "com.microsoft" for n in model.graph.node)}
