"""Batch reports: HTML (sortable table, verdict matrix, latency and size plots), CSV and JSON.

Model names and messages are untrusted text: everything in the HTML is escaped,
and the table's sorting is a few lines of inline script with no outside assets
(plotly's script is inlined once), so the report opens offline.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
from dataclasses import replace

from studio.batch.results import BatchResult
from studio.core.fmt import spreadsheet_safe
from studio.core.paths import atomic_write_text

_SORT_JS = """
<script>
document.querySelectorAll('table.sortable th').forEach((th, col) => th.addEventListener('click', () => {
  const body = th.closest('table').tBodies[0];
  const asc = th.dataset.dir !== 'asc'; th.dataset.dir = asc ? 'asc' : 'desc';
  const key = r => { const t = r.cells[col].dataset.v ?? r.cells[col].textContent;
                     const n = parseFloat(t); return isNaN(n) ? t.toLowerCase() : n; };
  [...body.rows].sort((a, b) => (key(a) > key(b) ? 1 : key(a) < key(b) ? -1 : 0) * (asc ? 1 : -1))
    .forEach(r => body.appendChild(r));
}));
</script>"""
_STYLE = """<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}
th,td{border:1px solid #ccc;padding:4px 8px;font-size:13px;vertical-align:top}th{cursor:pointer;background:#f3f3f3}
.ok{background:#e6f4ea}.failed{background:#fde7e9}.error,.worker-lost,.scheduler-lost{background:#fff4ce}</style>"""


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _rows_flat(result: BatchResult) -> list[dict]:
    flat = []
    for r in result.rows:
        row = {"model": r.model.name, "sha256": (r.model.sha256 or "")[:16], "status": r.status()}
        if r.model.error:
            row["error"] = r.model.error
        for stage in result.stages:
            o = r.outcomes.get(stage)
            row[f"{stage}"] = o.status if o else ("not run" if r.model.error else "")
            row[f"{stage} verdict"] = o.verdict if o else (r.model.error or "")
            row[f"{stage} s"] = round(o.seconds, 2) if o else None
            for k, v in (o.figures if o else {}).items():
                row[f"{stage}.{k}"] = _clean(v)
            if o and o.worker:
                w = o.worker
                where = w.get("target") or w.get("host") or w.get("address")
                row[f"{stage} ran on"] = f"{where} ({w['cpu']}, {w.get('cores')} cores)" if w.get("cpu") else where
            if o and o.lost_workers:
                row[f"{stage} retried after"] = ", ".join(o.lost_workers)
        flat.append(row)
    return flat


def _csv(rows: list[dict]) -> str:
    cols: list[str] = []
    for r in rows:
        cols.extend(k for k in r if k not in cols)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow([spreadsheet_safe(c) for c in cols])          # column names carry figure keys: also neutralized
    for r in rows:
        w.writerow([spreadsheet_safe("" if r.get(c) is None else r.get(c)) for c in cols])
    return buf.getvalue()


def _plots(result: BatchResult) -> str:
    import plotly.graph_objects as go

    parts = []
    esc = html.escape                # plotly renders label text as HTML (its tags, links): model names are escaped
    names = [esc(r.model.name[:40]) for r in result.rows]
    engines = sorted({k.split(":", 1)[1] for r in result.rows for o in r.outcomes.values()
                      for k in o.figures if k.startswith("verdict:")})
    if engines:
        score = {"runs": 2, "runs with warnings": 1, "compiles; not run": 0.5, "fails": 0, "unknown": None}
        z = [[score.get((r.outcomes.get("check").figures if r.outcomes.get("check") else {}).get(f"verdict:{e}"))
              for e in engines] for r in result.rows]
        text = [[(r.outcomes.get("check").figures if r.outcomes.get("check") else {}).get(f"verdict:{e}", "")
                 for e in engines] for r in result.rows]
        fig = go.Figure(go.Heatmap(z=z, x=[esc(x) for x in engines], y=names, text=text, texttemplate="%{text}",
                                   zmin=0, zmax=2,
                                   colorscale=[[0, "#f28b82"], [0.5, "#fdd663"], [1, "#81c995"]], showscale=False))
        fig.update_layout(title="Verdict matrix (model x engine)", height=200 + 22 * len(names),
                          margin={"l": 220})
        parts.append(fig)
    lat = [(esc(r.model.name[:40]), esc(k.split(":", 1)[1]), v) for r in result.rows
           for o in [r.outcomes.get("profile")] if o for k, v in o.figures.items() if k.startswith("p50_ms:")]
    if lat:
        fig = go.Figure()
        for eng in sorted({e for _, e, _ in lat}):
            fig.add_bar(name=eng, x=[n for n, e, _ in lat if e == eng], y=[v for _, e, v in lat if e == eng])
        fig.update_layout(title="Latency p50 (ms)", barmode="group", legend={"orientation": "h", "y": -0.3})
        parts.append(fig)
    sizes = [(esc(r.model.name[:40]), o.figures.get("bytes_before"), o.figures.get("bytes_after"))
             for r in result.rows for o in [r.outcomes.get("optimize")] if o and o.figures.get("bytes_after")]
    if sizes:
        fig = go.Figure([go.Bar(name="before", x=[s[0] for s in sizes], y=[s[1] for s in sizes]),
                         go.Bar(name="after optimize", x=[s[0] for s in sizes], y=[s[2] for s in sizes])])
        fig.update_layout(title="Model size (bytes)", barmode="group", legend={"orientation": "h", "y": -0.3})
        parts.append(fig)
    return "".join(f.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(parts))


def _html(result: BatchResult, rows: list[dict]) -> str:
    e = html.escape
    timed = [s for s in result.stages if any(f"{s} ran on" in r for r in rows) and (
        s in ("profile", "precision") or any(o.target for r in result.rows for o in [r.outcomes.get(s)] if o))]
    head = ["model", "status", *[c for s in result.stages for c in (s, f"{s} verdict")],
            *[f"{s} ran on" for s in timed]]       # timings name the machine that measured them
    body = []
    for r in rows:
        cells = []
        for c in head:
            v = r.get(c, "")
            cls = str(v).replace(" ", "-") if c in ("status", *result.stages) else ""
            cells.append(f'<td class="{e(cls)}">{e(str(v if v is not None else "")[:400])}</td>')  # cut, then escape
        body.append("<tr>" + "".join(cells) + "</tr>")
    m = result.machine
    return ("<!doctype html><html><head><meta charset='utf-8'><title>onnx-studio batch</title>" + _STYLE +
            "</head><body><h1>onnx-studio batch</h1>"
            f"<p>{len(result.rows)} model(s) x {len(result.stages)} stage(s) on the {e(result.executor)} executor "
            f"in {result.seconds:.1f} s ({result.ran} run, {result.skipped} already finished). Report made on "
            f"{e(str(m.get('cpu', '?')))}, {m.get('cores', '?')} cores; each row says where it ran.</p>"
            "<table class='sortable'><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) +
            "</tr></thead><tbody>" + "".join(body) + "</tbody></table>" + _plots(result) + _SORT_JS +
            "</body></html>")


def write_reports(result: BatchResult) -> BatchResult:
    rows = _rows_flat(result)
    out = result.out_dir
    files = {"json": out / "batch.json", "csv": out / "batch.csv", "html": out / "batch.html"}
    atomic_write_text(files["json"], json.dumps(_nulled(result.to_dict()), indent=1, default=str, allow_nan=False))
    atomic_write_text(files["csv"], _csv(rows))
    atomic_write_text(files["html"], _html(result, rows))
    return replace(result, files=files)


def _nulled(obj):
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _nulled(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_nulled(v) for v in obj]
    return obj
