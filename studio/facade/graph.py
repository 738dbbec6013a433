"""The graph view, the interactive viewer and the diff of two models or versions.

A room of the facade (``studio.api`` names it; docs/architecture.md section 1)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TYPE_CHECKING

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.findings import Report
from studio.core.gcpause import without_gc
from studio.core.model import ModelHandle
from studio.core.paths import atomic_write_bytes
from studio.core.requests import GraphRequest
from studio.core.workspace import Workspace
from studio.facade.inspect import inspect
from studio.graphview.diff import diff_graphs, GraphDiff
from studio.graphview.diffview import (
    changes_table,
    diff_panels,
    diff_region,
    lineage_table,
    op_count_table,
    OVERLAY,
    summary_line,
)
from studio.graphview.dot import SVG_MAX_ITEMS, to_dot
from studio.graphview.echarts import echarts_option
from studio.graphview.html import legend_html, Panel, render_html, Table
from studio.graphview.hierarchy import build_hierarchy
from studio.graphview.index import GraphIndex, index_graph, index_model, with_summary
from studio.graphview.lineage import lineage_between
from studio.graphview.model import build_graph
from studio.graphview.output import format_of, write_graph, Written
from studio.graphview.overlay_files import DATA_OVERLAYS, overlay_data_from_json
from studio.graphview.overlays import available_overlays, compatibility_data, Overlay, OverlayContext
from studio.graphview.project import auto_level
from studio.graphview.scene import build_scene, SceneStats
from studio.graphview.view import (
    DETAIL_BUDGET,
    FAST_PATH_NODES,
    GraphView,
    group_nodes,
    neighbourhood,
    overview,
    OVERVIEW_BUDGET,
    region,
    search,
)
from studio.graphview.viewer import diff_page, graph_page
from studio.inspect.summary import ModelSummary

if TYPE_CHECKING:
    from studio.projects import ProjectModel

__all__ = [
    "GraphDiff", "GraphIndex", "GraphView", "Overlay", "Table", "compatibility_overlay_data", "graph_index",
    "graph_index_inspected",
    "graph_prefers_fast_path", "graph_levels", "search_nodes", "graph_overlays", "graph_view",
    "graph_echarts", "graph_dot", "graph_legend_html", "graph_html", "write_graph_view", "graph_scene",
    "graph_viewer_html", "write_graph_viewer", "diff_viewer_html", "write_diff_viewer", "diff",
    "diff_versions", "diff_views", "diff_region_view", "diff_tables", "write_diff",
    "overlay_data_from_json", "DATA_OVERLAYS", "SVG_MAX_ITEMS",
]


def compatibility_overlay_data(report: Report) -> dict[str, dict[str, str]]:
    """The check report as Graph-page overlay data: per engine target, each node's status."""
    return compatibility_data(report.nodes)


@without_gc        # builds ~10^6 objects that live on: no full collections meanwhile (core.gcpause)
def graph_index(handle: ModelHandle, summary: ModelSummary | None = None) -> GraphIndex:
    """The model's graph and hierarchy (build once, pass to ``graph_view`` many times).
    Without ``summary`` it is faster (no shape inference) but edges lack shapes and FLOPs."""
    return index_model(handle, summary)


@without_gc        # builds ~10^6 objects that live on: no full collections meanwhile (core.gcpause)
def graph_index_inspected(handle: ModelHandle, dims: Mapping[str, int] | GraphRequest | None = None, *,
                          pool_key: str = "default") -> tuple[GraphIndex, ModelSummary]:
    """``graph_index(handle, inspect(handle, dims, memory=False))`` and that summary, sooner: the hierarchy
    (names and wiring only) is built while inspect waits for its sandbox worker (shape inference, the one
    ORT run), then the shapes and FLOPs are attached. On a code-built 10k-node model the hierarchy is
    ~20 % of the viewer page's build and inspect's worker ~40 %. ``dims`` may be the ``GraphRequest``
    whose dims size the shapes."""
    if isinstance(dims, GraphRequest):
        dims = dict(dims.dims)
    with ThreadPoolExecutor(1, thread_name_prefix="graph-inspect") as pool:
        pending = pool.submit(inspect, handle, dims, pool_key=pool_key, memory=False)
        plain = build_graph(handle)
        hierarchy = build_hierarchy(plain)
        summary = pending.result()
    return index_graph(with_summary(plain, summary), hierarchy), summary


