"""Recognize a KV-cache decoder and its export convention: ``recognize(model) -> DecoderSpec | None``.

Read from the graph's input/output names and shapes, attention-op attributes (GroupQueryAttention
``num_heads``/``kv_num_heads``, ONNX ``Attention``), initializer *shapes* and, when they sit beside the
model, ``genai_config.json`` / ``config.json``; never from weight values, so a model loaded without its
external data (or a 4 GB one) is recognized in milliseconds. Every later stage (feeds, the generation
loop, int4, profiling) takes the ``DecoderSpec``: which past input each present output feeds, the cache
layout and dtype, the sizes that make KV-cache bytes.

Conventions: ``optimum`` (plain ops, ``past_key_values.N.key/value`` -> ``present.N.key/value``),
``genai`` (onnxruntime-genai: com.microsoft GroupQueryAttention fed by the attention mask's row sums),
``merged-if`` (optimum's merged decoder: an ``If`` on ``use_cache_branch`` over the with-past and
no-past graphs) and ``onnx-attention`` (one attention layer with ``past_key``/``present_key``, as the
onnx backend tests' ``Attention`` cases).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto, helper

from studio.core.bounds import MAX_DIM, OutOfRange, bounded_int
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.types import Dim, dtype_name, value_info
from studio.inspect.decoder_cache import (CacheEntry, DecoderError, cache_entries, cache_io, cache_layout,
                                          check_cache, graph_inputs, is_single_layer, range_text, seq_dim,
                                          shape_str, short)
from studio.inspect.decoder_config import RuntimeConfig, genai_config, hf_config

__all__ = ["CONVENTIONS", "CacheEntry", "DecoderError", "DecoderSpec", "Fact", "RuntimeConfig", "kv_itemsize",
           "recognize"]

CONVENTIONS = ("optimum", "genai", "merged-if", "onnx-attention")
_PASS = frozenset({"Unsqueeze", "Expand", "Reshape", "Transpose", "Tile", "Identity", "Cast", "Squeeze", "Flatten"})
_ATTENTION_OPS = {("com.microsoft", "GroupQueryAttention"), ("com.microsoft", "MultiHeadAttention"),
                  ("com.microsoft", "Attention"), ("com.microsoft", "DecoderMaskedMultiHeadAttention"),
                  ("com.microsoft", "PagedAttention"), ("", "Attention"), ("ai.onnx", "Attention")}
_CONTEXT_KEYS = ("context_length", "max_position_embeddings", "n_positions", "n_ctx", "max_seq_len",
                 "max_sequence_length")
_KV_ITEMSIZE = {"float32": 4, "fp32": 4, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2, "int8": 1, "uint8": 1,
                "float8_e4m3fn": 1, "fp8": 1, "int4": 0.5}


@dataclass(frozen=True)
class Fact:
    """Where a fact came from (an I/O shape, an op attribute, an initializer's shape, a config file)."""

    name: str
    value: str
    source: str


@dataclass(frozen=True)
class DecoderSpec:
    convention: str                  # optimum | genai | merged-if | onnx-attention
    layers: int
    heads: int | None                # query heads (None when nothing in the graph says)
    kv_heads: int
    head_dim: int
    value_head_dim: int
    hidden: int | None
    vocab: int | None
    context: int | None              # positions the model can address
    kv_dtype: str
    cache: tuple[CacheEntry, ...]
    input_ids: str | None
    attention_mask: str | None
    position_ids: str | None
    use_cache_branch: str | None     # merged-if: the bool input choosing the with-past branch
    logits: str | None
    past_length_dim: Dim             # the past inputs' sequence dim (a name, or a fixed size)
    cache_layout: str                # "bnsh" [batch, kv_heads, seq, head_dim] | "bsnh"
    attention: str                   # GroupQueryAttention | MultiHeadAttention | Attention | decomposed
    positions: str                   # rotary | learned | unknown
    norm: str                        # RMSNorm | LayerNorm | unknown
    weights: str                     # "float32", "int4 MatMulNBits (block 16, 22 MatMuls)"...
    runtime: RuntimeConfig | None
    facts: tuple[Fact, ...]
    notes: tuple[str, ...] = ()

    @property
    def has_past(self) -> bool:
        return any(c.input for c in self.cache)

    @property
    def attention_kind(self) -> str:
        """MHA (as many KV heads as heads), GQA (fewer), MQA (one), or "?" without a head count."""
        if self.heads is None:
            return "?"
        return "MHA" if self.kv_heads == self.heads else "MQA" if self.kv_heads == 1 else "GQA"

    @property
    def present_to_past(self) -> dict[str, str]:
        """{present output: the past input it feeds at the next step}."""
        return {c.output: c.input for c in self.cache if c.input}

    def kv_bytes_per_token(self, dtype: str | None = None) -> int:
        """Bytes the cache grows by per token of one sequence (every layer, key and value), in the
        model's KV dtype or ``dtype`` (float32 / float16 / int8...)."""
        elements = sum((c.heads or 0) * (c.head_dim or 0) for c in self.cache)
        return math.ceil(elements * kv_itemsize(dtype or self.kv_dtype))

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(has_past=self.has_past, attention_kind=self.attention_kind,
                 kv_bytes_per_token=self.kv_bytes_per_token())
        return d


def kv_itemsize(dtype: str) -> float:
    """Bytes of one cache element of ``dtype`` (int4 counts half a byte)."""
    try:
        return _KV_ITEMSIZE[dtype.lower()]
    except KeyError:
        raise StudioError(f"unknown KV dtype '{dtype[:40]}': use one of fp32, fp16, bf16, int8, fp8, int4") from None


# ------------------------------------------------------------------------------ graph access


def _attr(node: NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a) if a.type != AttributeProto.GRAPH else a.g
    return default


class _View:
    """The graph that computes the decoder (the with-past branch of a merged model), with the outer
    graph's initializers visible, producer/consumer maps and declared shapes."""

    def __init__(self, model: ModelProto, graph: GraphProto) -> None:
        self.model = model
        self.inits: dict[str, TensorProto] = {t.name: t for t in model.graph.initializer}
        self.inits.update({t.name: t for t in graph.initializer})
        self.nodes = list(graph.node)
        self.producer: dict[str, NodeProto] = {}
        self.consumers: dict[str, list[tuple[NodeProto, int]]] = defaultdict(list)
        for n in self.nodes:
            for o in n.output:
                if o:
                    self.producer[o] = n
            for i, x in enumerate(n.input):
                if x:
                    self.consumers[x].append((n, i))
        self.shapes: dict[str, tuple[Dim, ...] | None] = {}
        for vi in (*model.graph.input, *model.graph.value_info, *graph.value_info, *graph.output):
            if vi.type.HasField("tensor_type"):
                self.shapes[vi.name] = value_info(vi).shape
        self.attention = [n for n in self.nodes if (n.domain, n.op_type) in _ATTENTION_OPS]
        self.gqa = next((n for n in self.attention if n.op_type == "GroupQueryAttention"), None)
        self.onnx_attention = next((n for n in self.attention if n.op_type == "Attention"
                                    and n.domain in ("", "ai.onnx")), None)

    def init_dims(self, name: str) -> tuple[int, ...] | None:
        """Dims of a constant (an initializer, or one behind DequantizeLinear / Cast / Transpose)."""
        t = self.inits.get(name)
        if t is not None:
            return tuple(t.dims)
        n = self.producer.get(name)
        if n is None or not n.input or n.input[0] not in self.inits:
            return None
        dims = tuple(self.inits[n.input[0]].dims)
        if n.op_type in ("DequantizeLinear", "Cast", "Identity"):
            return dims
        if n.op_type == "Transpose":
            perm = _attr(n, "perm") or list(reversed(range(len(dims))))
            return tuple(dims[p] for p in perm)
        return None


def _weight_k(view: _View, node: NodeProto) -> int | None:
    """Rows (K) of the weight of a MatMul / Gemm / MatMulNBits whose B is a constant."""
    if node.op_type == "MatMulNBits":
        return _attr(node, "K")
    if node.op_type in ("MatMul", "Gemm") and len(node.input) > 1:
        dims = view.init_dims(node.input[1])
        if dims is None or len(dims) != 2:
            return None
        return dims[1] if node.op_type == "Gemm" and _attr(node, "transB", 0) else dims[0]
    return None


def _o_proj_width(view: _View, present_value: str) -> int | None:
    """K of the output projection fed by the attention over a value cache: heads x value head dim.

    Follows the cache forward (repeat_kv, reshapes) to probs @ V, then that product to the first MatMul
    with a constant weight."""
    frontier, seen = [(present_value, False)], set()
    while frontier and len(seen) < 64:
        name, after_av = frontier.pop(0)
        if name in seen:
            continue
        seen.add(name)
        for node, idx in view.consumers.get(name, ()):
            if node.op_type in _PASS and idx == 0:
                frontier.append((node.output[0], after_av))
            elif node.op_type == "MatMul" and not after_av and idx == 1:
                frontier.append((node.output[0], True))
            elif after_av and idx == 0 and (k := _weight_k(view, node)) is not None:
                return k
    return None


# ------------------------------------------------------------------------------ recognition


# The facts that are sizes, each from 1 to 2^31 - 1 (a head dim of 0 divides by zero, 0 KV heads budget nothing).
_SIZES = {"layers": "layer count", "heads": "head count", "kv_heads": "KV head count", "head_dim": "head dim",
          "hidden": "hidden size", "vocab": "vocabulary", "context": "context length"}


class _Facts:
    """The values found so far, each with its first source."""

    def __init__(self) -> None:
        self.values: dict[str, object] = {}
        self.items: list[Fact] = []
        self.notes: list[str] = []

    def set(self, name: str, value, source: str, *, override: bool = False) -> None:
        if value is None or (name in self.values and not override):
            return
        if name in _SIZES:
            try:
                bounded_int(value, f"the decoder's {_SIZES[name]}", 1, MAX_DIM)
            except OutOfRange as exc:    # a 0 head dim or KV heads, a context of 10^400: no size to budget with
                raise OutOfRange(f"{exc} (from {short(source, 80)})") from None
        if override:
            self.items = [f for f in self.items if f.name != name]
        self.values[name] = value
        self.items.append(Fact(name, str(value), source))

    def get(self, name: str):
        return self.values.get(name)

    def fill(self, configs: list[tuple[str, dict]], *names: str) -> None:
        for source, cfg in configs:
            for name in names:
                self.set(name, cfg.get(name), source)


def _decoder_graph(model: ModelProto, present_names: set[str], inputs: dict[str, ValueInfoProto]):
    """(graph, the If's condition input) -- the with-past branch of a merged model, else the main graph."""
    for n in model.graph.node:
        if n.op_type == "If" and present_names & set(n.output):
            then = _attr(n, "then_branch")
            if then is not None:
                cond = n.input[0] if n.input and n.input[0] in inputs else None
                return then, cond
    return model.graph, None


def _heads(f: _Facts, view: _View, cache: tuple[CacheEntry, ...]) -> None:
    """Query heads (and KV heads when the cache shapes leave them open) from the attention op, else from
    the output projection the value cache feeds."""
    node = view.gqa or view.onnx_attention or (view.attention[0] if view.attention else None)
    if node is not None:
        for attr in ("num_heads", "q_num_heads"):
            f.set("heads", _attr(node, attr), f"{node.op_type} {attr} ({short(node.name, 60)})")
        q = view.shapes.get(node.input[0]) if node.input else None
        if q and len(q) == 4 and isinstance(q[1], int):
            f.set("heads", q[1], f"{node.op_type} query {short(node.input[0], 40)} {shape_str(q)}")
        kv_attr = _attr(node, "kv_num_heads")
        f.set("kv_heads", kv_attr, f"{node.op_type} kv_num_heads")
        if kv_attr not in (None, f.get("kv_heads")):
            f.notes.append(f"{node.op_type} kv_num_heads {kv_attr} differs from the cache's {f.get('kv_heads')} heads")
    values = [c for c in cache if c.kind == "value"]
    v_dim = values[0].head_dim if values else None
    if f.get("heads") is None and v_dim:
        width = _o_proj_width(view, values[0].output)
        if width and width % v_dim == 0:
            f.set("heads", width // v_dim, f"output projection rows {width} / value head dim {v_dim}")


def _tokens(f: _Facts, view: _View, model: ModelProto, inputs: dict[str, ValueInfoProto], present: set[str],
            convention: str) -> tuple[str | None, str | None]:
    """(input_ids, logits): vocabulary and hidden size from the embedding table, the logits' last dim."""
    input_ids = "input_ids" if "input_ids" in inputs else None
    for n in view.nodes:
        if n.op_type not in ("Gather", "GatherBlockQuantized") or len(n.input) < 2 or n.input[0] not in view.inits:
            continue
        dims = view.init_dims(n.input[0])
        ids = inputs.get(n.input[1])
        if dims and len(dims) == 2 and (n.input[1] == input_ids or (
                input_ids is None and ids is not None
                and ids.type.tensor_type.elem_type in (TensorProto.INT64, TensorProto.INT32))):
            input_ids = n.input[1]
            f.set("vocab", dims[0], f"embedding {short(n.input[0], 50)} {list(dims)}")
            if n.op_type == "Gather":
                f.set("hidden", dims[1], f"embedding {short(n.input[0], 50)} {list(dims)}")
            break
    outs = {vi.name: vi for vi in model.graph.output}
    logits = "logits" if "logits" in outs else next((o for o in outs if o not in present), None)
    if convention == "onnx-attention":
        q = view.onnx_attention.input[0] if view.onnx_attention is not None else None
        qs = view.shapes.get(q) if q else None
        if qs and len(qs) == 3 and isinstance(qs[2], int):
            f.set("hidden", qs[2], f"query {short(q, 30)} {shape_str(qs)}")
        return input_ids, None
    if logits is not None:
        ls = value_info(outs[logits]).shape
        if ls and isinstance(ls[-1], int) and ls[-1] > 1 and ls[-1] != f.get("vocab"):
            if f.get("vocab") is not None:
                f.notes.append(f"logits have {ls[-1]} classes but the embedding {f.get('vocab')} rows")
            f.set("vocab", ls[-1], f"{short(logits, 40)} {shape_str(ls)}", override=True)
    embeds = inputs.get("inputs_embeds")
    es = value_info(embeds).shape if embeds is not None else None
    if es and isinstance(es[-1], int):
        f.set("hidden", es[-1], f"inputs_embeds {shape_str(es)}")
    return input_ids, logits


def _context(f: _Facts, view: _View, model: ModelProto, position_ids: str | None) -> str:
    """Context length from the rotary cache or the position table (their first dim), else the metadata;
    returns the kind of positions (rotary | learned | unknown)."""
    positions = "unknown"
    gqa_rotary = [view.gqa] if view.gqa is not None and _attr(view.gqa, "do_rotary", 0) else []
    for n in [n for n in view.nodes if n.op_type == "RotaryEmbedding"] + gqa_rotary:
        index = 2 if n.op_type == "RotaryEmbedding" else 7
        table = n.input[index] if len(n.input) > index else ""
        dims = view.init_dims(table) if table else None
        positions = "rotary"
        if dims and len(dims) == 2:
            f.set("context", dims[0], f"rotary cache {short(table, 40)} {list(dims)}")
            return positions
    hidden, head_dim = f.get("hidden"), f.get("head_dim")
    for n in view.nodes if position_ids is not None else ():
        if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == position_ids:
            dims = view.init_dims(n.input[0])
            if dims and len(dims) == 2:
                positions = ("learned" if dims[1] == hidden else
                             "rotary" if head_dim and dims[1] in (head_dim, head_dim // 2) else positions)
                label = "position embedding" if positions == "learned" else "rotary table"
                f.set("context", dims[0], f"{label} {short(n.input[0], 40)} {list(dims)}")
                return positions
    meta = {p.key: p.value for p in model.metadata_props}
    for key in _CONTEXT_KEYS:
        if meta.get(key, "").strip().isdigit():
            f.set("context", int(meta[key]), f"metadata {key}")
    if positions == "unknown" and any(n.op_type in ("Sin", "Cos") for n in view.nodes):
        positions = "rotary"
    return positions


def recognize(model: ModelProto, *, folder: Path | None = None, filename: str | None = None) -> DecoderSpec | None:
    """The decoder spec of ``model``, None when it has no KV cache; raises ``DecoderError`` when its cache
    inputs and outputs do not fit together. ``folder``/``filename``: where the model file lies, to read a
    ``genai_config.json`` or ``config.json`` beside it."""
    past, present = cache_io(model)
    if not past and not present:
        return None
    check_cache(past, present)
    inputs = {vi.name: vi for vi in graph_inputs(model)}
    present_names = {vi.name for vi in present.values()}
    graph, branch = _decoder_graph(model, present_names, inputs)
    view = _View(model, graph)
    cache = cache_entries(past, present)
    first = cache[0]
    layers = len({c.layer for c in cache})
    single = all(is_single_layer(c.output) for c in cache)
    convention = ("merged-if" if graph is not model.graph else "genai" if view.gqa is not None
                  else "onnx-attention" if single and (view.onnx_attention is not None or layers == 1) else "optimum")
    runtime, genai = genai_config(folder, filename)
    configs = [("genai_config.json", genai), ("config.json", hf_config(folder))]
    f = _Facts()
    if runtime is not None and view.gqa is None:
        f.notes.append("a genai_config.json names this model, but it has no GroupQueryAttention")
    f.set("layers", layers, f"{len(cache)} present outputs "
                            f"({range_text([c.output for c in cache], [(c.layer, c.kind) for c in cache])})")
    key = next((c for c in cache if c.kind == "key"), first)
    shape_src = f"{key.input or key.output} {shape_str(key.past_shape or key.present_shape)}"
    f.set("kv_heads", key.heads, shape_src)
    f.set("head_dim", key.head_dim, shape_src)
    _heads(f, view, cache)
    f.fill(configs, "heads", "kv_heads")
    if f.get("kv_heads") is None or f.get("head_dim") is None:
        raise DecoderError(f"cache {short(first.input or first.output)} has shape "
                           f"{shape_str(first.past_shape or first.present_shape)}: its KV heads and head dim must be "
                           "fixed sizes ([batch, kv_heads, length, head_dim]) to size the cache",
                           code=ErrorCode.DECODER_CACHE_SHAPE)
    cache = tuple(c if c.heads is not None else replace(c, heads=f.get("kv_heads")) for c in cache)
    for c in cache:              # every entry, values too: a value head dim of 0 sizes nothing either
        for what, v in (("KV head count", c.heads), ("head dim", c.head_dim)):
            if v is not None:
                try:
                    bounded_int(v, f"the decoder's {what}", 1, MAX_DIM)
                except OutOfRange as exc:
                    raise OutOfRange(f"{exc} (cache {short(c.input or c.output, 60)} "
                                     f"{shape_str(c.past_shape or c.present_shape)})") from None
    input_ids, logits = _tokens(f, view, model, inputs, present_names, convention)
    f.fill(configs, "hidden", *(("vocab",) if convention != "onnx-attention" else ()))
    hidden, head_dim = f.get("hidden"), f.get("head_dim")
    if f.get("heads") is None and hidden and hidden % head_dim == 0 and convention != "onnx-attention":
        f.set("heads", hidden // head_dim, f"hidden {hidden} / head dim {head_dim} (assumed)")
    position_ids = next((n for n in ("position_ids", "cache_position") if n in inputs), None)
    positions = _context(f, view, model, position_ids)
    f.fill(configs, "context")
    attention_mask = "attention_mask" if "attention_mask" in inputs else next(
        (n for n in inputs if "mask" in n.lower()), None)
    values = [c for c in cache if c.kind == "value"]
    attention = view.gqa or (view.attention[0] if view.attention else None)
    return DecoderSpec(
        convention=convention, layers=layers, heads=f.get("heads"), kv_heads=f.get("kv_heads"), head_dim=head_dim,
        value_head_dim=(values[0].head_dim if values else None) or head_dim, hidden=hidden, vocab=f.get("vocab"),
        context=f.get("context"), kv_dtype=first.dtype, cache=cache, input_ids=input_ids,
        attention_mask=attention_mask, position_ids=position_ids, use_cache_branch=branch, logits=logits,
        past_length_dim=seq_dim(first), cache_layout=cache_layout(first.past_shape, first.present_shape),
        attention=attention.op_type if attention is not None else "decomposed",
        positions=positions, norm=_norm_kind(view), weights=_weight_format(view), runtime=runtime,
        facts=tuple(f.items), notes=tuple(f.notes))


def _norm_kind(view: _View) -> str:
    ops = {n.op_type for n in view.nodes}
    if ops & {"SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization", "RMSNormalization"}:
        return "RMSNorm"
    if ops & {"LayerNormalization", "SkipLayerNormalization"}:
        return "LayerNorm"
    for n in view.nodes:            # decomposed: mean(x^2) without centring is RMSNorm
        if n.op_type == "ReduceMean":
            src = view.producer.get(n.input[0])
            if src is not None and src.op_type == "Pow":
                centred = view.producer.get(src.input[0])
                return "LayerNorm" if centred is not None and centred.op_type == "Sub" else "RMSNorm"
    return "unknown"


def _weight_format(view: _View) -> str:
    nbits = [n for n in view.nodes if n.op_type == "MatMulNBits"]
    if nbits:
        bits = sorted({_attr(n, "bits", 4) for n in nbits})
        blocks = sorted({_attr(n, "block_size") for n in nbits})
        return (f"int{'/'.join(map(str, bits))} MatMulNBits (block {'/'.join(map(str, blocks))}, "
                f"{len(nbits)} MatMuls)")
    if any(n.op_type in ("DequantizeLinear", "MatMulInteger", "QLinearMatMul") for n in view.nodes):
        return "int8 (quantized)"
    big = max(view.inits.values(), key=lambda t: math.prod(t.dims), default=None)
    return dtype_name(big.data_type) if big is not None else "none"
