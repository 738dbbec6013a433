"""Drawing a ``GraphDiff``: the diff status as an overlay on either side
(side-by-side mode), the union of both graphs coloured by status (overlay
mode), the changed region for a detail view, and the tables (op counts
before/after, pass lineage) for the UI and the HTML report.
"""

from __future__ import annotations

from dataclasses import dataclass

from studio.graphview.diff import ADDED, CHANGED, REMOVED, UNCHANGED, GraphDiff
from studio.graphview.hierarchy import build_hierarchy
from studio.graphview.html import Panel, Table
from studio.graphview.lineage import describe
from studio.graphview.model import OP, GEdge, GNode, GraphInfo, GraphModel
from studio.graphview.overlays import MISSING, Overlay
from studio.graphview.view import DETAIL_BUDGET, OVERVIEW_BUDGET, GraphView, overview, region

STATUS_LEGEND = ((UNCHANGED, MISSING), (CHANGED, "#edc948"), (ADDED, "#59a14f"), (REMOVED, "#e15759"))
REMOVED_PREFIX = "removed:"     # union-graph ids of nodes only in the first model


def status_overlay(d: GraphDiff, side: str) -> Overlay:
    """The diff as an overlay on one side ("a": removed/changed, "b": added/changed),
    with each node's reasons and lineage on hover."""
    values = d.status_of_a() if side == "a" else d.status_of_b()
    details: dict[str, str] = {}
    for e in d.entries:
        idx = e.a if side == "a" else e.b
        if idx is None:
            continue
        g = d.a if side == "a" else d.b
        text = d.note(e)
        if text:
            details[g.nodes[idx].id] = text
    return Overlay("diff", "categorical", values, legend=STATUS_LEGEND, aggregate="worst",
                   description="Diff status; a group shows its most significant change.", details=details)


@dataclass(frozen=True)
class Union:
    graph: GraphModel
    overlay: Overlay
    status: tuple[str, ...]          # per union node


def union_graph(d: GraphDiff) -> Union:
    """Both graphs in one: every node of the second graph, plus the removed nodes of
    the first (ids prefixed ``removed:``), with the edges of both."""
    a, b = d.a, d.b
    nodes: list[GNode] = list(b.nodes)
    status = [UNCHANGED] * len(b.nodes)
    details: dict[str, str] = {}
    a_to_u: dict[int, int] = {}
    for e in d.entries:
        text = d.note(e)
        if e.b is not None:
            status[e.b] = e.status
            if e.a is not None:
                a_to_u[e.a] = e.b
            if text:
                details[b.nodes[e.b].id] = text
    graphs = list(b.graphs)
    scope_to_b = {gi.scope: i for i, gi in enumerate(b.graphs)}
    for e in d.entries:
        if e.status != REMOVED:
            continue
        an = a.nodes[e.a]
        k = len(nodes)
        gi = scope_to_b.get(a.graphs[an.graph].scope, 0)
        nodes.append(GNode(k, f"{REMOVED_PREFIX}{an.id}", an.name, an.op_type, an.domain, an.kind, gi,
                           an.inputs, an.outputs, an.flops))
        status.append(REMOVED)
        a_to_u[e.a] = k
        text = describe(list(e.lineage)) if e.lineage else ""
        if text:
            details[nodes[k].id] = text
    edges: list[GEdge] = list(b.edges)
    seen = {(e.src, e.dst, e.tensor) for e in edges}
    for e in a.edges:
        if e.src in a_to_u and e.dst in a_to_u:
            s, t = a_to_u[e.src], a_to_u[e.dst]
            if (s, t, e.tensor) not in seen and (status[s] == REMOVED or status[t] == REMOVED):
                seen.add((s, t, e.tensor))
                edges.append(GEdge(s, t, e.tensor))
    tensors = {**a.tensors, **b.tensors}
    protos = tuple(list(b.protos) + [a.protos[e.a] if a.protos else None for e in d.entries if e.status == REMOVED])
    graphs = graphs or [GraphInfo("", None, None, "", None)]
    g = GraphModel(f"{a.name} → {b.name}", tuple(nodes), tuple(edges), tuple(graphs), tensors, protos,
                   a.constants | b.constants, {**a.weights, **b.weights}, {**a.values, **b.values})
    ov = Overlay("diff", "categorical", {n.id: s for n, s in zip(nodes, status)}, legend=STATUS_LEGEND,
                 aggregate="worst", description="Diff status; a group shows its most significant change.",
                 details=details)
    return Union(g, ov, tuple(status))


