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
no-past graphs) and ``onnx-attention`` (one ONNX ``Attention`` layer with ``past_key``/``present_key``,
as in the onnx backend tests).
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, helper

from studio.core.errors import StudioError
from studio.core.paths import check_regular_file
from studio.core.types import Dim, dtype_name, value_info

CONVENTIONS = ("optimum", "genai", "merged-if", "onnx-attention")
CONFIG_MAX_BYTES = 1 << 20

# past_key_values.3.key, past.3.value, past_key_value.3.key, cache.3.key | past_key, past_value_3
_PAST = (re.compile(r"^(?:past_key_values|past_key_value|past|cache)[._](\d+)[._](key|value)$"),
         re.compile(r"^past_(key|value)(?:s)?(?:[._](\d+))?$"))
_PRESENT = (re.compile(r"^(?:present|present_key_values|present_key_value|present_cache|cache_out)[._](\d+)[._]"
                       r"(key|value)$"),
            re.compile(r"^present_(key|value)(?:s)?(?:[._](\d+))?$"))
_PASS = frozenset({"Unsqueeze", "Expand", "Reshape", "Transpose", "Tile", "Identity", "Cast", "Squeeze", "Flatten"})
_ATTENTION_OPS = {("com.microsoft", "GroupQueryAttention"), ("com.microsoft", "MultiHeadAttention"),
                  ("com.microsoft", "Attention"), ("com.microsoft", "DecoderMaskedMultiHeadAttention"),
                  ("com.microsoft", "PagedAttention"), ("", "Attention"), ("ai.onnx", "Attention")}
_CONTEXT_KEYS = ("context_length", "max_position_embeddings", "n_positions", "n_ctx", "max_seq_len",
                 "max_sequence_length")


class DecoderError(StudioError):
    """The model has a KV cache whose inputs and outputs do not fit together."""

    code = "DECODER-CACHE-MISMATCH"


@dataclass(frozen=True)
class CacheEntry:
    """One cache tensor of one layer: the past input it is read from and the present output that
    feeds that input at the next step (``input`` None in a decoder without past)."""

    layer: int
    kind: str                   # key | value
    input: str | None
    output: str
    heads: int | None           # KV heads
    head_dim: int | None
    dtype: str
    past_shape: tuple[Dim, ...] | None
    present_shape: tuple[Dim, ...] | None


@dataclass(frozen=True)
class Fact:
    """Where a fact came from (an I/O shape, an op attribute, an initializer's shape, a config file)."""

    name: str
    value: str
    source: str


@dataclass(frozen=True)
class RuntimeConfig:
    """What a runtime config beside the model says (onnxruntime-genai's ``genai_config.json``)."""

    file: str
    context_length: int | None
    max_length: int | None
    past_present_share_buffer: bool | None


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
    weights: str                     # "float32", "int4 MatMulNBits (block 16)"...
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


_KV_ITEMSIZE = {"float32": 4, "fp32": 4, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2, "int8": 1, "uint8": 1,
                "float8_e4m3fn": 1, "fp8": 1, "int4": 0.5}


def kv_itemsize(dtype: str) -> float:
    """Bytes of one cache element of ``dtype`` (int4 counts half a byte)."""
    try:
        return _KV_ITEMSIZE[dtype.lower()]
    except KeyError:
        raise StudioError(f"unknown KV dtype '{dtype[:40]}': use one of fp32, fp16, bf16, int8, fp8, int4") from None


# ------------------------------------------------------------------------------ names


def _cache_key(name: str, patterns: tuple[re.Pattern, re.Pattern]) -> tuple[int, str] | None:
    m = patterns[0].match(name)
    if m:
        return int(m.group(1)), m.group(2)
    m = patterns[1].match(name)
    if m:
        return int(m.group(2) or 0), m.group(1)
    return None


def _range_text(names: Iterable[str], keys: Iterable[tuple[int, str]]) -> str:
    """'past_key_values.0..3.key/value' for a regular set, else the first names."""
    names, keys = list(names), sorted(keys)
    if not names:
        return "none"
    layers = sorted({k[0] for k in keys})
    first = names[0]
    m = re.match(r"^(.*?[._])(\d+)([._])(key|value)$", first)
    if m and len(layers) > 1:
        return f"{m.group(1)}{layers[0]}..{layers[-1]}{m.group(3)}key/value"
    return ", ".join(names[:3]) + (" ..." if len(names) > 3 else "")


