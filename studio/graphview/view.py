"""Views of a graph: the overview of the whole model (aggregated to fit a
budget of drawn items), and detail views of a region (a group, a node's
k-hop neighbourhood, a diff region, search hits) small enough for graphviz.

A ``GraphView`` is what every renderer draws (ECharts option, DOT, SVG,
HTML): items, edges, positions, the overlay resolved on the items, and a
note when not everything could be drawn at once (R20: aggregate, never hang).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from studio.core.types import shape_text
from studio.graphview.hierarchy import Hierarchy, build_hierarchy
from studio.graphview.layout import Layout, layered_layout
from studio.graphview.model import INPUT, OUTPUT, GraphModel
from studio.graphview.overlays import Overlay, Painted, op_type_overlay, paint
from studio.graphview.project import GROUP, NODE, Projection, auto_level, project

# ECharts drew 10,000 nodes and 12,500 edges in ~4 s here; 12k items keeps a
# 10k-node model whole and aggregates anything larger.
OVERVIEW_BUDGET = 12_000
# st.graphviz_chart lays out in the browser: 500 nodes in 1.4 s, blank from ~2,000.
DETAIL_BUDGET = 300
MAX_HOPS = 10
# Above this many nodes a view is drawn before inspect (shape inference takes seconds at
# 100k nodes): shapes and FLOPs come on request.
FAST_PATH_NODES = 50_000
SEARCH_LIMIT = 200


@dataclass(frozen=True)
class GraphView:
    title: str
    mode: str                             # overview | region
    graph: GraphModel = field(repr=False)
    hierarchy: Hierarchy = field(repr=False)
    projection: Projection = field(repr=False)
    layout: Layout = field(repr=False)
    painted: Painted | None = field(repr=False)
    note: str | None = None               # what was aggregated or left out, for the user
    highlight: frozenset[int] = frozenset()   # item indices (search hits, the focused node)
    focus: int | None = None              # item index of the focus node
    details: dict = field(default_factory=dict, repr=False)   # node id -> extra hover line (Overlay.details)

    @property
    def items(self):
        return self.projection.items

    def __len__(self) -> int:
        return len(self.projection.items)

    def item_key(self, i: int) -> str:
        """Node id, or ``group:<key>`` for a collapsed group (stable across reruns)."""
        it = self.projection.items[i]
        return self.graph.nodes[it.ref].id if it.kind == NODE else f"group:{self.hierarchy.groups[it.ref].key}"

    def item_label(self, i: int) -> str:
        it = self.projection.items[i]
        if it.kind == GROUP:
            g = self.hierarchy.groups[it.ref]
            return f"{g.label} ({g.size:,})"
        n = self.graph.nodes[it.ref]
        if n.kind in (INPUT, OUTPUT):
            return n.name
        short = n.name.rsplit("/", 1)[-1] if n.name else ""
        return short if short and short != n.op_type else n.op_type

    def members(self, i: int) -> list[int]:
        it = self.projection.items[i]
        return [it.ref] if it.kind == NODE else self.hierarchy.leaves(it.ref)

    def tooltip_lines(self, i: int) -> list[tuple[str, str]]:
        """(key, value) lines describing an item; model text, escaped by each renderer.
        Big drawings list fewer tensors per node (the payload grows with every line)."""
        it = self.projection.items[i]
        ports = 4 if len(self.projection.items) <= 2000 else 2
        lines: list[tuple[str, str]] = []
        if it.kind == GROUP:
            g = self.hierarchy.groups[it.ref]
            lines.append(("group", g.label))
            lines.append(("kind", f"{g.kind} · {g.size:,} nodes"))
            if g.note:
                lines.append(("note", g.note))
            hist = Counter(self.graph.nodes[k].op_type for k in self.hierarchy.leaves(it.ref)
                           if self.graph.nodes[k].kind not in (INPUT, OUTPUT))
            if hist:
                lines.append(("ops", ", ".join(f"{op} ×{c}" for op, c in hist.most_common(6))))
        else:
            n = self.graph.nodes[it.ref]
            lines.append(("node", n.name or n.id))
            lines.append(("op", (f"{n.domain}::" if n.domain else "") + n.op_type))
            if n.id != n.name:
                lines.append(("id", n.id))
            for label, names in (("in", n.inputs), ("out", n.outputs)):
                for t in [t for t in names if t][:ports]:
                    info = self.graph.tensors.get(t)
                    lines.append((label, f"{t}  {info.dtype} {shape_text(info.shape, 12)}" if info else t))
                if len(names) > ports:
                    lines.append((label, f"… {len(names) - ports} more"))
            if n.flops:
                lines.append(("FLOPs", f"{n.flops:,}"))
            extra = self.details.get(n.id)
            if extra:
                lines.append(("diff", extra))
        if self.painted is not None and not (it.kind == NODE and self.painted.name == "op type"):
            lines.append((self.painted.name, self.painted.text(i)))      # (a node's op is already listed)
        return lines

    def edge_lines(self, e: int) -> list[tuple[str, str]]:
        ve = self.projection.edges[e]
        if ve.count > 1:
            return [("edges", f"{ve.count} tensors")]
        info = self.graph.tensors.get(ve.tensor)
        return [("tensor", ve.tensor)] + ([("type", f"{info.dtype} {shape_text(info.shape, 12)}")] if info else [])

    def edge_label(self, e: int) -> str:
        ve = self.projection.edges[e]
        if ve.count > 1:
            return f"×{ve.count}"
        info = self.graph.tensors.get(ve.tensor)
        return f"{info.dtype} {shape_text(info.shape, 10)}" if info else ""


def _paint(graph: GraphModel, hierarchy: Hierarchy, proj: Projection, overlay: Overlay | None) -> Painted | None:
    if overlay is None:
        return None
    members: list[list[str]] = [[] for _ in proj.items]
    for k, i in enumerate(proj.item_of_node):
        if i != -1:
            members[i].append(graph.nodes[k].id)
    return paint(overlay, members)


def _finish(title: str, mode: str, graph: GraphModel, hierarchy: Hierarchy, proj: Projection,
            overlay: Overlay | None, note: str | None, highlight_nodes: Iterable[int] = (),
            focus_node: int | None = None) -> GraphView:
    layout = layered_layout(len(proj.items), [(e.src, e.dst) for e in proj.edges])
    hl = frozenset(proj.item_of_node[k] for k in highlight_nodes if proj.item_of_node[k] != -1)
    focus = proj.item_of_node[focus_node] if focus_node is not None else None
    return GraphView(title, mode, graph, hierarchy, proj, layout,
                     _paint(graph, hierarchy, proj, overlay if overlay is not None else op_type_overlay(graph)),
                     note, hl, None if focus == -1 else focus, dict(overlay.details) if overlay else {})


def overview(graph: GraphModel, hierarchy: Hierarchy | None = None, *, level: int | None = None,
             budget: int = OVERVIEW_BUDGET, expanded: Collection[str] = (), collapsed: Collection[str] = (),
             overlay: Overlay | None = None, highlight: Iterable[int] = ()) -> GraphView:
    """The whole model. ``level=None`` picks the deepest level that fits ``budget``;
    a level (or expansions) that would draw more than ``budget`` items is cut back."""
    hierarchy = hierarchy or build_hierarchy(graph)
    counts = hierarchy.visible_counts()
    deepest = len(counts) - 1
    fit = auto_level(hierarchy, budget)
    asked = fit if level is None else max(1, min(level, deepest))
    chosen = min(asked, fit) if counts[asked] > budget else asked
    proj = project(graph, hierarchy, chosen, expanded=expanded, collapsed=collapsed)
    notes = []
    if chosen < asked:
        notes.append(f"level {asked} would draw {counts[asked]:,} items; showing level {chosen}")
    if len(proj.items) > budget:             # expansions pushed it over: drop them
        proj = project(graph, hierarchy, chosen, collapsed=collapsed)
        notes.append("expanded groups were folded back to stay within the drawing budget")
    n_nodes = len(graph.nodes)
    if len(proj.items) < n_nodes:
        notes.append(f"{n_nodes:,} nodes drawn as {len(proj.items):,} items (level {chosen} of {deepest}); "
                     "expand a group, raise the level or open a region to see more")
    return _finish(graph.name, "overview", graph, hierarchy, proj, overlay, "; ".join(notes) or None,
                   highlight)


def neighbourhood(graph: GraphModel, node: int, hops: int, limit: int = DETAIL_BUDGET) -> list[int]:
    """Nodes within ``hops`` edges of ``node`` (both directions), nearest first, at most ``limit``."""
    hops = max(0, min(hops, MAX_HOPS))
    dist = {node: 0}
    queue = deque([node])
    while queue and len(dist) < limit:
        u = queue.popleft()
        if dist[u] >= hops:
            continue
        for e in (*graph.pred[u], *graph.succ[u]):
            ed = graph.edges[e]
            v = ed.src if ed.dst == u else ed.dst
            if v not in dist:
                dist[v] = dist[u] + 1
                queue.append(v)
                if len(dist) >= limit:
                    break
    return list(dist)


def region(graph: GraphModel, hierarchy: Hierarchy, nodes: Sequence[int], *, title: str,
           budget: int = DETAIL_BUDGET, overlay: Overlay | None = None, focus: int | None = None,
           highlight: Iterable[int] = ()) -> GraphView:
    """A detail view of ``nodes``, every group open (clusters in DOT); a region larger
    than ``budget`` keeps its first ``budget`` nodes in dataflow order (and the
    focus node), with a note."""
    nodes = list(dict.fromkeys(nodes))
    note = None
    deepest = hierarchy.max_depth + 1
    if len(nodes) > budget:
        keep = sorted(nodes, key=hierarchy.order.__getitem__)[:budget]
        if focus is not None and focus not in keep:
            keep[-1] = focus
        note = f"region has {len(nodes):,} nodes; showing the first {budget:,} in dataflow order"
        nodes = keep
    proj = project(graph, hierarchy, deepest, nodes=nodes)
    return _finish(title, "region", graph, hierarchy, proj, overlay, note, highlight, focus)


def group_nodes(hierarchy: Hierarchy, key: str) -> list[int]:
    idx = hierarchy.by_key().get(key)
    return [] if idx is None else hierarchy.leaves(idx)


def search(graph: GraphModel, query: str, limit: int = SEARCH_LIMIT) -> list[int]:
    """Nodes whose id, name, op type or input/output tensor names contain ``query`` (any case)."""
    q = query.strip().lower()
    if not q:
        return []
    out = []
    for n in graph.nodes:
        if q in n.id.lower() or q in n.name.lower() or q in n.op_type.lower() \
                or any(q in t.lower() for t in (*n.inputs, *n.outputs)):
            out.append(n.index)
            if len(out) >= limit:
                break
    return out