def changed_nodes(u: Union, context_hops: int = 1) -> list[int]:
    """Union-graph nodes that differ, plus ``context_hops`` of unchanged neighbours."""
    core = [k for k, s in enumerate(u.status) if s != UNCHANGED and u.graph.nodes[k].kind == OP]
    region = set(core)
    frontier = set(core)
    for _ in range(max(0, context_hops)):
        nxt = set()
        for k in frontier:
            for e in (*u.graph.pred[k], *u.graph.succ[k]):
                ed = u.graph.edges[e]
                nxt.add(ed.src if ed.dst == k else ed.dst)
        frontier = nxt - region
        region |= nxt
    return sorted(region)


SIDE, OVERLAY = "side-by-side", "overlay"
MAX_ROWS = 500


def op_count_table(d: GraphDiff) -> Table:
    rows = tuple((r.op_type, str(r.before), str(r.after), f"{r.delta:+d}" if r.delta else "0")
                 for r in d.op_counts)
    return Table("Op counts before and after", ("op type", "before", "after", "change"), rows)


def changes_table(d: GraphDiff, limit: int = MAX_ROWS) -> Table:
    """Every node that is not unchanged: status, name, op, what changed and which pass."""
    rows = []
    for status in (REMOVED, ADDED, CHANGED):
        for e in d.by_status(status):
            n = d.b.nodes[e.b] if e.b is not None else d.a.nodes[e.a]
            passes = ", ".join(dict.fromkeys(f"{c.kind} by {c.pass_name}" for c in e.lineage))
            rows.append((status, n.name or n.id, n.op_type, "; ".join(e.reasons), passes))
    caption = "Changed nodes" + (f" (first {limit:,} of {len(rows):,})" if len(rows) > limit else "")
    return Table(caption, ("status", "node", "op", "what changed", "pass"), tuple(rows[:limit]))


def lineage_table(d: GraphDiff) -> Table:
    """Per pass: how many nodes it removed, added, fused, replaced or changed (as recorded)."""
    counts: dict[tuple[str, str], int] = {}
    for e in d.entries:
        for c in e.lineage:
            counts[(c.pass_name, c.kind)] = counts.get((c.pass_name, c.kind), 0) + 1
    rows = tuple((p, k, str(n)) for (p, k), n in counts.items())
    return Table("Pass lineage (nodes named by each pass record)", ("pass", "change", "nodes"), rows)


def diff_panels(d: GraphDiff, mode: str = OVERLAY, *, budget: int = OVERVIEW_BUDGET,
                level: int | None = None) -> list[Panel]:
    """Overview panels: one union graph (overlay mode) or both graphs (side by side)."""
    if mode == SIDE:
        return [Panel(f"before: {d.a.name}", overview(d.a, level=level, budget=budget, overlay=status_overlay(d, "a"))),
                Panel(f"after: {d.b.name}", overview(d.b, level=level, budget=budget, overlay=status_overlay(d, "b")))]
    u = union_graph(d)
    return [Panel(f"{d.a.name} → {d.b.name}", overview(u.graph, level=level, budget=budget, overlay=u.overlay))]


def diff_region(d: GraphDiff, *, hops: int = 1, budget: int = DETAIL_BUDGET) -> GraphView:
    """The changed nodes and ``hops`` of context, on the union graph, for graphviz."""
    u = union_graph(d)
    hier = build_hierarchy(u.graph)
    nodes = changed_nodes(u, hops)
    return region(u.graph, hier, nodes, title=f"changes {d.a.name} → {d.b.name}", budget=budget,
                  overlay=u.overlay)


def summary_line(d: GraphDiff) -> str:
    c = d.counts()
    return (f"{c[REMOVED]} removed, {c[ADDED]} added, {c[CHANGED]} changed, {c[UNCHANGED]} unchanged"
            + (f"; passes: {', '.join(d.passes)}" if d.passes else ""))