def graph_prefers_fast_path(handle: ModelHandle) -> bool:
    """True for models big enough (> 50k nodes) that the graph should be drawn before
    ``inspect`` (shapes, FLOPs), which takes seconds at that size."""
    return len(handle.proto.graph.node) > FAST_PATH_NODES


def graph_levels(index: GraphIndex, budget: int = OVERVIEW_BUDGET) -> tuple[int, int]:
    """(the deepest level whose overview fits ``budget``, the deepest level there is)."""
    return auto_level(index.hierarchy, budget), len(index.hierarchy.visible_counts()) - 1


def search_nodes(index: GraphIndex, query: str, limit: int = 200) -> list[int]:
    """Nodes whose id, name, op type or tensor names contain ``query`` (any case)."""
    return search(index.graph, query, limit)


def graph_overlays(index: GraphIndex, summary: ModelSummary | None = None,
                   data: Mapping[str, Any] | None = None) -> dict[str, Overlay]:
    """Overlays the registered providers can make (op type, FLOPs share, and those fed by ``data``)."""
    return available_overlays(OverlayContext(index.graph, summary, data or {}))


def graph_view(handle: ModelHandle | None = None, *, index: GraphIndex | None = None,
               summary: ModelSummary | None = None, request: GraphRequest | None = None, level: int | None = None,
               expanded: Collection[str] = (), collapsed: Collection[str] = (), focus: str | None = None,
               hops: int = 2, group: str | None = None, overlay: str | Overlay | None = "op type",
               overlay_data: Mapping[str, Any] | None = None, query: str = "",
               budget: int | None = None) -> GraphView:
    """A view of the model: the overview (``level`` None = the deepest that fits the
    budget), or a detail region: ``focus`` node (id or name) with ``hops`` of
    neighbours, or a ``group`` (by key). ``query`` highlights search hits.

    ``request``: the ``GraphRequest`` the CLI and the Graph page build (its level, overlay, search, focus,
    hops and group; no overlay is 'op type', no hops 2), in place of those keywords: giving both is one line
    (BAD-REQUEST). What is the call's stays a keyword: the index, the groups opened or folded by hand, the
    overlay data and the drawing budget."""
    if request is not None:
        given = [name for name, value, default in (
            ("level", level, None), ("focus", focus, None), ("hops", hops, 2), ("group", group, None),
            ("overlay", overlay, "op type"), ("query", query, "")) if value != default]
        if given:
            raise StudioError(f"graph_view takes the view from the request or from keywords, not both "
                              f"(also given: {', '.join(given)})", code=ErrorCode.BAD_REQUEST)
        level, focus, group, query = request.level, request.focus, request.group, request.search or ""
        hops = 2 if request.hops is None else request.hops
        overlay = request.overlay or "op type"
    if index is None:
        if handle is None:
            raise StudioError("graph_view needs a model handle or a graph index")
        index = index_model(handle, summary)
    ov: Overlay | None
    if isinstance(overlay, str):
        found = graph_overlays(index, summary, overlay_data)
        if overlay not in found:
            raise StudioError(f"no overlay '{overlay[:60]}' for this model; available: {', '.join(sorted(found))}",
                              code=ErrorCode.NO_OVERLAY)
        ov = found[overlay]
    else:
        ov = overlay
    hits = search(index.graph, query) if query else []
    g, h = index.graph, index.hierarchy
    if focus is not None:
        k = index.find(focus)
        nodes = neighbourhood(g, k, hops, budget or DETAIL_BUDGET)
        return region(g, h, nodes, title=f"{g.name}: {hops} hops around {g.nodes[k].name or g.nodes[k].id}",
                      budget=budget or DETAIL_BUDGET, overlay=ov, focus=k, highlight=hits)
    if group is not None:
        nodes = group_nodes(h, group)
        if not nodes:
            raise StudioError("no such group in this model (the hierarchy changed?)", code=ErrorCode.NO_GROUP)
        return region(g, h, nodes, title=f"{g.name}: group", budget=budget or DETAIL_BUDGET, overlay=ov,
                      highlight=hits)
    return overview(g, h, level=level, budget=budget or OVERVIEW_BUDGET, expanded=expanded,
                    collapsed=collapsed, overlay=ov, highlight=hits)


def graph_echarts(view: GraphView) -> dict:
    """The ECharts option drawing ``view`` (for ``st.echarts_chart``; data index = item index)."""
    return echarts_option(view)


def graph_dot(view: GraphView) -> str:
    """DOT source of ``view`` (for ``st.graphviz_chart`` or graphviz)."""
    return to_dot(view)


