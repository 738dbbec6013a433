"""The KV cache's contract, read from a model's I/O: which inputs are past caches, which outputs present
ones, which present output feeds which past input at the next step, and whether the two sides fit
together (names, counts, layout, dtype). A mismatch is one ``DecoderError`` line naming both sides."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from onnx import ModelProto, ValueInfoProto

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.types import Dim, value_info

# past_key_values.3.key, past.3.value, past_key_value.3.key, cache.3.key | past_key, past_value_3
PAST = (re.compile(r"^(?:past_key_values|past_key_value|past|cache)[._](\d+)[._](key|value)$"),
        re.compile(r"^past_(key|value)(?:s)?(?:[._](\d+))?$"))
PRESENT = (re.compile(r"^(?:present|present_key_values|present_key_value|present_cache|cache_out)[._](\d+)[._]"
                      r"(key|value)$"),
           re.compile(r"^present_(key|value)(?:s)?(?:[._](\d+))?$"))

CacheKey = tuple[int, str]          # (layer, "key" | "value")


class DecoderError(StudioError):
    """The model has a KV cache whose inputs and outputs do not fit together."""

    code = ErrorCode.DECODER_CACHE_MISMATCH


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


def short(text: str, limit: int = 80) -> str:
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shape_str(shape: tuple[Dim, ...] | None) -> str:
    if shape is None:
        return "[?]"
    return "[" + ", ".join("?" if d is None else short(str(d), 40) for d in shape) + "]"


def range_text(names: Iterable[str], keys: Iterable[CacheKey]) -> str:
    """'past_key_values.0..3.key/value' for a regular set, else the first names."""
    names, keys = list(names), sorted(keys)
    if not names:
        return "none"
    layers = sorted({k[0] for k in keys})
    m = re.match(r"^(.*?[._])(\d+)([._])(key|value)$", names[0])
    if m and len(layers) > 1:
        return f"{short(m.group(1), 60)}{layers[0]}..{layers[-1]}{m.group(3)}key/value"
    return ", ".join(short(n, 60) for n in names[:3]) + (" ..." if len(names) > 3 else "")


def _key(name: str, patterns: tuple[re.Pattern, re.Pattern]) -> CacheKey | None:
    m = patterns[0].match(name)
    if m:
        return int(m.group(1)), m.group(2)
    m = patterns[1].match(name)
    if m:
        return int(m.group(2) or 0), m.group(1)
    return None


def graph_inputs(model: ModelProto) -> list[ValueInfoProto]:
    """The real inputs (initializers listed as inputs left out)."""
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def cache_io(model: ModelProto) -> tuple[dict[CacheKey, ValueInfoProto], dict[CacheKey, ValueInfoProto]]:
    """({(layer, kind): past input}, {(layer, kind): present output}) by name."""
    past = {k: vi for vi in graph_inputs(model) if (k := _key(vi.name, PAST)) is not None}
    present = {k: vi for vi in model.graph.output if (k := _key(vi.name, PRESENT)) is not None}
    return past, present


def is_single_layer(name: str) -> bool:
    """``present_key`` / ``present_value``: one attention layer's cache (no layer number)."""
    return PRESENT[1].match(name) is not None


def cache_layout(past: tuple[Dim, ...] | None, present: tuple[Dim, ...] | None) -> str:
    """"bnsh" ([batch, kv_heads, length, head_dim], the conventions' layout) or "bsnh" when the heads are
    fixed on axis 2 and the length axis 1 is dynamic."""
    for shape in (past, present):
        if shape and len(shape) == 4 and not isinstance(shape[1], int) and isinstance(shape[2], int):
            return "bsnh"
    return "bnsh"


def seq_dim(c: CacheEntry) -> Dim:
    """The cache's length dim (of the past input when there is one)."""
    shape = c.past_shape or c.present_shape
    if not shape or len(shape) != 4:
        return None
    return shape[2] if cache_layout(c.past_shape, c.present_shape) == "bnsh" else shape[1]


def check_cache(past: dict, present: dict) -> None:
    """Raise one ``DecoderError`` line naming both sides when the cache inputs and outputs do not fit."""
    if past and not present:
        raise DecoderError(f"cache inputs do not match the outputs: {len(past)} cache inputs "
                           f"({range_text([v.name for v in past.values()], past)}) but no present output; a decoder "
                           "must return its cache (present.N.key/value) to be fed back")
    if not past:
        return
    missing_out = [past[k].name for k in sorted(past) if k not in present]
    missing_in = [present[k].name for k in sorted(present) if k not in past]
    if missing_out or missing_in:
        side = (f"input {short(missing_out[0])} has no matching present output" if missing_out
                else f"output {short(missing_in[0])} has no matching past input")
        raise DecoderError(f"cache inputs do not match the outputs: {len(past)} cache inputs "
                           f"({range_text([past[k].name for k in sorted(past)], past)}) vs {len(present)} present "
                           f"outputs ({range_text([present[k].name for k in sorted(present)], present)}): {side}; "
                           "re-export so that every past_key_values.N.key/value has its present.N.key/value")
    for key in sorted(past):
        a, b = value_info(past[key]), value_info(present[key])
        what = _difference(a.dtype, b.dtype, a.shape, b.shape)
        if what:
            raise DecoderError(f"cache input {short(a.name)} {a.dtype}{shape_str(a.shape)} does not match output "
                               f"{short(b.name)} {b.dtype}{shape_str(b.shape)}: {what}; the output must have the "
                               "input's layout to be fed back")


def _difference(dtype_a: str, dtype_b: str, a: tuple[Dim, ...] | None, b: tuple[Dim, ...] | None) -> str | None:
    if dtype_a != dtype_b:
        return f"dtype {dtype_a} vs {dtype_b}"
    if a is None or b is None:
        return None
    if len(a) != len(b):
        return f"rank {len(a)} vs {len(b)}"
    if len(a) != 4:
        return f"rank {len(a)} (a cache is [batch, kv_heads, length, head_dim])"
    layout = cache_layout(a, b)
    for label, ax in (("batch", 0), ("KV heads", 1 if layout == "bnsh" else 2), ("head dim", 3)):
        da, db = a[ax], b[ax]
        if isinstance(da, int) and isinstance(db, int) and da != db:
            return f"{label} {da} vs {db}"
        if label == "batch" and isinstance(da, str) and isinstance(db, str) and da != db:
            return f"batch dim '{short(da, 30)}' vs '{short(db, 30)}'"
    return None


def cache_entries(past: dict, present: dict) -> tuple[CacheEntry, ...]:
    """One entry per present output, with its past input and the sizes its shapes fix."""
    out = []
    for key in sorted(present):
        pv = past.get(key)
        a = value_info(pv) if pv is not None else None
        b = value_info(present[key])
        shape = (a.shape if a is not None else None) or b.shape
        layout = cache_layout(a.shape if a else None, b.shape)
        heads = dim = None
        if shape is not None and len(shape) == 4:
            h, d = (shape[1], shape[3]) if layout == "bnsh" else (shape[2], shape[3])
            heads = h if isinstance(h, int) else None
            dim = d if isinstance(d, int) else None
        out.append(CacheEntry(key[0], key[1], pv.name if pv is not None else None, present[key].name, heads, dim,
                              (a or b).dtype, a.shape if a else None, b.shape))
    return tuple(out)
