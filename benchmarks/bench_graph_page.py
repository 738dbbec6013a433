"""The Streamlit Graph page's feel on large models (issue 35): what a user waits for in the browser UI, where
``bench_viewers`` times the standalone HTML.

Per model, in a fresh ``onnx-studio serve MODEL`` and a fresh headless Chromium (Debian's, Playwright), median
of N interleaved runs; seconds of wall time measured from this process (the page and the viewer's frame have
separate clocks):
- *to the viewer*: from the click on the Graph page's link to the first painted frame of the laid-out graph in
  the viewer's frame (``window.__graphReady``, the same definition as ``bench_viewers``' first paint), split
  into *server* (the page script: the graph, hierarchy, scene and the viewer document, until the frame exists)
  and *browser* (the frame's document to its first laid-out paint);
- *back again*: to another page and back to Graph, to the painted viewer (the page keeps its work);
- *every group open*: inside the frame, every group opened, to the painted frame of that layout, and the
  frame's longest main-thread stall meanwhile (a 16 ms timer's longest gap);
- *pan/zoom fps* with every group open (1000 / median rAF interval of a scripted drag with wheel zoom);
- *memory*: the browser's renderer processes (USS) and the server's process tree (RSS), after it opened.

``python -m benchmarks.bench_graph_page [REPS] [--models 3k,10k,30k,100k] [--timeout S]``.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from benchmarks.bench_viewers import STALL_END, STALL_START, STUDIO_PAINTED, pan_zoom, process_mb, select
from benchmarks.harness import cpu_banner, print_table

DEFAULT = ["3k", "10k", "30k", "100k"]
_FRAME = "() => !!document.getElementById('gv-data') && !!window.__graphReady && window.__graph.ready()"


def _viewer_frame(page, deadline: float, seen: dict[str, float] | None = None):
    """The frame the page drew the viewer in, once it painted its laid-out graph; ``seen['frame']`` gets the
    time the viewer's document first existed."""
    while time.monotonic() < deadline:
        for f in page.frames:
            if f == page.main_frame:
                continue
            with contextlib.suppress(Exception):        # a frame detached while the page reruns
                if seen is not None and "frame" not in seen and f.evaluate("!!document.getElementById('gv-data')"):
                    seen["frame"] = time.perf_counter()
                if f.evaluate(_FRAME):
                    return f
        page.wait_for_timeout(50)
    raise TimeoutError("the viewer did not paint within the limit")


def _pan_fps(page, frame) -> float:
    """fps of the viewer's frame during bench_viewers' scripted drag with wheel zoom, over the frame."""
    box = page.locator("iframe").last.bounding_box() or {"x": 300, "y": 200, "width": 900, "height": 600}
    return pan_zoom(page, frame, (box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.55), swing=160)


def _tree_rss_mb(pid: int) -> float:
    procs = [psutil.Process(pid)]
    with contextlib.suppress(psutil.Error):
        procs += procs[0].children(recursive=True)
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total / 1e6


def _goto_graph(page, timeout_s: float) -> tuple[float, float, Any]:
    """Click the Graph page's link; (server s, browser s, the viewer frame)."""
    seen: dict[str, float] = {}
    t0 = time.perf_counter()
    page.get_by_role("link", name="Graph", exact=True).click()
    frame = _viewer_frame(page, time.monotonic() + timeout_s, seen)
    t1 = time.perf_counter()
    server = seen.get("frame", t1) - t0
    return server, t1 - t0 - server, frame