def graph_legend_html(view: GraphView) -> str:
    """The overlay's legend as escaped HTML with inline styles."""
    return legend_html(view.painted)


def graph_html(views: GraphView | Sequence[GraphView], title: str | None = None) -> str:
    """A self-contained interactive HTML page (no network needed) for one or more views."""
    vs = [views] if isinstance(views, GraphView) else list(views)
    return render_html([Panel(v.title, v) for v in vs], title=title or vs[0].title)


def write_graph_view(view: GraphView, path: str | Path) -> Written:
    """Write a view as .html, .dot or .svg (by suffix; .dot instead of .svg without graphviz)."""
    return write_graph(Path(path), [Panel(view.title, view)], title=view.title)


def graph_scene(index: GraphIndex, *, expanded: Collection[str] = ()) -> tuple[dict, SceneStats]:
    """The browser viewer's data: groups, op boxes (key attributes, weight shapes), shape-labelled
    edges and the groups open at first paint (at most ~150 items visible)."""
    return build_scene(index.graph, index.hierarchy, expanded=tuple(expanded))


@without_gc        # builds ~10^6 objects that live on: no full collections meanwhile (core.gcpause)
def graph_viewer_html(index: GraphIndex, request: GraphRequest | None = None, *, summary: ModelSummary | None = None,
                      overlay: str | Overlay | None = None, overlay_data: Mapping[str, Any] | None = None,
                      height: int | None = None, expanded: Collection[str] = (), title: str | None = None,
                      focus: str | None = None) -> str:
    """The interactive viewer (ELK layout, canvas, expand in place, minimap) as one
    self-contained HTML document; ``height`` in px sizes it for an iframe; ``focus``
    (a node id) opens centred on that node, its groups open (the viewer's centre, not a region:
    ``request.focus`` draws a region, which the viewer does not). ``request``: the ``GraphRequest``
    whose overlay colours the stripes, in place of ``overlay``."""
    ov = _overlay(index, summary, _viewer_overlay(request, overlay), overlay_data)
    html, _ = graph_page(index.graph, index.hierarchy, title=title, overlay=ov, height=height,
                         expanded=tuple(expanded), focus=focus)
    return html


def _viewer_overlay(request: GraphRequest | None, overlay: str | Overlay | None) -> str | Overlay | None:
    """The viewer's overlay: the request's (a region of it is not the viewer's to draw), else the keyword."""
    if request is None:
        return overlay
    if overlay is not None:
        raise StudioError("the viewer takes its overlay from the request or from the keyword, not both",
                          code=ErrorCode.BAD_REQUEST)
    if request.focus is not None or request.group is not None:
        raise StudioError("the interactive viewer draws the whole graph: a focus or group request is drawn by "
                          "graph_view", code=ErrorCode.BAD_REQUEST)
    return request.overlay


def _overlay(index: GraphIndex, summary: ModelSummary | None, overlay: str | Overlay | None,
             overlay_data: Mapping[str, Any] | None) -> Overlay | None:
    if overlay is None or isinstance(overlay, Overlay):
        return overlay
    found = graph_overlays(index, summary, overlay_data)
    if overlay not in found:
        raise StudioError(f"no overlay '{overlay[:60]}' for this model; available: {', '.join(sorted(found))}",
                          code=ErrorCode.NO_OVERLAY)
    return found[overlay]


@without_gc        # builds ~10^6 objects that live on: no full collections meanwhile (core.gcpause)
def write_graph_viewer(index: GraphIndex, path: str | Path, request: GraphRequest | None = None, *,
                       summary: ModelSummary | None = None, overlay: str | Overlay | None = None,
                       overlay_data: Mapping[str, Any] | None = None) -> Written:
    """Write the interactive viewer of the whole model to an .html file (``request``: its overlay, as in
    :func:`graph_viewer_html`)."""
    p = Path(path)
    if format_of(p) != "html":
        raise StudioError("the interactive viewer writes .html (use .dot/.svg with a level or --focus)")
    ov = _overlay(index, summary, _viewer_overlay(request, overlay), overlay_data)
    html, stats = graph_page(index.graph, index.hierarchy, overlay=ov)
    atomic_write_bytes(p, html.encode("utf-8"))
    return Written(p, "html", stats.leaves,
                   f"opens at level {stats.open_level} with {stats.visible:,} items; {stats.leaves:,} shipped"
                   + (f", {stats.sealed:,} groups closed" if stats.sealed else ""))


