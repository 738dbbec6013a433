"""The human report of an export: ``report.md`` and a self-contained ``report.html``.

Failures come first. The HTML has the benchmark charts (plotly, with plotly.js
inline so it works offline) and shows the exported model's graph from
``graph.html`` (the studio's graph view, also self-contained) in a frame.
Every model-derived string is escaped (HTML) or neutralized (Markdown).
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from typing import Any

from studio.core.fmt import speedup_text
from studio.core.model import ModelHandle
from studio.graphview.index import index_model
from studio.graphview.viewer import graph_page as viewer_page

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|<>~#&$])")  # what breaks tables, links, emphasis, HTML, entities, math
STATUS_ICON = {"passed": "✅", "failed": "❌", "error": "❌", "not verified": "⚠️"}
GRAPH_NODE_LIMIT = 20_000        # above this the report links to `onnx-studio graph` instead


def md(text: object, max_len: int = 300) -> str:
    """Model text as one line of Markdown: specials escaped, line breaks as spaces, other invisible characters
    (NUL, U+202E ...) shown as [U+XXXX] (RELIABILITY R28/R31)."""
    s = str(text)
    s = s if len(s) <= max_len else s[: max_len - 1] + "…"
    s = s.replace("\n", " ").replace("\r", " ")
    s = "".join(ch if ch.isprintable() else f"[U+{ord(ch):04X}]" for ch in s)
    return _MD_SPECIAL.sub(r"\\\1", s)


def h(text: object, max_len: int = 400) -> str:
    s = str(text)
    return html.escape(s if len(s) <= max_len else s[: max_len - 1] + "…")


def graph_page(handle: ModelHandle) -> tuple[str | None, str]:
    """(self-contained graph view HTML or None, a note): the box viewer ``onnx-studio graph``
    writes (ELK layout, groups that expand in place, shape-labelled edges), offline."""
    nodes = len(handle.proto.graph.node)
    if nodes > GRAPH_NODE_LIMIT:
        return None, f"graph not embedded ({nodes} nodes): run `onnx-studio graph` on the exported model"

    index = index_model(handle)
    html, _ = viewer_page(index.graph, index.hierarchy, title=f"exported model: {handle.name}")
    return html, "graph.html"


def benchmark_rows(manifest: Mapping[str, Any]) -> list[tuple[str, str, Any, Any]]:
    rows = []
    for target, items in manifest.get("benchmarks", {}).items():
        if not isinstance(items, Mapping):
            continue
        for name, figures in items.items():
            if isinstance(figures, Mapping):
                rows.append((target, name, figures.get("session_ms"), figures.get("latency_ms_median")))
    return rows


def markdown_report(manifest: Mapping[str, Any]) -> str:
    src = manifest["source"]
    lines = [f"# Export report: {md(src['name'], 120)}", ""]
    failures = manifest["failures"]
    if failures:
        lines += [f"**❌ {len(failures)} failure(s): this bundle is not ready to ship.**", "", "## Failures", ""]
        lines += [f"- {md(f, 500)}" for f in failures]
        lines.append("")
    else:
        lines += ["**✅ Every artifact that can run here was reloaded by its engine and verified.**", ""]
    lines += [f"Source `{src['sha256'][:16]}…` ({src['bytes']:,} bytes), IR {src['ir_version']}, opsets "
              + ", ".join(f"{md(k, 40)} {v}" for k, v in src["opsets"].items()), ""]
    lines += ["## Targets", "", "| target | status | message |", "|---|---|---|"]
    for name, t in manifest["targets"].items():
        lines.append(f"| {name} | {STATUS_ICON.get(t['status'], '')} {t['status']} | {md(t['message'], 300)} |")
    lines += ["", "## Artifacts", "", "| file | kind | precision | verification | sha256 |", "|---|---|---|---|---|"]
    for t in manifest["targets"].values():
        for a in t["artifacts"]:
            v = a["verification"]
            verdict = f"{STATUS_ICON.get(v['status'], '')} {md(v['message'], 160)}" if v else "–"
            lines.append(f"| `{a['path']}` | {a['kind']} | {a['precision'] or '–'} | {verdict} | "
                         f"`{a['sha256'][:12]}` |")
    ver = manifest["verification"]
    lines += ["", "## Verification", "", f"- reference: {md(ver['reference'])}",
              f"- criteria: {md(ver['criteria'])} (OpenVINO FP16 and INT8 artifacts use their own, stated per file)",
              "- input shapes: " + ", ".join(f"{md(k, 60)} {v}" for k, v in ver["input_shapes"].items()), ""]
    rows = benchmark_rows(manifest)
    if rows:
        lines += ["## Benchmarks", "", "| target | artifact | session creation ms | latency ms (median) |",
                  "|---|---|---|---|"]
        lines += [f"| {t} | {md(n, 60)} | {s if s is not None else '–'} | {l if l is not None else '–'} |"
                  for t, n, s, l in rows]
        speed = manifest.get("benchmarks", {}).get("onnxruntime", {}).get("session_speedup")
        if speed:
            lines += ["", f"ONNX Runtime session creation (fast-start): **{speedup_text(speed)}** the original with "
                          "ORT defaults. fast-inference trades some of its start-up for this CPU's layout optimizations."]
        lines += ["", md(manifest["benchmarks"]["note"], 600), ""]
    notes = [(name, n) for name, t in manifest["targets"].items() for n in t["notes"]]
    notes += [("deploy", n) for n in manifest["deploy"]["notes"]]
    if notes:
        lines += ["## Notes", ""] + [f"- {name}: {md(n, 400)}" for name, n in notes] + [""]
    lines += ["## Using the artifacts", "", "```python",
              "import json, onnxruntime as ort",
              "cfg = json.load(open('onnxruntime/session_options.json'))['sessions']['fast-start']  # or fast-inference",
              "so = ort.SessionOptions()",
              "so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, cfg['graph_optimization_level'])",
              "for k, v in cfg['session_config_entries'].items():",
              "    so.add_session_config_entry(k, v)",
              "session = ort.InferenceSession('onnxruntime/' + cfg['file'], so, providers=cfg['providers'])",
              "```", "", "```python", "import openvino as ov",
              "compiled = ov.Core().compile_model('openvino/model.xml', 'CPU')", "```", "", "```bash",
              "python tensorrt/build_engine.py            # or: sh tensorrt/build_with_trtexec.sh (on a GPU machine)",
              "tritonserver --model-repository=$(pwd)/triton/model_repository", "```", ""]
    if manifest.get("graph"):
        lines += ["The exported model's graph: [graph.html](graph.html).", ""]
    lines += ["Tools: " + ", ".join(f"{k} {md(v, 60)}" for k, v in manifest["tools"].items() if v), ""]
    return "\n".join(lines)


def _charts(manifest: Mapping[str, Any]) -> str:
    rows = benchmark_rows(manifest)
    if not rows:
        return ""
    import plotly.graph_objects as go

    labels = [f"{t}: {n}" for t, n, _, _ in rows]
    parts = []
    first = True
    for title, idx, unit in (("Session creation (load + compile), ms", 2, "ms"),
                             ("Latency per inference (median), ms", 3, "ms")):
        values = [r[idx] for r in rows]
        if not any(v is not None for v in values):
            continue
        fig = go.Figure(go.Bar(x=labels, y=[v if v is not None else 0 for v in values], marker_color="#4c78a8",
                               text=[f"{v:.1f}" if v is not None else "–" for v in values], textposition="auto"))
        fig.update_layout(title=title, height=360, margin={"t": 50, "b": 120}, yaxis_title=unit)
        parts.append(fig.to_html(full_html=False, include_plotlyjs=first, default_width="100%"))
        first = False
    return "\n".join(parts)


_CSS = """body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;
vertical-align:top;font-size:14px}th{background:#f3f3f3}.fail{background:#fde8e8;border:1px solid #e99;padding:.6em 1em}
.ok{background:#e8f6e8;border:1px solid #9c9;padding:.6em 1em}code{font-size:13px}iframe{width:100%;height:640px;
border:1px solid #ccc}.muted{color:#666;font-size:13px}"""


def html_report(manifest: Mapping[str, Any]) -> str:
    src = manifest["source"]
    out = ["<!doctype html><html><head><meta charset='utf-8'>",
           f"<title>Export report: {h(src['name'], 120)}</title><style>{_CSS}</style></head><body>",
           f"<h1>Export report: {h(src['name'], 120)}</h1>"]
    failures = manifest["failures"]
    if failures:
        out.append(f"<div class='fail'><b>❌ {len(failures)} failure(s): this bundle is not ready to ship.</b><ul>"
                   + "".join(f"<li>{h(f, 600)}</li>" for f in failures) + "</ul></div>")
    else:
        out.append("<div class='ok'><b>✅ Every artifact that can run here was reloaded by its engine and verified."
                   "</b></div>")
    out.append(f"<p class='muted'>source sha256 {h(src['sha256'])} · {src['bytes']:,} bytes · IR {src['ir_version']}"
               " · opsets " + h(", ".join(f"{k} {v}" for k, v in src["opsets"].items())) + "</p>")
    out.append("<h2>Targets</h2><table><tr><th>target</th><th>status</th><th>message</th></tr>")
    for name, t in manifest["targets"].items():
        out.append(f"<tr><td>{h(name)}</td><td>{STATUS_ICON.get(t['status'], '')} {h(t['status'])}</td>"
                   f"<td>{h(t['message'], 500)}</td></tr>")
    out.append("</table><h2>Artifacts</h2><table><tr><th>file</th><th>kind</th><th>precision</th>"
               "<th>verification</th><th>criteria</th><th>sha256</th></tr>")
    for t in manifest["targets"].values():
        for a in t["artifacts"]:
            v = a["verification"]
            verdict = f"{STATUS_ICON.get(v['status'], '')} {h(v['message'], 300)}" if v else "–"
            out.append(f"<tr><td><a href='{h(a['path'])}'><code>{h(a['path'])}</code></a></td><td>{h(a['kind'])}</td>"
                       f"<td>{h(a['precision'] or '–')}</td><td>{verdict}</td>"
                       f"<td class='muted'>{h(v['criteria'] if v else '')}</td><td><code>{h(a['sha256'][:12])}</code>"
                       "</td></tr>")
    ver = manifest["verification"]
    out.append(f"</table><h2>Verification</h2><p>Reference: {h(ver['reference'])}<br>Criteria: {h(ver['criteria'])}"
               "<br>Input shapes: " + h(", ".join(f"{k} {v}" for k, v in ver["input_shapes"].items())) + "</p>")
    charts = _charts(manifest)
    if charts:
        out.append(f"<h2>Benchmarks</h2>{charts}<p class='muted'>{h(manifest['benchmarks']['note'], 800)}</p>")
    notes = [(name, n) for name, t in manifest["targets"].items() for n in t["notes"]]
    notes += [("deploy", n) for n in manifest["deploy"]["notes"]]
    if notes:
        out.append("<h2>Notes</h2><ul>" + "".join(f"<li><b>{h(name)}</b>: {h(n, 500)}</li>" for name, n in notes)
                   + "</ul>")
    if manifest.get("graph"):
        out.append("<h2>Exported model graph</h2><p><a href='graph.html'>Open the graph view</a></p>"
                   "<iframe src='graph.html' title='graph view of the exported model'></iframe>")
    out.append("<h2>Tools</h2><p class='muted'>" + h(", ".join(f"{k} {v}" for k, v in manifest["tools"].items() if v),
                                                       2000) + "</p></body></html>")
    return "\n".join(out)