def _short(text: str, limit: int = 80) -> str:
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _shape_str(shape: tuple[Dim, ...] | None) -> str:
    if shape is None:
        return "[?]"
    return "[" + ", ".join("?" if d is None else _short(str(d), 40) for d in shape) + "]"


# ------------------------------------------------------------------------------ graph access


class _View:
    """The graph that computes the decoder (the with-past branch of a merged model), with the
    outer graph's initializers visible, and producer/consumer maps."""

    def __init__(self, model: ModelProto, graph: GraphProto) -> None:
        self.model = model
        self.graph = graph
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

    def init_dims(self, name: str) -> tuple[int, ...] | None:
        t = self.inits.get(name)
        if t is not None:
            return tuple(t.dims)
        n = self.producer.get(name)       # a weight behind DequantizeLinear / Transpose / Cast
        if n is not None and n.op_type in ("DequantizeLinear", "Cast", "Identity") and n.input[0] in self.inits:
            return tuple(self.inits[n.input[0]].dims)
        if n is not None and n.op_type == "Transpose" and n.input[0] in self.inits:
            dims = tuple(self.inits[n.input[0]].dims)
            perm = _attr(n, "perm") or list(reversed(range(len(dims))))
            return tuple(dims[p] for p in perm)
        return None


def _attr(node: NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a) if a.type != AttributeProto.GRAPH else a.g
    return default


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


def _o_proj_width(view: _View, present: str) -> int | None:
    """K of the output projection the attention over ``present`` (a value cache) feeds: heads * head_dim.

    Follows the value cache forward (repeat_kv, reshapes) to probs @ V, then that product to the first
    MatMul with a constant weight."""
    frontier, seen = [(present, False)], set()
    for _ in range(64):
        if not frontier:
            return None
        name, passed_av = frontier.pop(0)
        if name in seen:
            continue
        seen.add(name)
        for node, idx in view.consumers.get(name, ()):
            if node.op_type in _PASS and idx == 0:
                frontier.append((node.output[0], passed_av))
            elif node.op_type == "MatMul" and not passed_av and idx == 1:
                frontier.append((node.output[0], True))
            elif passed_av and idx == 0:
                k = _weight_k(view, node)
                if k is not None:
                    return k
    return None


# ------------------------------------------------------------------------------ recognition


def _io(model: ModelProto) -> tuple[list, list]:
    inits = {t.name for t in model.graph.initializer}
    ins = [vi for vi in model.graph.input if vi.name not in inits]
    return ins, list(model.graph.output)


def _cache_layout(past: tuple[Dim, ...] | None, present: tuple[Dim, ...] | None) -> str:
    for shape in (past, present):
        if shape and len(shape) == 4 and not isinstance(shape[1], int) and isinstance(shape[2], int):
            return "bsnh"
    return "bnsh"


def _pair_cache(ins: list, outs: list) -> tuple[dict, dict]:
    past = {}
    for vi in ins:
        key = _cache_key(vi.name, _PAST)
        if key is not None:
            past[key] = vi
    present = {}
    for vi in outs:
        key = _cache_key(vi.name, _PRESENT)
        if key is not None:
            present[key] = vi
    return past, present


