"""Overlays: one mechanism to colour the graph by any per-node data.

An overlay is data: ``Overlay(name, kind, values={node_id: value}, unit,
legend, aggregate)``. Categorical overlays colour by category (op type,
engine support status, diff status), numeric ones by a colour scale (FLOPs
share, time share, numeric error). A collapsed group shows its members'
values aggregated (``sum``, ``max``, ``mean``, ``worst`` category, ``mode``).

Where overlays come from: *providers* registered by name. A provider gets
an ``OverlayContext`` (the graph, the summary when there is one, and
``data``: results other features hand over) and returns the overlays it can
make from it, or none. Built in: op type and FLOPs share (from the model),
and providers that read these ``data`` keys when present::

    data["compatibility"] = {engine: {node_id: "supported"|"partial"|"unsupported"|"unknown"}}
    data["node_times"]    = {node_id: seconds}          # from a per-op profile
    data["node_errors"]   = {node_id: float}            # layer-wise comparison error
    data["node_memory"]   = {node_id: bytes}            # bytes live while the node runs (memory plan)

A feature with other data registers its own provider with ``register_overlay``
or builds an ``Overlay`` directly (``compatibility_overlay``,
``time_share_overlay``, ``error_overlay`` fix the kind, legend and aggregation).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from studio.graphview.model import OP, GraphModel
from studio.inspect.summary import ModelSummary
from studio.core.fmt import human_bytes

log = logging.getLogger(__name__)

Kind = Literal["categorical", "numeric"]
Aggregate = Literal["sum", "max", "mean", "worst", "mode"]
Value = str | float

MISSING = "#c9ccd1"          # no value for this node
# Tableau-like categorical palette (readable on white, distinct in pairs).
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#86bcb6", "#8cd17d", "#b6992d", "#d37295", "#a0cbe8", "#ffbe7d", "#499894")
# Viridis, sampled at 9 stops: perceptually ordered, readable for colour-blind users.
SCALE = ("#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962", "#addc30", "#fde725")
STATUS_COLORS = (("supported", "#59a14f"), ("partial", "#edc948"), ("unsupported", "#e15759"),
                 ("unknown", MISSING))


@dataclass(frozen=True)
class Overlay:
    name: str
    kind: Kind
    values: Mapping[str, Value] = field(repr=False)     # node id -> category or number
    unit: str = ""                                      # "%", "ms", "FLOPs"...
    legend: tuple[tuple[str, str], ...] = ()            # categorical: (category, colour), mildest first
    aggregate: Aggregate = "mode"
    scale: Literal["linear", "log"] = "linear"
    description: str = ""
    details: Mapping[str, str] = field(default_factory=dict, repr=False)   # node id -> extra hover line

    def __post_init__(self) -> None:
        if self.kind not in ("categorical", "numeric"):
            raise ValueError(f"overlay kind must be categorical or numeric, not {self.kind!r}")
        if self.kind == "numeric" and self.aggregate not in ("sum", "max", "mean"):
            raise ValueError("numeric overlays aggregate by sum, max or mean")
        if self.kind == "categorical" and self.aggregate not in ("worst", "mode"):
            raise ValueError("categorical overlays aggregate by worst or mode")


@dataclass(frozen=True)
class LegendEntry:
    label: str
    color: str
    count: int = 0


@dataclass(frozen=True)
class Painted:
    """An overlay resolved on drawn items: a value and a colour per item, and the legend."""

    name: str
    kind: Kind
    unit: str
    values: tuple[Value | None, ...]
    colors: tuple[str, ...]
    legend: tuple[LegendEntry, ...]       # categories, or the scale's stops (numeric)
    low: float | None = None
    high: float | None = None

    def text(self, i: int) -> str:
        return format_value(self.values[i], self.kind, self.unit)


def format_value(v: Value | None, kind: str, unit: str) -> str:
    if v is None:
        return "n/a"
    if kind == "categorical":
        return str(v)
    v = float(v)
    if unit == "%":
        return f"{v:.3g}%" if abs(v) >= 0.001 or v == 0 else f"{v:.2e}%"
    if unit == "B":
        return human_bytes(v)
    a = abs(v)
    text = f"{v:.3g}" if 1e-3 <= a < 1e6 or a == 0 else f"{v:.3e}"
    return f"{text} {unit}".strip()


# -- painting ---------------------------------------------------------------

def _aggregate(kind: str, how: str, vals: list[Value], order: Mapping[str, int]) -> Value | None:
    if not vals:
        return None
    if kind == "numeric":
        nums = [float(v) for v in vals]
        return sum(nums) if how == "sum" else max(nums) if how == "max" else sum(nums) / len(nums)
    if how == "worst":
        return max(vals, key=lambda v: (order.get(str(v), -1), str(v)))
    return Counter(map(str, vals)).most_common(1)[0][0]


def _scale_color(t: float) -> str:
    t = min(1.0, max(0.0, t))
    pos = t * (len(SCALE) - 1)
    i = min(int(pos), len(SCALE) - 2)
    f = pos - i
    a, b = SCALE[i], SCALE[i + 1]
    rgb = [round(int(a[k:k + 2], 16) * (1 - f) + int(b[k:k + 2], 16) * f) for k in (1, 3, 5)]
    return "#" + "".join(f"{c:02x}" for c in rgb)


def category_colors(overlay: Overlay, present: Iterable[str]) -> dict[str, str]:
    """Legend colours first, then palette colours by frequency (deterministic)."""
    colors = dict(overlay.legend)
    counts = Counter(present)
    used = set(colors.values())
    free = [c for c in PALETTE if c not in used] or list(PALETTE)
    j = 0
    for cat, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if cat not in colors:
            colors[cat] = free[j % len(free)]
            j += 1
    return colors


def paint(overlay: Overlay, member_ids: Sequence[Sequence[str]]) -> Painted:
    """Resolve ``overlay`` on drawn items; ``member_ids[i]`` are the node ids item ``i`` stands for."""
    order = {c: k for k, (c, _) in enumerate(overlay.legend)}
    values: list[Value | None] = []
    for ids in member_ids:
        vals = [overlay.values[i] for i in ids if i in overlay.values]
        if overlay.kind == "numeric":
            vals = [v for v in vals if isinstance(v, (int, float)) and math.isfinite(v)]
        values.append(_aggregate(overlay.kind, overlay.aggregate, vals, order))
    if overlay.kind == "categorical":
        cats = [str(v) for v in values if v is not None]
        colors = category_colors(overlay, cats)
        counts = Counter(cats)
        legend_order = [c for c, _ in overlay.legend] + sorted(
            (c for c in counts if c not in order), key=lambda c: (-counts[c], c))
        legend = tuple(LegendEntry(c, colors[c], counts.get(c, 0)) for c in legend_order
                       if counts.get(c) or c in order)
        return Painted(overlay.name, overlay.kind, overlay.unit, tuple(values),
                       tuple(MISSING if v is None else colors[str(v)] for v in values), legend)
    nums = [float(v) for v in values if v is not None]
    log_scale = overlay.scale == "log"
    tf = (lambda v: math.log10(v) if v > 0 else None) if log_scale else (lambda v: v)
    tvals = [t for t in (tf(v) for v in nums) if t is not None]
    lo, hi = (min(tvals), max(tvals)) if tvals else (0.0, 0.0)
    span = (hi - lo) or 1.0
    colors = []
    for v in values:
        t = None if v is None else tf(float(v))
        colors.append(MISSING if t is None else _scale_color((t - lo) / span))
    low, high = (min(nums), max(nums)) if nums else (None, None)
    stops = []
    if nums:
        for k in range(5):
            t = lo + span * k / 4 if hi > lo else lo
            raw = 10 ** t if log_scale else t
            stops.append(LegendEntry(format_value(raw, "numeric", overlay.unit), _scale_color(k / 4)))
    return Painted(overlay.name, overlay.kind, overlay.unit, tuple(values), tuple(colors), tuple(stops), low, high)


# -- ready-made overlays for the features that produce the data ---------------

def op_type_overlay(graph: GraphModel) -> Overlay:
    return Overlay("op type", "categorical", {n.id: (f"{n.domain}::{n.op_type}" if n.domain else n.op_type)
                                              for n in graph.nodes if n.kind == OP},
                   aggregate="mode", description="Colour by op type; groups show their most common op.")


def flops_share_overlay(graph: GraphModel) -> Overlay | None:
    flops = {n.id: float(n.flops) for n in graph.nodes if n.flops}
    total = sum(flops.values())
    if total <= 0:
        return None
    return Overlay("FLOPs share", "numeric", {k: 100.0 * v / total for k, v in flops.items()}, unit="%",
                   aggregate="sum", description="Share of the model's FLOPs (from inspect); groups sum.")


def compatibility_overlay(engine: str, status: Mapping[str, str]) -> Overlay:
    """Per-node support status on one engine; a group shows its worst member."""
    return Overlay(f"compatibility: {engine}", "categorical", dict(status), legend=STATUS_COLORS,
                   aggregate="worst", description=f"Whether {engine} can run each node; groups show the worst.")


def time_share_overlay(times: Mapping[str, float], name: str = "time share") -> Overlay:
    """Per-node share of measured time (from a per-op profile); groups sum."""
    total = sum(v for v in times.values() if math.isfinite(v) and v > 0)
    values = {k: 100.0 * v / total for k, v in times.items() if total > 0 and math.isfinite(v)}
    return Overlay(name, "numeric", values, unit="%", aggregate="sum",
                   description="Share of the measured run time; groups sum.")


def error_overlay(errors: Mapping[str, float], name: str = "numeric error", unit: str = "") -> Overlay:
    """Layer-wise numeric error; log colour scale, groups show their largest error."""
    return Overlay(name, "numeric", {k: float(v) for k, v in errors.items()}, unit=unit, aggregate="max",
                   scale="log", description="Error against the reference, per node output; groups show the max.")


def memory_overlay(live: Mapping[str, float], name: str = "live memory") -> Overlay:
    """Bytes live while each node runs (the memory plan); groups show their largest."""
    return Overlay(name, "numeric", {k: float(v) for k, v in live.items()}, unit="B", aggregate="max",
                   description="Bytes live while the node runs (memory plan, ORT's order); groups show the max.")


# -- providers -----------------------------------------------------------------

@dataclass(frozen=True)
class OverlayContext:
    graph: GraphModel
    summary: ModelSummary | None = None
    data: Mapping[str, Any] = field(default_factory=dict)


Provider = Callable[[OverlayContext], Iterable[Overlay]]
_PROVIDERS: dict[str, Provider] = {}


def register_overlay(name: str, provider: Provider, *, replace: bool = False) -> None:
    """Add a provider; ``name`` identifies it (re-registering needs ``replace=True``)."""
    if name in _PROVIDERS and not replace:
        raise ValueError(f"overlay provider {name!r} is already registered")
    _PROVIDERS[name] = provider


def unregister_overlay(name: str) -> None:
    _PROVIDERS.pop(name, None)


def available_overlays(ctx: OverlayContext) -> dict[str, Overlay]:
    """Every overlay the registered providers can make for this context, by name.
    A failing provider is logged and skipped: one bad feature never blanks the graph."""
    out: dict[str, Overlay] = {}
    for pname, provider in _PROVIDERS.items():
        try:
            for ov in provider(ctx) or ():
                out.setdefault(ov.name, ov)
        except Exception:
            log.warning("overlay provider %s failed", pname, exc_info=True)
    return out


def _builtin(ctx: OverlayContext) -> Iterable[Overlay]:
    yield op_type_overlay(ctx.graph)
    fl = flops_share_overlay(ctx.graph)
    if fl is not None:
        yield fl


def _from_data(ctx: OverlayContext) -> Iterable[Overlay]:
    for engine, status in sorted((ctx.data.get("compatibility") or {}).items()):
        yield compatibility_overlay(str(engine), status)
    if ctx.data.get("node_times"):
        yield time_share_overlay(ctx.data["node_times"])
    if ctx.data.get("node_errors"):
        yield error_overlay(ctx.data["node_errors"])
    if ctx.data.get("node_memory"):
        yield memory_overlay(ctx.data["node_memory"])


register_overlay("model", _builtin)
register_overlay("data", _from_data)


def compatibility_data(verdicts: Iterable) -> dict[str, dict[str, str]]:
    """``data["compatibility"]`` from a check report's node verdicts (objects with ``engine``,
    ``target``, ``node``, ``status``): one overlay per engine target; the report's
    "restricted" is this overlay's "partial"."""
    out: dict[str, dict[str, str]] = {}
    for v in verdicts:
        status = {"restricted": "partial"}.get(v.status, v.status)
        key = f"{v.engine} {v.target}".strip()
        out.setdefault(key, {})[v.node] = status
    return out
