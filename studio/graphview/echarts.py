"""An ECharts option (plain JSON) drawing a ``GraphView``: the same option is
passed to ``st.echarts_chart`` and embedded in the offline HTML.

Model text is escaped here: labels are drawn on the canvas (``canvas_label``
neutralises ECharts rich-text markup) and tooltips are HTML built from
``html_text`` pieces, with braces as entities so ECharts' template
placeholders never fire inside model text.
"""

from __future__ import annotations

import math

from studio.graphview.escape import canvas_label, html_text
from studio.graphview.project import GROUP
from studio.graphview.view import GraphView

LABELS_MAX = 400          # draw labels only up to this many items (ECharts hides overlaps)
EDGE_TOOLTIPS_MAX = 5000  # per-edge tooltips cost payload; beyond this edges stay silent
ADJACENCY_MAX = 3000      # hover focus on neighbours, for graphs where it stays smooth
SELECT_COLOR = "#111111"
HIGHLIGHT_COLOR = "#d62728"


def tooltip_html(lines: list[tuple[str, str]]) -> str:
    """Escaped HTML for a tooltip: the first line bold, the others ``key: value``."""
    if not lines:
        return ""
    head = f"<b>{html_text(lines[0][1], 160)}</b>"
    rest = "".join(f"<br><i>{html_text(k, 40)}</i> {html_text(v, 160)}" for k, v in lines[1:])
    return head + rest


def _size(n_items: int) -> float:
    return max(4.0, min(18.0, 260.0 / math.sqrt(max(n_items, 1))))


def echarts_option(view: GraphView, *, selectable: bool = True) -> dict:
    """The option for ``view``; series 0 data index ``i`` is drawn item ``i``."""
    proj, lay = view.projection, view.layout
    n = len(proj.items)
    base = _size(n)
    show_labels = n <= LABELS_MAX
    colors = view.painted.colors if view.painted else ("#4e79a7",) * n
    data = []
    for i, it in enumerate(proj.items):
        is_group = it.kind == GROUP
        size = base
        style: dict = {"color": colors[i]}
        if is_group:
            g = view.hierarchy.groups[it.ref]
            size = base * (1.2 + 0.35 * math.log10(max(g.size, 1)))
            style.update(borderColor="#333333", borderWidth=1)
        if i in view.highlight:
            style.update(borderColor=HIGHLIGHT_COLOR, borderWidth=3)
            size *= 1.4
        item = {"id": str(i), "name": canvas_label(view.item_label(i)), "x": round(lay.x[i], 3),
                "y": round(lay.y[i], 3), "symbolSize": round(size, 1),
                "symbol": "roundRect" if is_group else "circle", "itemStyle": style,
                "tooltip": {"formatter": tooltip_html(view.tooltip_lines(i))}}
        if i == view.focus:
            item["label"] = {"show": True, "fontWeight": "bold"}
        data.append(item)
    edge_tips = len(proj.edges) <= EDGE_TOOLTIPS_MAX
    links = []
    for e, ve in enumerate(proj.edges):
        link: dict = {"source": ve.src, "target": ve.dst}
        if ve.count > 1:
            link["lineStyle"] = {"width": round(min(4.0, 0.8 + math.log2(ve.count) * 0.6), 2)}
        if edge_tips:
            link["tooltip"] = {"formatter": tooltip_html(view.edge_lines(e))}
        links.append(link)
    series = {
        "type": "graph", "layout": "none", "roam": True, "draggable": False, "animation": False,
        "data": data, "links": links, "edgeSymbol": ["none", "arrow"], "edgeSymbolSize": [0, max(3, base / 2)],
        "lineStyle": {"color": "#8a9099", "width": 0.8, "opacity": 0.7, "curveness": 0},
        "label": {"show": show_labels, "position": "right", "fontSize": 10, "color": "#333"},
        "labelLayout": {"hideOverlap": True} if show_labels else {},
        "emphasis": {"focus": "adjacency" if n <= ADJACENCY_MAX else "none", "label": {"show": True}},
        "scaleLimit": {"min": 0.2, "max": 80},
    }
    if selectable:
        series["selectedMode"] = "single"
        series["select"] = {"itemStyle": {"borderColor": SELECT_COLOR, "borderWidth": 3},
                            "label": {"show": True, "fontWeight": "bold"}}
    return {
        "animation": False,
        "tooltip": {"trigger": "item", "confine": True, "enterable": False,
                    "extraCssText": "max-width:520px;white-space:normal;overflow-wrap:anywhere;"},
        "series": [series],
    }
