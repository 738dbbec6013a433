"""What a decoder costs in memory: parameters per block, KV-cache bytes per token and at a length and
batch (per KV dtype), and the KV budget (the largest batch x length that fits a memory size beside
the weights), with a warning when a runtime would preallocate more than that memory.

Only initializer *shapes* are read (an int4 ``MatMulNBits`` weight counts K x N parameters; its scales
and zero points count in bytes only), so it costs nothing on a model loaded without its weights.
Activations and the runtime's own buffers are not counted: the budget is an upper bound.
"""

from __future__ import annotations

import math
import os
import re
from collections import defaultdict
from dataclasses import asdict, dataclass

from onnx import ModelProto

from studio.core.bounds import MAX_DIM, MAX_MEMORY_BYTES, OutOfRange, bounded_int
from studio.core.errors import StudioError
from studio.core.fmt import human_bytes
from studio.core.protowalk import iter_graphs
from studio.core.tensor_safety import packed_nbytes
from studio.inspect.decoder import DecoderSpec, kv_itemsize

KV_DTYPES = ("float32", "float16", "int8")
BUDGET_LENGTHS = (128, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
DEFAULT_LENGTH = 2048

_LAYER = re.compile(r"(?:^|[./_])(?:layers|layer|h|blocks|block)[._](\d+)(?=[./_]|$)")
# Inputs of quantized ops that are quantization metadata, not weights: (op, input index)
_META = {("MatMulNBits", 2), ("MatMulNBits", 3), ("MatMulNBits", 4), ("DequantizeLinear", 1),
         ("DequantizeLinear", 2), ("GatherBlockQuantized", 2), ("GatherBlockQuantized", 3)}


@dataclass(frozen=True)
class BlockParams:
    """One block of the model: a layer (``layer`` set), the embedding, the LM head or the rest."""

    block: str
    layer: int | None
    params: int                # weights as the float model has them
    bytes: int                 # as stored (packed int4, scales and zero points included)
    tensors: int


@dataclass(frozen=True)
class KvSize:
    dtype: str
    bytes_per_token: int       # one sequence, every layer, key and value
    bytes: int                 # at the report's length and batch


@dataclass(frozen=True)
class Preallocation:
    """A runtime that allocates the cache for ``max_length`` tokens up front, whatever the prompt."""

    runtime: str
    max_length: int
    source: str
    bytes: int                 # cache at the budget's batch
    fits: bool


@dataclass(frozen=True)
class BudgetRow:
    length: int
    max_batch: int


@dataclass(frozen=True)
class KvBudget:
    memory_bytes: int
    memory_source: str         # "given" | "this machine's RAM"
    weights_bytes: int
    kv_dtype: str
    bytes_per_token: int
    available_bytes: int       # memory - weights (0 when the weights alone do not fit)
    max_tokens: int            # batch x length that fit
    batch: int
    max_length: int            # at ``batch`` (at most the context length)
    length: int
    max_batch: int             # at ``length``
    rows: tuple[BudgetRow, ...]
    preallocation: Preallocation | None
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class DecoderReport:
    spec: DecoderSpec
    params: int
    weights_bytes: int
    blocks: tuple[BlockParams, ...]
    length: int
    batch: int
    kv: tuple[KvSize, ...]
    budget: KvBudget

    @property
    def layer_blocks(self) -> tuple[BlockParams, ...]:
        return tuple(b for b in self.blocks if b.layer is not None)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["spec"] = self.spec.to_dict()
        return d


# ------------------------------------------------------------------------------ parameters


def _consumers(model: ModelProto) -> dict[str, list[tuple[str, str, int]]]:
    """{tensor: [(node name, op type, input index)]} over every graph (a merged model's branches too)."""
    out: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
    for ref in iter_graphs(model):
        for n in ref.graph.node:
            for i, x in enumerate(n.input):
                if x:
                    out[x].append((n.name, n.op_type, i))
    return out


def _nbits_k(model: ModelProto) -> dict[str, int]:
    """{MatMulNBits weight: K * N} (its logical size)."""
    out = {}
    for ref in iter_graphs(model):
        for n in ref.graph.node:
            if n.op_type == "MatMulNBits" and len(n.input) > 1:
                attrs = {a.name: a.i for a in n.attribute}
                if attrs.get("K") and attrs.get("N"):
                    out[n.input[1]] = attrs["K"] * attrs["N"]
    return out


def _layer_of(name: str, consumers: list[str], layers: int) -> int | None:
    """The layer index in the tensor's name, else the one index all its readers' names share (a tensor
    read by several layers, such as a rotary cache, or a final norm scoped past the last layer, is none)."""
    m = _LAYER.search(name)
    if m is not None:
        found = {int(m.group(1))}
    else:
        found = {int(m.group(1)) for c in consumers if (m := _LAYER.search(c))}
        if not found or len(found) > 1:
            return None
    (layer,) = found
    return layer if layer < layers else None


def block_params(model: ModelProto, spec: DecoderSpec) -> tuple[BlockParams, ...]:
    """Parameters and bytes per layer (by the layer index in the initializer's name, else in the names
    of the nodes that read it), then embedding, LM head and the rest."""
    consumers = _consumers(model)
    logical = _nbits_k(model)
    nodes = [n for ref in iter_graphs(model) for n in ref.graph.node]
    head_weights = {x for n in nodes if spec.logits in n.output and n.op_type in ("MatMul", "Gemm", "MatMulNBits")
                    for x in n.input[1:]}
    tables = {spec.input_ids} | ({spec.position_ids} if spec.positions == "learned" else set())
    embedding = {x for n in nodes if n.op_type in ("Gather", "GatherBlockQuantized") and len(n.input) > 1
                 and n.input[1] in tables for x in (n.input[0], *n.input[2:])}
    rows: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    inits = [t for ref in iter_graphs(model) for t in ref.graph.initializer]
    for t in inits:
        uses = consumers.get(t.name, [])
        elements = math.prod(t.dims)
        stored = packed_nbytes(t.data_type, elements) or 0
        params = logical.get(t.name, 0 if uses and all((op, i) in _META for _, op, i in uses) else elements)
        layer = _layer_of(t.name, [name for name, _, _ in uses], spec.layers)
        if layer is not None:
            key = (layer, f"layer {layer}")
        elif t.name in embedding:
            key = (10**9, "embedding")
        elif t.name in head_weights:
            key = (10**9 + 1, "lm head")
        else:
            key = (10**9 + 2, "other")
        row = rows[key]
        row[0] += params
        row[1] += stored
        row[2] += 1
    return tuple(BlockParams(label, order if order < 10**9 else None, *vals)
                 for (order, label), vals in sorted(rows.items()))


# ------------------------------------------------------------------------------ memory


def parse_memory(text: str | int) -> int:
    """'16GiB', '16G' (GiB), '16GB' (10^9), '512MiB', '1.5T', or a plain byte count, from 1 byte to
    2^63 - 1 bytes (else one line naming the domain: 10^400 bytes is not a size)."""
    if isinstance(text, int):
        return bounded_int(text, "memory (bytes)", 1, MAX_MEMORY_BYTES)
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)\s*", str(text)[:200], re.IGNORECASE)
    if not m:
        raise StudioError(f"memory '{str(text)[:40]}' is not a size: write it like 16GiB, 16GB, 512MiB or 8G")
    value, unit, suffix = float(m.group(1)), m.group(2).upper(), m.group(3).lower()
    power = " KMGT".index(unit) if unit else 0
    base = 1000 if suffix == "b" and unit else 1024
    scaled = value * base ** power
    if not math.isfinite(scaled) or scaled > MAX_MEMORY_BYTES:
        raise OutOfRange(f"memory '{str(text)[:24]}{'…' if len(str(text)) > 24 else ''}' is out of range: it must be "
                         "from 1 byte to 2^63 - 1 bytes (8 EiB)")
    size = int(scaled)
    if size <= 0:
        raise StudioError(f"memory '{str(text)[:40]}' must be more than 0 bytes")
    return size