def measure(pw, model: Path, timeout_s: float) -> dict[str, Any]:
    from tests.e2e.conftest import CHROMIUM_ARGS, chromium_path, nodes_metric, wait_for_app
    from tests.servers import StudioServer

    tmp = Path(tempfile.mkdtemp(prefix="bench-graph-page-"))
    server = StudioServer(tmp / "ws", model=model)
    browser = pw.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS)
    try:
        page = browser.new_context(viewport={"width": 1500, "height": 1100}).new_page()
        page.set_default_timeout(timeout_s * 1000)
        page.goto(server.url)
        page.get_by_role("link", name="Graph", exact=True).wait_for()
        wait_for_app(page)
        nodes_metric(page)                                      # serve MODEL's preload is open and inspected
        out: dict[str, Any] = {}
        out["server"], out["browser"], frame = _goto_graph(page, timeout_s)
        out["first"] = out["server"] + out["browser"]
        out["items"] = frame.evaluate("__graph.visibleCount()")
        page.get_by_role("link", name="Overview", exact=True).click()
        wait_for_app(page)
        nodes_metric(page)
        out["back_server"], out["back_browser"], frame = _goto_graph(page, timeout_s)
        out["back"] = out["back_server"] + out["back_browser"]
        frame.evaluate(STALL_START)
        seq = frame.evaluate("__graph.layoutSeq()") + 1
        t0 = time.perf_counter()
        frame.evaluate("() => { const v = __graph.viewer; v.model.s.groups.forEach((g, i) => { if (i) v.model.open.add(i); }); "
                       "v.relayout(null); }")
        frame.evaluate(STUDIO_PAINTED, [seq, True])
        out["opened"] = time.perf_counter() - t0
        out["stall"] = frame.evaluate(STALL_END)
        out["opened_items"] = frame.evaluate("__graph.visibleCount()")
        page.wait_for_timeout(300)
        out["fps"] = _pan_fps(page, frame)
        out["mem"] = process_mb(browser, "renderer")
        out["server_mb"] = _tree_rss_mb(server.proc.pid)
        return out
    finally:
        browser.close()
        server.stop()


def main(reps: int = 3, only: list[str] | None = None, timeout_s: float = 300.0) -> list[list]:
    from benchmarks.bench_viewers import missing

    why = missing()
    if why and "Netron" not in why:            # this page needs Chromium, not the other viewers
        print(f"Graph page: skipped: {why}")
        return []
    from playwright.sync_api import sync_playwright

    import onnx

    models = [(k, label, b()) for k, label, b in select(None, only or DEFAULT)]
    models = [(k, label, p) for k, label, p in models if p is not None and p.exists()]
    runs: dict[str, list[dict]] = {}
    with sync_playwright() as pw:
        for rep in range(reps):
            for key, _, path in models:
                try:
                    m = measure(pw, path, timeout_s)
                except Exception as exc:      # one model failing must not stop the table
                    m = {"error": str(exc).splitlines()[0][:100]}
                runs.setdefault(key, []).append(m)
                print(f"  rep {rep + 1} {key}: " + ", ".join(
                    f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in m.items()), flush=True)

    def cell(ms: list[dict], f: str, fmt: str = "{:.2f}") -> str:
        v = [m[f] for m in ms if m.get(f) is not None]
        return fmt.format(statistics.median(v)) if v else "n/a"

    rows = []
    for key, label, path in models:
        nodes = len(onnx.load(str(path), load_external_data=False).graph.node)
        ms = [m for m in runs[key] if "error" not in m]
        if not ms:
            rows.append([f"{label}, {nodes:,} nodes", f"failed: {runs[key][0]['error']}", *[""] * 6])
            continue
        rows.append([f"{label}, {nodes:,} nodes", f"{cell(ms, 'first')} ({cell(ms, 'server')} + {cell(ms, 'browser')})",
                     f"{cell(ms, 'back')} ({cell(ms, 'back_server')} + {cell(ms, 'back_browser')})", f"{cell(ms, 'opened')} ({cell(ms, 'opened_items', '{:,.0f}')} items)",
                     cell(ms, "stall"), cell(ms, "fps", "{:.0f}"), cell(ms, "mem", "{:.0f}"), cell(ms, "server_mb", "{:.0f}")])
    print_table(f"The Streamlit Graph page (median of {reps}; s of wall time from the click)",
                ["model", "to the viewer s (server + browser)", "back again s (server + browser)", "every group open s", "longest stall s",
                 "pan/zoom fps opened", "renderer MB (USS)", "server MB (RSS)"], rows)
    return rows


if __name__ == "__main__":
    args = sys.argv[1:]
    reps = int(args.pop(0)) if args and args[0].isdigit() else 3
    keys, timeout = None, 300.0
    while args:
        a = args.pop(0)
        if a == "--models":
            keys = args.pop(0).split(",")
        elif a == "--timeout":
            timeout = float(args.pop(0))
    print(cpu_banner(), flush=True)
    main(reps, keys, timeout)
