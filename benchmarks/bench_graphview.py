"""Graph view at scale: a generated 10,000-node model and a 100,000-node chain.

Goal (graph-view issue): the overview reaches the browser with server-side
layout in <= 2 s (10k nodes) and <= 5 s (100k chain). Measured in a fresh
process per model, stage by stage: inspect (shapes, FLOPs; the UI caches it
per model), graph + hierarchy, overview (projection, layout, overlay), and
the ECharts option serialized to JSON (what Streamlit sends). With Chromium
present, the offline HTML is also opened and timed until ECharts has drawn.
"""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks.graph_models import chain, resnet_like, run_graph_cases
from benchmarks.harness import opened_in_chromium, print_table

CASES = [("resnet-like, scoped names", "r10k", lambda p: resnet_like(1000, p), 2.0),
         ("chain, flat names", "chain100k", lambda p: chain(100_000, p), 5.0)]

_SNIPPET = """
t0 = time.perf_counter(); h = api.load({path!r}); t_load = time.perf_counter() - t0
t0 = time.perf_counter(); s = api.inspect(h); t_inspect = time.perf_counter() - t0
t0 = time.perf_counter(); idx = api.graph_index(h, s); t_index = time.perf_counter() - t0
t0 = time.perf_counter(); v = api.graph_view(index=idx, summary=s); t_view = time.perf_counter() - t0
t0 = time.perf_counter(); payload = json.dumps(api.graph_echarts(v)); t_spec = time.perf_counter() - t0
t0 = time.perf_counter(); idx2 = api.graph_index(h); v2 = api.graph_view(index=idx2); json.dumps(api.graph_echarts(v2))
t_fast = time.perf_counter() - t0
html = api.graph_html(v)
open({html!r}, "w", encoding="utf-8").write(html)
result = dict(nodes=len(idx.graph.nodes), items=len(v), level=v.projection.level, load=t_load,
              inspect=t_inspect, index=t_index, view=t_view, spec=t_spec, fast=t_fast,
              mb=len(payload) / 1e6, html_mb=len(html) / 1e6)
"""


def _browser_seconds(html: Path) -> float | None:
    """Seconds from opening the offline HTML to ECharts' first 'finished' event."""
    with opened_in_chromium(html, "document.body.dataset.rendered === '1'") as opened:
        return None if opened is None else opened[1]


def main(browser: bool = True) -> list[list]:
    rows = []
    setup = "import json, time\nfrom studio import api"
    for (label, _, _, goal), html, run in run_graph_cases(CASES, "bench-graphview-", setup, _SNIPPET):
        r = run.result
        server = r["index"] + r["view"] + r["spec"]
        b = _browser_seconds(html) if browser else None
        rows.append([f"{label} ({r['nodes']:,} nodes)", f"{r['items']:,} @ level {r['level']}",
                     f"{r['inspect']:.2f}", f"{r['index']:.2f}", f"{r['view']:.2f}", f"{r['spec']:.2f}",
                     f"{server:.2f}", f"{server + r['inspect']:.2f}", f"{r['fast']:.2f}", f"<= {goal:g}",
                     f"{r['mb']:.1f}", "n/a" if b is None else f"{b:.2f}", f"{run.peak_rss_mb:.0f}"])
    print_table("Graph view overview at scale (seconds; goal applies to the server-side layout)",
                ["model", "drawn items", "inspect", "graph+hierarchy", "overview", "option JSON",
                 "server-side layout", "with inspect", "no-inspect path", "goal", "payload MB",
                 "browser draw (HTML)", "peak RSS MB"], rows)
    return rows


if __name__ == "__main__":
    main(browser="--no-browser" not in sys.argv)