def diff_viewer_html(d: GraphDiff, request: GraphRequest | None = None, *, side_by_side: bool = True,
                     height: int | None = None) -> str:
    """The diff in the viewer: one layout of both graphs, before/after panels with synced
    pan/zoom (or one panel coloured by status); ``request``: its ``diff_mode`` says which."""
    if request is not None:
        side_by_side = request.diff_mode == "side-by-side"
    html, _ = diff_page(d, side_by_side=side_by_side, height=height, notes=[summary_line(d)])
    return html


def write_diff_viewer(d: GraphDiff, path: str | Path, request: GraphRequest | None = None, *,
                      side_by_side: bool = True) -> Written:
    """Write the diff viewer (with the op-count, lineage and change tables) to an .html file (``request``:
    its ``diff_mode``)."""
    if request is not None:
        side_by_side = request.diff_mode == "side-by-side"
    p = Path(path)
    if format_of(p) != "html":
        raise StudioError("the interactive diff viewer writes .html")
    html, stats = diff_page(d, side_by_side=side_by_side, notes=[summary_line(d)], tables=diff_tables(d))
    atomic_write_bytes(p, html.encode("utf-8"))
    return Written(p, "html", stats.leaves)


def diff(handle_a: ModelHandle, handle_b: ModelHandle, *, lineage: object = None,
         summary_a: ModelSummary | None = None, summary_b: ModelSummary | None = None,
         dims: Mapping[str, int] | GraphRequest | None = None, dims_b: Mapping[str, int] | None = None,
         pool_key: str = "default") -> GraphDiff:
    """Nodes of ``a`` (before) and ``b`` (after) matched by name and structure, each removed,
    added, changed or unchanged; ``lineage`` (pipeline records) says which pass did it.
    ``dims`` (the model's dims setting, or the ``GraphRequest`` holding it; ``dims_b`` for ``b`` when it
    differs): edges are labelled with the numeric shapes at those sizes, as on the other pages."""
    if isinstance(dims, GraphRequest):
        dims = dict(dims.dims)
    if dims and summary_a is None:
        summary_a = inspect(handle_a, dims, pool_key=pool_key)
    if (dims_b if dims_b is not None else dims) and summary_b is None:
        summary_b = inspect(handle_b, dims_b if dims_b is not None else dims, pool_key=pool_key)
    ga = index_model(handle_a, summary_a).graph
    gb = index_model(handle_b, summary_b).graph
    return diff_graphs(ga, gb, lineage=lineage, model_a=handle_a.proto, model_b=handle_b.proto)


def diff_versions(ws: Workspace | ProjectModel, a: str, b: str, *,
                  dims: Mapping[str, int] | GraphRequest | None = None, pool_key: str = "default") -> GraphDiff:
    """Diff two workspace versions, with the pipeline records that lead from ``a`` to ``b``
    (``dims``: the model's dims setting, for numeric edge shapes)."""
    return diff(ws.handle(a), ws.handle(b), lineage=lineage_between(ws, a, b), dims=dims, pool_key=pool_key)


def diff_views(d: GraphDiff, mode: str = OVERLAY, level: int | None = None) -> list[GraphView]:
    """Overview(s) coloured by diff status: one union graph ("overlay") or both ("side-by-side")."""
    return [p.view for p in diff_panels(d, mode, level=level)]


def diff_region_view(d: GraphDiff, hops: int = 1) -> GraphView:
    """The changed nodes with ``hops`` of context (small enough for graphviz)."""
    return diff_region(d, hops=hops)


def diff_tables(d: GraphDiff) -> list[Table]:
    """Op counts before/after, pass lineage counts, and the changed nodes."""
    return [op_count_table(d), lineage_table(d), changes_table(d)]



def write_diff(d: GraphDiff, path: str | Path, mode: str | GraphRequest = OVERLAY, level: int | None = None) -> Written:
    """HTML: the diff page; .dot/.svg: the changed region with one hop of context. ``mode`` may be the
    ``GraphRequest`` whose ``diff_mode`` and ``level`` draw it."""
    if isinstance(mode, GraphRequest):
        mode, level = mode.diff_mode, mode.level
    p = Path(path)
    if format_of(p) == "html":
        return write_graph(p, diff_panels(d, mode, level=level), title=f"diff {d.a.name} → {d.b.name}",
                           notes=[summary_line(d)], tables=diff_tables(d))
    reg = diff_region(d)
    return write_graph(p, [Panel(reg.title, reg)], title=reg.title)

