"""The interactive graph viewer as one self-contained HTML document: the scene
data (``scene.py``), the vendored ELK layout engine (``vendor/elk.bundled.js``,
run in a web worker made from its own inlined source) and the canvas renderer
(``web/renderer.js``). The same document is the offline ``.html`` that
``onnx-studio graph`` writes and the Streamlit Graph page embeds.

No network: everything is inlined and the Content-Security-Policy forbids
fetches (workers only from ``blob:``, which the page makes from inlined text).
Model text is only in the JSON data block (``json_for_script``) and in
``html_text`` output; the renderer draws it with ``fillText``/``textContent``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path

from studio.graphview.diff import ADDED, CHANGED, REMOVED, UNCHANGED, GraphDiff
from studio.graphview.diffview import STATUS_LEGEND, union_graph
from studio.graphview.escape import html_text, json_for_script
from studio.graphview.hierarchy import Hierarchy, build_hierarchy
from studio.graphview.html import Table, table_html
from studio.graphview.model import GraphModel
from studio.graphview.overlays import Overlay, paint
from studio.graphview.scene import SceneStats, build_scene

HERE = Path(__file__).resolve().parent
ELK_JS = HERE / "vendor" / "elk.bundled.js"
RENDERER_JS = HERE / "web" / "renderer.js"
ELK_START_JS = HERE / "web" / "elk_start.js"
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
       "worker-src blob:; connect-src 'none'; form-action 'none'; base-uri 'none'")
STATUS_COLORS = {s: c for s, c in STATUS_LEGEND if s != UNCHANGED}


@lru_cache(maxsize=1)
def elk_js() -> str:
    return ELK_JS.read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def renderer_js() -> str:
    return RENDERER_JS.read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def elk_start_js() -> str:
    return ELK_START_JS.read_text(encoding="utf-8")


_CSS = """
html,body{margin:0;height:100%}
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;color:#222;background:#fff}
#gv-root{display:flex;flex-direction:column;height:var(--gv-height,100vh);position:relative}
.gv-header{padding:6px 10px;border-bottom:1px solid #ddd}
.gv-header h1{font-size:16px;margin:0 0 2px 0}
.gv-note{color:#8a5a00;font-size:12px;margin:2px 0}
.gv-toolbar{display:flex;gap:6px;align-items:center;padding:4px 10px;font-size:12px;border-bottom:1px solid #eee}
.gv-toolbar button{font-size:12px;padding:2px 8px;cursor:pointer}
.gv-toolbar input{font-size:12px;padding:2px 6px;width:260px}
.gv-status{color:#666;margin-left:auto;white-space:nowrap}
.gv-panels{display:flex;flex:1;min-height:0;gap:4px}
.gv-panel{flex:1;min-width:0;display:flex;flex-direction:column;position:relative}
.gv-title{font-size:12px;font-weight:bold;padding:2px 8px;color:#333}
.gv-title:empty{display:none}
.gv-canvas{flex:1;min-height:0;width:100%;display:block;border:1px solid #e5e7eb;cursor:grab}
.gv-minimap{position:absolute;right:14px;bottom:calc(var(--gv-details,96px) + 14px);width:180px;height:130px;
  border:1px solid #94a3b8;background:#fff;cursor:crosshair;box-shadow:0 1px 4px rgba(0,0,0,.15)}
.gv-details{height:var(--gv-details,96px);overflow:auto;font-size:12px;padding:4px 10px;border-top:1px solid #ddd;
  overflow-wrap:anywhere}
.gv-details div{margin:1px 0}
.gv-head b{font-size:13px}
.gv-dim{color:#6b7280}
.gv-link{color:#1d4ed8;text-decoration:none;cursor:pointer}
.gv-tensor{border-bottom:1px dashed #ddd;padding-bottom:2px;margin-bottom:2px}
.gv-legend{font-size:11px;margin:2px 0}
.gv-legend i{display:inline-block;width:10px;height:10px;border-radius:2px;margin:0 3px 0 8px;vertical-align:middle}
table{border-collapse:collapse;font-size:12px;margin:8px 10px}td,th{border:1px solid #ddd;padding:2px 6px}
caption{text-align:left;font-weight:bold;padding:4px 0}
"""


def _legend(entries: Sequence[tuple[str, str]], name: str) -> str:
    chips = "".join(f'<i style="background:{c}"></i>{html_text(label, 40)}' for label, c in entries)
    return f'<div class="gv-legend"><b>{html_text(name, 40)}</b>{chips}</div>'


def viewer_html(scene: dict, *, title: str, panels: Sequence[Mapping[str, str]] = ({"title": "", "side": ""},),
                notes: Sequence[str] = (), tables: Sequence[Table] = (), legend: str = "",
                height: int | None = None) -> str:
    """The viewer document for ``scene``; two ``panels`` (sides "a" and "b") draw one
    layout side by side with one shared pan/zoom. ``height`` (px) sizes it for an
    iframe; by default it fills the window."""
    data = {"scene": scene, "panels": [dict(p) for p in panels]}
    note_html = "".join(f'<p class="gv-note">{html_text(n, 600)}</p>' for n in notes)
    style = f' style="--gv-height:{int(height)}px"' if height else ""
    head = (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>{html_text(title, 120)}</title><style>{_CSS}</style></head><body>"
        f'<div id="gv-root"{style}>'
        f'<div class="gv-header"><h1>{html_text(title, 160)}</h1>{note_html}{legend}</div>'
        '<div class="gv-toolbar"><button data-act="fit" title="fit all of the drawing to the screen (f)">Fit</button>'
        '<button data-act="in" title="zoom in">+</button><button data-act="out" title="zoom out">−</button>'
        '<button data-act="reset" title="back to the opening level">Reset</button>'
        '<input type="search" placeholder="Find a group, node or op type (Enter: next)" autocomplete="off">'
        '<span class="gv-hint">click a group: expand/collapse · click an edge: its producer · drag: pan · '
        'wheel: zoom</span><span class="gv-status"></span></div>'
        '<div class="gv-panels"></div><canvas class="gv-minimap"></canvas>'
        '<div class="gv-details">Click a node for its attributes and tensors.</div></div>'
    )
    # One join: each ``+`` copied the page so far, the 4.6 MB scene of a 10k-node model two or three times.
    return "".join((
        head, *(table_html(t) for t in tables),
        # the worker's source; run here only as fallback
        '<script id="elk-src" type="text/x-elk">', elk_js(), "</script>",
        "<script>", elk_start_js(), "</script>",      # the worker starts now, before the data below is parsed
        '<script type="application/json" id="gv-data">', json_for_script(data), "</script>",
        "<script>", renderer_js(), "</script></body></html>\n",
    ))


def overlay_marks(graph: GraphModel, hierarchy: Hierarchy, scene: dict, overlay: Overlay) -> str:
    """Colour each leaf's side stripe by ``overlay`` (in place) and return the legend HTML."""
    ids = {n.id: n.index for n in graph.nodes}
    by_key = hierarchy.by_key()
    members: list[list[str]] = []
    for leaf in scene["leaves"]:
        if leaf["kind"] == "sealed":
            g = by_key.get(leaf["key"].removeprefix("group:"))
            members.append([graph.nodes[k].id for k in hierarchy.leaves(g)] if g is not None else [])
        else:
            members.append([leaf["key"]] if leaf["key"] in ids else [])
    painted = paint(overlay, members)
    for leaf, color, i in zip(scene["leaves"], painted.colors, range(len(members))):
        if painted.values[i] is not None:
            leaf["mark"] = color
            leaf["ov"] = painted.text(i)
    return _legend([(e.label, e.color) for e in painted.legend[:16]], overlay.name)


def graph_page(graph: GraphModel, hierarchy: Hierarchy | None = None, *, title: str | None = None,
               overlay: Overlay | None = None, notes: Sequence[str] = (), height: int | None = None,
               expanded: tuple[str, ...] = (), focus: str | None = None) -> tuple[str, SceneStats]:
    """The viewer document of one model (with an optional overlay as side stripes);
    ``focus`` (a node id) opens centred on that node."""
    hierarchy = hierarchy or build_hierarchy(graph)
    scene, stats = build_scene(graph, hierarchy, title=title, expanded=expanded, focus=focus)
    legend = overlay_marks(graph, hierarchy, scene, overlay) if overlay is not None and overlay.name != "op type" \
        else ""
    all_notes = [*notes, *([scene["note"]] if scene["note"] else [])]
    return viewer_html(scene, title=title or graph.name, notes=all_notes, legend=legend, height=height), stats


def _edge_sides(d: GraphDiff) -> dict[tuple[int, int, str], str]:
    """Each union-graph edge: only before ("a"), only after ("b"), or both ("ab").
    Union node indices follow ``union_graph``: the second graph's, then the removed nodes."""
    a_to_u: dict[int, int] = {e.a: e.b for e in d.entries if e.a is not None and e.b is not None}
    k = len(d.b.nodes)
    for e in d.entries:
        if e.status == REMOVED:
            a_to_u[e.a] = k
            k += 1
    in_a = {(a_to_u[e.src], a_to_u[e.dst], e.tensor) for e in d.a.edges if e.src in a_to_u and e.dst in a_to_u}
    in_b = {(e.src, e.dst, e.tensor) for e in d.b.edges}
    return {key: ("ab" if key in in_a else "b") for key in in_b} | {key: "a" for key in in_a - in_b}


def diff_page(d: GraphDiff, *, side_by_side: bool = True, notes: Sequence[str] = (),
              tables: Sequence[Table] = (), height: int | None = None) -> tuple[str, SceneStats]:
    """The diff in the viewer: the union of both graphs laid out once, drawn as
    "before" (added nodes ghosted) and "after" (removed nodes ghosted) with one
    pan/zoom, so a matched node sits at the same place in both; or as one panel."""
    u = union_graph(d)
    hier = build_hierarchy(u.graph)
    status = dict(enumerate(u.status))
    side = {k: ("a" if s == REMOVED else "b" if s == ADDED else "ab") for k, s in status.items()}
    scene, stats = build_scene(u.graph, hier, title=f"{d.a.name} → {d.b.name}", status=status,
                               status_colors=STATUS_COLORS, side=side, edge_side=_edge_sides(d))
    panels = ([{"title": f"before: {d.a.name}", "side": "a"}, {"title": f"after: {d.b.name}", "side": "b"}]
              if side_by_side else [{"title": "", "side": ""}])
    legend = _legend([(s, c) for s, c in STATUS_LEGEND if s in (REMOVED, ADDED, CHANGED)], "diff")
    return viewer_html(scene, title=f"diff {d.a.name} → {d.b.name}", panels=panels, notes=notes, tables=tables,
                       legend=legend, height=height), stats