def _check_pairs(past: dict, present: dict) -> None:
    """One-line errors naming both sides when the cache inputs and outputs do not fit together."""
    if past and not present:
        raise DecoderError(f"cache inputs do not match the outputs: {len(past)} cache inputs "
                           f"({_range_text([v.name for v in past.values()], past)}) but no present output; a decoder "
                           "must return its cache (present.N.key/value) to be fed back")
    if not past:
        return
    missing_out = [past[k].name for k in sorted(past) if k not in present]
    missing_in = [present[k].name for k in sorted(present) if k not in past]
    if missing_out or missing_in:
        side = (f"input {missing_out[0]} has no matching present output" if missing_out
                else f"output {missing_in[0]} has no matching past input")
        raise DecoderError(f"cache inputs do not match the outputs: {len(past)} cache inputs "
                           f"({_range_text([past[k].name for k in sorted(past)], past)}) vs {len(present)} present "
                           f"outputs ({_range_text([present[k].name for k in sorted(present)], present)}): {side}; "
                           "re-export so that every past_key_values.N.key/value has its present.N.key/value")
    for key in sorted(past):
        a, b = value_info(past[key]), value_info(present[key])
        what = None
        if a.dtype != b.dtype:
            what = f"dtype {a.dtype} vs {b.dtype}"
        elif a.shape is not None and b.shape is not None:
            if len(a.shape) != len(b.shape):
                what = f"rank {len(a.shape)} vs {len(b.shape)}"
            elif len(a.shape) != 4:
                what = f"rank {len(a.shape)} (a cache is [batch, kv_heads, length, head_dim])"
            else:
                layout = _cache_layout(a.shape, b.shape)
                axes = {"batch": 0, "KV heads": 1 if layout == "bnsh" else 2, "head dim": 3}
                for label, ax in axes.items():
                    da, db = a.shape[ax], b.shape[ax]
                    if isinstance(da, int) and isinstance(db, int) and da != db:
                        what = f"{label} {da} vs {db}"
                        break
                    if label == "batch" and isinstance(da, str) and isinstance(db, str) and da != db:
                        what = f"batch dim '{_short(da, 30)}' vs '{_short(db, 30)}'"
                        break
        if what:
            raise DecoderError(f"cache input {_short(a.name)} {a.dtype}{_shape_str(a.shape)} does not match output "
                               f"{_short(b.name)} {b.dtype}{_shape_str(b.shape)}: {what}; the output must have the "
                               "input's layout to be fed back")


def _entries(past: dict, present: dict) -> tuple[CacheEntry, ...]:
    out = []
    for key in sorted(present):
        pv = past.get(key)
        a = value_info(pv) if pv is not None else None
        b = value_info(present[key])
        shape = (a.shape if a is not None else None) or b.shape
        layout = _cache_layout(a.shape if a else None, b.shape)
        heads = dim = None
        if shape is not None and len(shape) == 4:
            h, d = (shape[1], shape[3]) if layout == "bnsh" else (shape[2], shape[3])
            heads = h if isinstance(h, int) else None
            dim = d if isinstance(d, int) else None
        out.append(CacheEntry(key[0], key[1], pv.name if pv is not None else None, present[key].name, heads, dim,
                              (a or b).dtype, a.shape if a else None, b.shape))
    return tuple(out)


def _attention_nodes(view: _View) -> list[NodeProto]:
    return [n for n in view.nodes if (n.domain, n.op_type) in _ATTENTION_OPS]