def machine_memory() -> int:
    """Physical RAM of this machine, in bytes."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):   # pragma: no cover - not Linux/macOS
        import psutil

        return int(psutil.virtual_memory().total)


def _preallocation(spec: DecoderSpec) -> tuple[int, str] | None:
    """(max_length, where it comes from) when the runtime that runs this convention allocates the cache for
    max_length up front: onnxruntime-genai with past_present_share_buffer (its model builder's setting
    for GroupQueryAttention models) holds past and present in one buffer of max_length tokens."""
    rc = spec.runtime
    if rc is not None and rc.past_present_share_buffer:
        length = rc.max_length or rc.context_length or spec.context
        if length:
            which = "search.max_length" if rc.max_length else "context_length"
            return length, f"{rc.file}: past_present_share_buffer, {which} {length}"
    if rc is None and spec.convention == "genai" and spec.context:
        return spec.context, (f"the model builder's default for GroupQueryAttention models (past_present_share_buffer, "
                              f"max_length = context {spec.context}); no genai_config.json beside the model")
    return None


def kv_budget(spec: DecoderSpec, weights_bytes: int, *, memory: int | str | None = None, kv_dtype: str | None = None,
              batch: int = 1, length: int | None = None) -> KvBudget:
    """The largest batch x length whose cache fits ``memory`` (default: this machine's RAM) beside the
    weights, at ``kv_dtype`` (default: the model's)."""
    batch = bounded_int(batch, "batch", 1, MAX_DIM)
    length = bounded_int(length if length is not None else spec.context or DEFAULT_LENGTH, "KV length", 1, MAX_DIM)
    source = "given" if memory is not None else "this machine's RAM"
    mem = parse_memory(memory) if memory is not None else machine_memory()
    dtype = kv_dtype or spec.kv_dtype
    per_token = spec.kv_bytes_per_token(dtype)
    available = max(0, mem - weights_bytes)
    max_tokens = available // per_token if per_token else 0
    max_length = max_tokens // batch
    if spec.context:
        max_length = min(max_length, spec.context)
    lengths = sorted({n for n in BUDGET_LENGTHS if not spec.context or n <= spec.context} | {length}
                     | ({spec.context} if spec.context else set()))
    rows = tuple(BudgetRow(n, max_tokens // n) for n in lengths)
    warnings: list[str] = []
    where = f"the {human_bytes(mem)} {'given' if memory is not None else 'of this machine'}"
    if weights_bytes >= mem:
        warnings.append(f"the weights alone ({human_bytes(weights_bytes)}) do not fit {where}")
    need = batch * length * per_token
    if need > available and weights_bytes < mem:
        warnings.append(f"batch {batch} x length {length} needs {human_bytes(need)} of {dtype} KV cache beside "
                        f"{human_bytes(weights_bytes)} of weights, more than {where}; at most batch "
                        f"{max_tokens // length} at this length")
    if spec.context and length > spec.context:
        warnings.append(f"length {length} is beyond the model's context of {spec.context} positions")
    pre = None
    found = _preallocation(spec)
    if found:
        pre_len, pre_src = found
        pre_bytes = batch * pre_len * per_token
        pre = Preallocation("onnxruntime-genai", pre_len, pre_src, pre_bytes, pre_bytes + weights_bytes <= mem)
        if not pre.fits:
            warnings.append(f"onnxruntime-genai preallocates the KV cache for max_length {pre_len} ({pre_src}): "
                            f"batch {batch} needs {human_bytes(pre_bytes)} of cache + {human_bytes(weights_bytes)} "
                            f"of weights, more than {where}; lower search.max_length (at most "
                            f"{max_tokens // batch if batch else 0}) or the batch")
    return KvBudget(mem, source, weights_bytes, dtype, per_token, available, max_tokens, batch, max_length, length,
                    max_tokens // length, rows, pre, tuple(warnings))


def decoder_report(model: ModelProto, spec: DecoderSpec, *, length: int | None = None, batch: int = 1,
                   memory: int | str | None = None, kv_dtype: str | None = None) -> DecoderReport:
    """Blocks, KV sizes per dtype at ``length`` x ``batch`` (default: the context, 1) and the KV budget."""
    blocks = block_params(model, spec)
    weights = sum(b.bytes for b in blocks)
    budget = kv_budget(spec, weights, memory=memory, kv_dtype=kv_dtype, batch=batch, length=length)
    dtypes = tuple(dict.fromkeys((spec.kv_dtype, *KV_DTYPES, *((kv_dtype,) if kv_dtype else ()))))
    kv = tuple(KvSize(d, spec.kv_bytes_per_token(d), spec.kv_bytes_per_token(d) * budget.length * batch)
               for d in dtypes if _known(d))
    return DecoderReport(spec, sum(b.params for b in blocks), weights, blocks, budget.length, batch, kv, budget)


def _known(dtype: str) -> bool:
    try:
        kv_itemsize(dtype)
    except StudioError:
        return False
    return True

