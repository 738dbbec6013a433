"""A self-contained interactive HTML page for one or more graph views.

No network is needed to open it: ECharts (the vendored graph-only build, see
``vendor/``) and the data are inlined, and a Content-Security-Policy forbids
every fetch. Zoom, pan, hover, click for details, and search work offline.
The export issue embeds ``render_html(...)`` in reports.

Escaping: model text reaches the page only as ``html_text`` output (title,
notes, legend, tables, tooltips) or inside the JSON data block, which
``json_for_script`` makes unable to close its ``<script>`` element; the
script shows tooltips it was given (already escaped) and writes everything
else with ``textContent``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from studio.graphview.echarts import echarts_option
from studio.graphview.escape import display, html_text, json_for_script
from studio.graphview.overlays import Painted
from studio.graphview.view import GraphView

VENDOR = Path(__file__).resolve().parent / "vendor"
ECHARTS_JS = VENDOR / "echarts.graph.min.js"
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
       "connect-src 'none'; form-action 'none'; base-uri 'none'")


@dataclass(frozen=True)
class Table:
    caption: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Panel:
    title: str
    view: GraphView
    extra_notes: tuple[str, ...] = field(default=())


@lru_cache(maxsize=1)
def echarts_js() -> str:
    return ECHARTS_JS.read_text(encoding="utf-8")


def legend_html(painted: Painted | None, max_entries: int = 40) -> str:
    """Colour chips with counts (categories) or the scale's stops (numeric); inline
    styles only, so it can be dropped into any page (``st.html`` too)."""
    if painted is None or not painted.legend:
        return ""
    chip = ('<span style="display:inline-block;margin:2px 10px 2px 0">'
            '<i style="display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px;'
            'vertical-align:middle;background:{color}"></i>{label}{count}</span>')
    chips = "".join(chip.format(color=e.color, label=html_text(e.label, 60),
                                count=f" <small>{e.count:,}</small>" if e.count else "")
                    for e in painted.legend[:max_entries])
    more = f" <small>+{len(painted.legend) - max_entries} more</small>" if len(painted.legend) > max_entries else ""
    kind = "scale" if painted.kind == "numeric" else "categories"
    return (f'<div class="legend" style="font-size:12px;margin:4px 0"><b>{html_text(painted.name, 60)}</b> '
            f"<small>({kind})</small> {chips}{more}</div>")


def table_html(t: Table) -> str:
    head = "".join(f"<th>{html_text(h, 60)}</th>" for h in t.header)
    body = "".join("<tr>" + "".join(f"<td>{html_text(c, 200)}</td>" for c in r) + "</tr>" for r in t.rows)
    return f'<table><caption>{html_text(t.caption, 120)}</caption><tr>{head}</tr>{body}</table>'


def _search_text(view: GraphView, i: int) -> str:
    it = view.projection.items[i]
    if it.kind == "group":
        return display(view.hierarchy.groups[it.ref].label, 200).lower()
    n = view.graph.nodes[it.ref]
    parts = [n.id, n.name, n.op_type, *n.inputs[:8], *n.outputs[:8]]
    return " ".join(display(p, 120) for p in parts).lower()


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0;color:#222}
header{padding:8px 14px;border-bottom:1px solid #ddd}
h1{font-size:18px;margin:0 0 4px 0} h2{font-size:15px;margin:6px 0}
.note{color:#8a5a00;font-size:13px;margin:2px 0}
.row{display:flex;gap:8px;padding:0 8px}.panel{flex:1;min-width:0}
.chart{height:72vh;border:1px solid #eee}
#details{font-size:13px;padding:6px 14px;min-height:3em;border-top:1px solid #ddd;overflow-wrap:anywhere}
table{border-collapse:collapse;font-size:12px;margin:8px 14px}td,th{border:1px solid #ddd;padding:2px 6px}
caption{text-align:left;font-weight:bold;padding:4px 0}
input{font-size:13px;padding:3px 6px;width:320px}
"""

_JS = r"""
(function () {
  var data = JSON.parse(document.getElementById('gv-data').textContent);
  var details = document.getElementById('details');
  var charts = [];
  function show(p, i) {
    var item = data.panels[p].option.series[0].data[i];
    details.innerHTML = item.tooltip.formatter;   /* escaped by onnx-studio when written */
    var key = document.createElement('div');
    key.style.color = '#888';
    key.textContent = data.panels[p].title + ' · ' + data.panels[p].keys[i];
    details.appendChild(key);
    details.dataset.selected = data.panels[p].keys[i];
  }
  var pending = data.panels.length;
  data.panels.forEach(function (p, idx) {
    var chart = echarts.init(document.getElementById('chart-' + idx), null, {renderer: 'canvas'});
    chart.on('finished', function () {
      if (!chart.__done) { chart.__done = true; pending -= 1; if (pending === 0) document.body.dataset.rendered = '1'; }
    });
    chart.setOption(p.option);
    chart.on('click', function (e) { if (e.dataType === 'node') show(idx, e.dataIndex); });
    charts.push(chart);
  });
  var box = document.getElementById('search');
  var count = document.getElementById('search-count');
  box.addEventListener('input', function () {
    var q = box.value.trim().toLowerCase();
    var total = 0;
    data.panels.forEach(function (p, idx) {
      var hits = [];
      if (q) { for (var i = 0; i < p.search.length; i++) if (p.search[i].indexOf(q) >= 0) hits.push(i); }
      total += hits.length;
      charts[idx].dispatchAction({type: 'downplay', seriesIndex: 0});
      if (hits.length) {
        charts[idx].dispatchAction({type: 'highlight', seriesIndex: 0, dataIndex: hits.slice(0, 500)});
        if (idx === 0 || total === hits.length) show(idx, hits[0]);
      }
    });
    count.textContent = q ? total + ' match' + (total === 1 ? '' : 'es') : '';
  });
  window.addEventListener('resize', function () { charts.forEach(function (c) { c.resize(); }); });
})();
"""


def render_html(panels: Sequence[Panel], *, title: str, notes: Sequence[str] = (),
                tables: Sequence[Table] = ()) -> str:
    """The page as a string (one chart per panel, side by side)."""
    data = {"panels": [{"title": display(p.title, 80), "option": echarts_option(p.view),
                        "keys": [display(p.view.item_key(i), 200) for i in range(len(p.view))],
                        "search": [_search_text(p.view, i) for i in range(len(p.view))]}
                       for p in panels]}
    note_html = "".join(f'<p class="note">{html_text(n, 600)}</p>' for n in notes)
    cols = []
    for idx, p in enumerate(panels):
        pnotes = [*([p.view.note] if p.view.note else []), *p.extra_notes]
        cols.append(f'<div class="panel"><h2>{html_text(p.title, 120)}</h2>'
                    + "".join(f'<p class="note">{html_text(n, 600)}</p>' for n in pnotes)
                    + legend_html(p.view.painted)
                    + f'<div class="chart" id="chart-{idx}"></div></div>')
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>{html_text(title, 120)}</title><style>{_CSS}</style></head><body>"
        f"<header><h1>{html_text(title, 160)}</h1>{note_html}"
        '<input id="search" type="search" placeholder="Search nodes, op types, tensors" autocomplete="off"> '
        '<small id="search-count"></small></header>'
        f'<div class="row">{"".join(cols)}</div>'
        '<div id="details">Click a node for its details; scroll to zoom, drag to pan.</div>'
        + "".join(table_html(t) for t in tables)
        + f"<script>{echarts_js()}</script>"
        + f'<script type="application/json" id="gv-data">{json_for_script(data)}</script>'
        + f"<script>{_JS}</script></body></html>\n"
    )