def _read_json(path: Path) -> dict | None:
    try:
        check_regular_file(path, max_bytes=CONFIG_MAX_BYTES, label="config file")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (StudioError, OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _genai_config(folder: Path | None, filename: str | None) -> tuple[RuntimeConfig | None, dict]:
    if folder is None:
        return None, {}
    data = _read_json(folder / "genai_config.json")
    if not data:
        return None, {}
    model = data.get("model") if isinstance(data.get("model"), dict) else {}
    decoder = model.get("decoder") if isinstance(model.get("decoder"), dict) else {}
    if filename and isinstance(decoder.get("filename"), str) and decoder["filename"] != filename:
        return None, {}                      # describes another model of the folder
    search = data.get("search") if isinstance(data.get("search"), dict) else {}
    share = search.get("past_present_share_buffer")
    rc = RuntimeConfig("genai_config.json", _int(model.get("context_length")), _int(search.get("max_length")),
                       share if isinstance(share, bool) else None)
    return rc, {"heads": _int(decoder.get("num_attention_heads")), "kv_heads": _int(decoder.get("num_key_value_heads")),
                "hidden": _int(decoder.get("hidden_size")), "context": _int(model.get("context_length")),
                "vocab": _int(model.get("vocab_size"))}


def _hf_config(folder: Path | None) -> dict:
    if folder is None:
        return {}
    data = _read_json(folder / "config.json")
    if not data or "model_type" not in data:
        return {}
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else data

    def first(*keys):
        return next((_int(text.get(k)) for k in keys if _int(text.get(k))), None)
    return {"heads": first("num_attention_heads", "n_head"), "kv_heads": first("num_key_value_heads"),
            "hidden": first("hidden_size", "n_embd", "d_model"), "vocab": first("vocab_size"),
            "context": first("max_position_embeddings", "n_positions", "n_ctx")}


def recognize(model: ModelProto, *, folder: Path | None = None, filename: str | None = None) -> DecoderSpec | None:
    """The decoder spec of ``model``, None when it has no KV cache; raises ``DecoderError`` when its cache
    inputs and outputs do not fit together. ``folder``/``filename``: where the model file lies, to read a
    ``genai_config.json`` or ``config.json`` beside it."""
    ins, outs = _io(model)
    past, present = _pair_cache(ins, outs)
    if not past and not present:
        return None
    _check_pairs(past, present)
    facts: list[Fact] = []
    notes: list[str] = []
    by_name = {vi.name: vi for vi in ins}

    # -- which graph computes it (merged: the with-past branch)
    use_cache = next((vi.name for vi in ins if vi.name == "use_cache_branch"
                      or (vi.type.tensor_type.elem_type == TensorProto.BOOL and "cache" in vi.name.lower())), None)
    graph, merged = model.graph, False
    present_names = {vi.name for vi in present.values()}
    for n in model.graph.node:
        if n.op_type == "If" and present_names & set(n.output):
            then = _attr(n, "then_branch")
            if then is not None:
                graph, merged = then, True
                if n.input and n.input[0] in by_name:
                    use_cache = n.input[0]
                break
    view = _View(model, graph)
    cache = _entries(past, present)
    first = cache[0]
    layers = len({c.layer for c in cache})
    outputs = _range_text([c.output for c in cache], [(c.layer, c.kind) for c in cache])
    facts.append(Fact("layers", str(layers), f"{len(cache)} present outputs ({outputs})"))

    attn = _attention_nodes(view)
    gqa = next((n for n in attn if n.op_type == "GroupQueryAttention"), None)
    onnx_attn = next((n for n in attn if n.op_type == "Attention" and n.domain in ("", "ai.onnx")), None)
    single = all(_PRESENT[1].match(c.output) for c in cache)     # present_key / present_value: one attention layer
    convention = ("merged-if" if merged else "genai" if gqa is not None
                  else "onnx-attention" if single and (onnx_attn is not None or layers == 1) else "optimum")
    rc, genai = _genai_config(folder, filename)
    hf = _hf_config(folder)
    if rc is not None and convention == "optimum" and gqa is None:
        notes.append("a genai_config.json names this model, but it has no GroupQueryAttention")

    # -- KV heads and head dims: the cache shapes, else the attention op
    keys = [c for c in cache if c.kind == "key"] or list(cache)
    values = [c for c in cache if c.kind == "value"] or list(cache)
    kv_heads = keys[0].heads
    head_dim = keys[0].head_dim
    v_dim = values[0].head_dim
    src_shape = f"{first.input or first.output} {_shape_str(first.past_shape or first.present_shape)}"
    if kv_heads is not None:
        facts.append(Fact("kv_heads", str(kv_heads), src_shape))
    heads = None
    if gqa is not None:
        heads = _attr(gqa, "num_heads")
        facts.append(Fact("heads", str(heads), f"GroupQueryAttention num_heads ({_short(gqa.name, 60)})"))
        if kv_heads is None:
            kv_heads = _attr(gqa, "kv_num_heads")
            facts.append(Fact("kv_heads", str(kv_heads), "GroupQueryAttention kv_num_heads"))
        elif _attr(gqa, "kv_num_heads") not in (None, kv_heads):
            notes.append(f"GroupQueryAttention kv_num_heads {_attr(gqa, 'kv_num_heads')} differs from the cache's "
                         f"{kv_heads} heads")
    elif attn:
        node = onnx_attn or attn[0]
        heads = _attr(node, "q_num_heads") or _attr(node, "num_heads")
        if heads:
            facts.append(Fact("heads", str(heads), f"{node.op_type} {'q_num_heads' if _attr(node, 'q_num_heads') else 'num_heads'}"))
        elif node.input and view.shapes.get(node.input[0]) and len(view.shapes[node.input[0]]) == 4 \
                and isinstance(view.shapes[node.input[0]][1], int):
            heads = view.shapes[node.input[0]][1]
            facts.append(Fact("heads", str(heads), f"{node.op_type} query {_short(node.input[0], 40)} "
                                                   f"{_shape_str(view.shapes[node.input[0]])}"))
        if kv_heads is None and _attr(node, "kv_num_heads"):
            kv_heads = _attr(node, "kv_num_heads")
            facts.append(Fact("kv_heads", str(kv_heads), f"{node.op_type} kv_num_heads"))
    if heads is None and v_dim:
        width = _o_proj_width(view, values[0].output)
        if width and width % v_dim == 0:
            heads = width // v_dim
            facts.append(Fact("heads", str(heads), f"output projection rows {width} / value head dim {v_dim}"))
    for src, cfg in (("genai_config.json", genai), ("config.json", hf)):
        if heads is None and cfg.get("heads"):
            heads = cfg["heads"]
            facts.append(Fact("heads", str(heads), src))
        if kv_heads is None and cfg.get("kv_heads"):
            kv_heads = cfg["kv_heads"]
            facts.append(Fact("kv_heads", str(kv_heads), src))
    if kv_heads is None or head_dim is None:
        raise DecoderError(f"cache {_short(first.input or first.output)} has shape "
                           f"{_shape_str(first.past_shape or first.present_shape)}: its KV heads and head dim must be "
                           "fixed sizes ([batch, kv_heads, length, head_dim]) to size the cache")
    if head_dim is not None:
        facts.append(Fact("head_dim", str(head_dim), src_shape))
    cache = tuple(c if c.heads is not None else _with_heads(c, kv_heads) for c in cache)

    # -- token ids, embedding table (vocab, hidden), logits
    input_ids = next((vi.name for vi in ins if vi.name == "input_ids"), None)
    hidden = vocab = None
    for n in view.nodes:
        if n.op_type in ("Gather", "GatherBlockQuantized") and len(n.input) > 1 and n.input[0] in view.inits:
            dims = view.init_dims(n.input[0])
            if dims and len(dims) == 2 and (n.input[1] == input_ids or (input_ids is None and n.input[1] in by_name
                                            and by_name[n.input[1]].type.tensor_type.elem_type in
                                            (TensorProto.INT64, TensorProto.INT32))):
                input_ids = n.input[1]
                vocab, hidden = dims
                if n.op_type == "GatherBlockQuantized":
                    hidden = None
                facts.append(Fact("vocab", str(vocab), f"embedding {_short(n.input[0], 50)} {list(dims)}"))
                if hidden:
                    facts.append(Fact("hidden", str(hidden), f"embedding {_short(n.input[0], 50)} {list(dims)}"))
                break
    logits = next((vi.name for vi in outs if vi.name == "logits"), None) or next(
        (vi.name for vi in outs if vi.name not in present_names), None)
    if logits is not None:
        lshape = value_info(next(vi for vi in outs if vi.name == logits)).shape
        if lshape and isinstance(lshape[-1], int) and lshape[-1] > 1 and convention != "onnx-attention":
            if vocab is not None and lshape[-1] != vocab:
                notes.append(f"logits have {lshape[-1]} classes but the embedding {vocab} rows")
            if vocab != lshape[-1]:
                vocab = lshape[-1]
                facts = [f for f in facts if f.name != "vocab"]
                facts.append(Fact("vocab", str(vocab), f"{_short(logits, 40)} {_shape_str(lshape)}"))
    if convention == "onnx-attention":
        logits = None
        q = onnx_attn.input[0] if onnx_attn is not None and onnx_attn.input else None
        qs = view.shapes.get(q) if q else None
        if qs and len(qs) == 3 and isinstance(qs[2], int):
            hidden = qs[2]
            facts.append(Fact("hidden", str(hidden), f"query {_short(q, 30)} {_shape_str(qs)}"))
    embeds = next((vi for vi in ins if vi.name == "inputs_embeds"), None)
    if hidden is None and embeds is not None:
        es = value_info(embeds).shape
        if es and isinstance(es[-1], int):
            hidden = es[-1]
            facts.append(Fact("hidden", str(hidden), f"inputs_embeds {_shape_str(es)}"))
    for src, cfg in (("genai_config.json", genai), ("config.json", hf)):
        if hidden is None and cfg.get("hidden"):
            hidden = cfg["hidden"]
            facts.append(Fact("hidden", str(hidden), src))
        if vocab is None and cfg.get("vocab") and convention != "onnx-attention":
            vocab = cfg["vocab"]
            facts.append(Fact("vocab", str(vocab), src))
    if heads is None and hidden and head_dim and hidden % head_dim == 0 and convention != "onnx-attention":
        heads = hidden // head_dim
        facts.append(Fact("heads", str(heads), f"hidden {hidden} / head dim {head_dim} (assumed)"))

    # -- masks and positions
    attention_mask = next((vi.name for vi in ins if vi.name == "attention_mask"), None) or next(
        (vi.name for vi in ins if "mask" in vi.name.lower() and vi.name not in past), None)
    position_ids = next((vi.name for vi in ins if vi.name in ("position_ids", "cache_position")), None)

    context, positions = None, "unknown"
    rotary_ops = [n for n in view.nodes if n.op_type == "RotaryEmbedding"]
    for n in rotary_ops + ([gqa] if gqa is not None and _attr(gqa, "do_rotary", 0) else []):
        table = n.input[2] if n.op_type == "RotaryEmbedding" and len(n.input) > 2 else (
            n.input[7] if len(n.input) > 7 else "")
        dims = view.init_dims(table) if table else None
        positions = "rotary"
        if dims and len(dims) == 2:
            context = dims[0]
            facts.append(Fact("context", str(context), f"rotary cache {_short(table, 40)} {list(dims)}"))
            break
    if context is None and position_ids is not None:
        for n in view.nodes:
            if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == position_ids:
                dims = view.init_dims(n.input[0])
                if dims and len(dims) == 2:
                    context = dims[0]
                    positions = ("learned" if hidden and dims[1] == hidden else
                                 "rotary" if head_dim and dims[1] in (head_dim, head_dim // 2) else positions)
                    label = "position embedding" if positions == "learned" else "rotary table"
                    facts.append(Fact("context", str(context), f"{label} {_short(n.input[0], 40)} {list(dims)}"))
                    break
    if context is None:
        meta = {p.key: p.value for p in model.metadata_props}
        for key in _CONTEXT_KEYS:
            if key in meta and meta[key].strip().isdigit():
                context = int(meta[key])
                facts.append(Fact("context", str(context), f"metadata {key}"))
                break
    for src, cfg in (("genai_config.json", genai), ("config.json", hf)):
        if context is None and cfg.get("context"):
            context = cfg["context"]
            facts.append(Fact("context", str(context), src))
    if positions == "unknown" and any(n.op_type in ("Sin", "Cos") for n in view.nodes):
        positions = "rotary"

    return DecoderSpec(
        convention=convention, layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        value_head_dim=v_dim or head_dim, hidden=hidden, vocab=vocab, context=context, kv_dtype=first.dtype,
        cache=cache, input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
        use_cache_branch=use_cache if merged else None, logits=logits,
        past_length_dim=_seq_dim(first), cache_layout=_cache_layout(first.past_shape, first.present_shape),
        attention=(gqa.op_type if gqa is not None else attn[0].op_type if attn else "decomposed"),
        positions=positions, norm=_norm_kind(view), weights=_weight_format(view), runtime=rc,
        facts=tuple(facts), notes=tuple(notes))


def _with_heads(c: CacheEntry, heads: int) -> CacheEntry:
    from dataclasses import replace

    return replace(c, heads=heads)


def _seq_dim(c: CacheEntry) -> Dim:
    shape = c.past_shape or c.present_shape
    if not shape or len(shape) != 4:
        return None
    return shape[2] if _cache_layout(c.past_shape, c.present_shape) == "bnsh" else shape[1]


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

