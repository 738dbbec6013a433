"""The studio's graph viewer side by side with Netron and Model Explorer (issue 35), in one headless
Chromium (Debian's, driven by Playwright), on the same files, median of N interleaved runs.

What each viewer shows at *first paint* (not the same work, said in the table):
- studio: its standalone HTML (``graph -o x.html``), the grouped overview (<= ~150 items, ELK layout);
  the time is the page build in Python (graph + hierarchy + scene + HTML) plus the browser's
  ``window.__graphReady`` (the rAF after the first frame that shows the laid-out boxes).
- Netron (pip ``netron``, its own local server): every node laid out (dagre) and drawn as SVG;
  first paint = the rAF after the frame in which the graph's nodes are in the page and Netron left its
  spinner (``body.default``).
- Model Explorer (pip ``ai-edge-model-explorer`` + ``model-explorer-onnx``, its own local server, the
  ONNX conversion included): its collapsed root layer; first paint = the rAF after the frame in which
  its WebGL renderer is in the page and the "Processing graph" spinner is gone.
Each time is from navigation start in a fresh browser. *Opened*: the studio with every group open
(ELK below 1,500 items, its flat layout above); Netron's first paint already is every node; Model
Explorer's expand-all is not scripted here (n/a). *Pan/zoom fps*: rAF frames counted during a scripted
1.2 s mouse drag plus wheel zoom on the drawing (median frame interval -> fps). *Heap*: CDP
``Performance.getMetrics`` JSHeapUsedSize of the page after first paint (workers not included).

Netron and Model Explorer are benchmark extras (``make bench-deps``: their own venv under
benchmarks/.cache/viewers-venv, never needed by ``make test``); without them this prints one line and
skips. ``python -m benchmarks.bench_viewers [REPS] [MODEL ...]``.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.graph_models import cached_graph, resnet_like
from benchmarks.harness import cpu_banner, print_table
from benchmarks.models import CACHE

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("ONNX_STUDIO_VIEWERS_VENV", CACHE / "viewers-venv"))
CORPUS = Path(os.environ.get("ONNX_STUDIO_CORPUS", Path.home() / ".cache/onnx-studio/corpus"))

MODELS: list[tuple[str, str, Callable[[], Path | None]]] = [
    ("yolo", "real YOLO detector (nudenet_320n, corpus)",
     lambda: (CORPUS / "nudenet_320n.onnx") if (CORPUS / "nudenet_320n.onnx").exists() else None),
    ("llama", "llama decoder (sample_models/llama_optimum, code-built)", lambda: ROOT / "sample_models/llama_optimum.onnx"),
    ("3k", "synthetic resnet-like 3k", lambda: cached_graph("r3k", lambda p: resnet_like(300, p))),
    ("10k", "synthetic resnet-like 10k", lambda: cached_graph("r10k", lambda p: resnet_like(1000, p))),
    ("30k", "synthetic resnet-like 30k", lambda: cached_graph("r30k", lambda p: resnet_like(3000, p))),
]

# rAF probe installed before the page's scripts: the first frame in which ``cond`` holds is painted after
# that frame's rAF callbacks, so the stamp is taken in the next rAF (as the studio's own marker is).
_PROBE = """(() => {
  window.__paintAt = 0; let seen = false;
  const cond = () => { try { return !!(%s); } catch (e) { return false; } };
  const tick = () => {
    if (seen) { window.__paintAt = performance.now(); return; }
    if (document.body && cond()) seen = true;
    requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
})()"""
NETRON_READY = "document.body.classList.contains('default') && document.querySelector('#canvas .node')"
ME_READY = "document.querySelector('webgl-renderer canvas') && !document.querySelector('mat-spinner')"

_KEEP_EVAL = ("(() => { const ev = window.eval; Object.defineProperty(window, 'eval', "
              "{get: () => ev, set: () => {}, configurable: false}); })()")
_LOCAL = ("http://127.0.0.1", "file:", "blob:", "data:")

_RECORD = """() => { window.__ft = []; window.__rec = true;
  const tick = (t) => { window.__ft.push(t); if (window.__rec) requestAnimationFrame(tick); };
  requestAnimationFrame(tick); }"""


def missing() -> str | None:
    """One line saying why the side-by-side cannot run here, or None."""
    py = VENV / "bin/python"
    if not py.exists():
        return f"Netron / Model Explorer not installed ({VENV} missing): run `make bench-deps`"
    try:
        from playwright.sync_api import sync_playwright  # noqa: F401

        from tests.e2e.conftest import chromium_path
    except ImportError:
        return "Playwright not installed (the dev extra)"
    if chromium_path() is None:
        return "Chromium not found"
    return None


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, seconds: float = 120) -> None:
    import urllib.request

    t_end = time.time() + seconds
    while time.time() < t_end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.args}")
        with contextlib.suppress(OSError):
            urllib.request.urlopen(url, timeout=2).read(1)
            return
        time.sleep(0.2)
    raise RuntimeError(f"server did not answer: {url}")


@contextlib.contextmanager
def _server(kind: str, model: Path) -> Iterator[str]:
    """Netron's or Model Explorer's own local server for ``model`` (127.0.0.1): yields the page URL."""
    port = _port()
    if kind == "netron":
        code = ("import netron, sys, time\nnetron.start(sys.argv[1], ('127.0.0.1', int(sys.argv[2])), browse=False)\n"
                "while True: time.sleep(1)")
        cmd = [str(VENV / "bin/python"), "-c", code, str(model), str(port)]
        url = f"http://127.0.0.1:{port}/"
    else:
        cmd = [str(VENV / "bin/model-explorer"), str(model), "--extensions=model_explorer_onnx", "--host=127.0.0.1",
               f"--port={port}", "--no_open_in_browser", "--skip_health_check"]
        import json
        import urllib.parse

        url = f"http://127.0.0.1:{port}/?data=" + urllib.parse.quote(json.dumps({"models": [{"url": str(model)}]}))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_http(f"http://127.0.0.1:{port}/", proc)
        yield url
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        if proc.poll() is None:
            proc.kill()


def _studio_page(model: Path, out: Path) -> float:
    """Build the studio's standalone viewer page the way ``graph -o`` does; seconds."""
    from studio import api

    t = time.perf_counter()
    h = api.load(model)
    s = None if api.graph_prefers_fast_path(h) else api.inspect(h)
    api.write_graph_viewer(api.graph_index(h, s), out, summary=s)
    return time.perf_counter() - t


def _pan_zoom(page) -> float:
    """fps (1000 / median rAF interval) during a 1.2 s scripted drag with wheel zoom in between."""
    w, h = 1400, 1000
    cx, cy = w * 0.45, h * 0.55
    page.evaluate(_RECORD)
    page.mouse.move(cx, cy)
    page.mouse.down()
    t_end = time.perf_counter() + 1.2
    i = 0
    while time.perf_counter() < t_end:
        dx = 200 * ((i % 24) / 24 - 0.5)
        page.mouse.move(cx + dx, cy + dx * 0.5)
        i += 1
        if i % 6 == 0:
            page.mouse.up()
            page.mouse.wheel(0, -120 if (i // 6) % 2 else 120)
            page.mouse.down()
        time.sleep(0.012)
    page.mouse.up()
    page.evaluate("() => { window.__rec = false; }")
    t = page.evaluate("window.__ft")
    gaps = sorted(b - a for a, b in zip(t, t[1:])) or [0.0]
    med = statistics.median(gaps)
    return 1000 / med if med else 0.0


def _heap_mb(page) -> float:
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return metrics.get("JSHeapUsedSize", 0.0) / 1e6


def _measure(pw, kind: str, url: str) -> dict[str, Any]:
    from tests.e2e.conftest import CHROMIUM_ARGS, chromium_path

    browser = pw.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS)
    try:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.on("dialog", lambda d: d.accept())
        # Offline and local only: Netron asks ipinfo.io and Google Analytics, Model Explorer Google Fonts.
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(_LOCAL) else r.abort())
        if kind == "netron":
            # Netron waits for a cookie consent click before opening a file, and replaces window.eval
            # (which Playwright's evaluate needs): consent given, eval kept.
            context.add_cookies([{"name": "consent", "value": "1", "url": url}])
            page.add_init_script(_KEEP_EVAL)
        if kind != "studio":
            page.add_init_script(_PROBE % (NETRON_READY if kind == "netron" else ME_READY))
        page.goto(url)
        ready = "() => window.__graphReady" if kind == "studio" else "() => window.__paintAt > 0"
        page.wait_for_function(ready, timeout=600_000, polling=100)
        first = page.evaluate("window.__graphReady" if kind == "studio" else "window.__paintAt") / 1000
        out: dict[str, Any] = {"first": first, "opened": first if kind == "netron" else None}
        if kind == "studio":
            out["items"] = page.evaluate("__graph.visibleCount()")
        elif kind == "netron":
            out["items"] = page.evaluate("document.querySelectorAll('#canvas .node').length")
        page.wait_for_timeout(300)
        out["heap"] = _heap_mb(page)
        out["fps"] = _pan_zoom(page)
        if kind == "studio":
            seq = page.evaluate("__graph.layoutSeq()")
            t = page.evaluate("performance.now()")
            page.evaluate("() => { const v = __graph.viewer; v.model.s.groups.forEach((g, i) => v.model.open.add(i));"
                          " v.relayout(null); }")
            page.wait_for_function(f"() => __graph.layoutSeq() > {seq} && __graph.ready() && "
                                   "document.querySelector('.gv-status').textContent.indexOf('laying out') < 0",
                                   timeout=600_000, polling=50)
            out["opened"] = first + (page.evaluate("performance.now()") - t) / 1000
            out["opened_items"] = page.evaluate("__graph.visibleCount()")
        return out
    finally:
        browser.close()


def main(reps: int = 3, only: list[str] | None = None) -> list[list]:
    why = missing()
    if why:
        print(f"viewers side by side: skipped: {why}")
        return []
    from playwright.sync_api import sync_playwright

    models = [(k, label, build()) for k, label, build in MODELS if not only or k in only]
    models = [(k, label, p) for k, label, p in models if p is not None and p.exists()]
    tmp = Path(tempfile.mkdtemp(prefix="bench-viewers-"))
    builds: dict[str, list[float]] = {}
    runs: dict[tuple[str, str], list[dict]] = {}
    with sync_playwright() as pw:
        for rep in range(reps):
            for key, _, path in models:
                html = tmp / f"{key}.html"
                builds.setdefault(key, []).append(_studio_page(path, html))
                for kind in ("studio", "netron", "explorer"):
                    try:
                        if kind == "studio":
                            m = _measure(pw, kind, html.as_uri())
                            m["build"] = builds[key][-1]
                            m["browser"] = m["first"]
                            m["first"] += builds[key][-1]
                            m["opened"] += builds[key][-1]
                        else:
                            with _server(kind, path) as url:
                                m = _measure(pw, kind, url)
                    except Exception as exc:  # one viewer failing must not stop the table
                        m = {"error": str(exc).splitlines()[0][:80]}
                    runs.setdefault((key, kind), []).append(m)
                    print(f"  rep {rep + 1} {key} {kind}: " + ", ".join(
                        f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in m.items()), flush=True)
    rows = []
    for key, label, path in models:
        import onnx

        nodes = len(onnx.load(str(path), load_external_data=False).graph.node)
        for kind, name in (("studio", "studio (grouped overview)"), ("netron", "Netron 9.3.3 (every node)"),
                           ("explorer", "Model Explorer 0.1.34 (root layer)")):
            ms = [m for m in runs.get((key, kind), []) if "error" not in m]
            if not ms:
                err = next((m["error"] for m in runs.get((key, kind), []) if "error" in m), "not run")
                rows.append([f"{label} ({nodes:,} nodes)", name, f"failed: {err}", "", "", "", ""])
                continue

            def med(field: str, fmt: str, ms=ms) -> str:
                vals = [m[field] for m in ms if m.get(field) is not None]
                return fmt.format(statistics.median(vals)) if vals else "n/a"
            rows.append([f"{label} ({nodes:,} nodes)", name, med("first", "{:.2f}"),
                         med("build", "{:.2f}") + " + " + med("browser", "{:.2f}") if kind == "studio" else "—",
                         med("opened", "{:.2f}"), med("fps", "{:.0f}"), med("heap", "{:.0f}")])
    print_table(f"Graph viewers side by side, {datetime.date.today()} (median of {reps}, interleaved; s from "
                "navigation; the studio's page build included)",
                ["model", "viewer (what first paint shows)", "first paint s", "studio: page build + browser s",
                 "fully opened s",
                 "pan/zoom fps", "JS heap MB"], rows)
    return rows


if __name__ == "__main__":
    args = sys.argv[1:]
    n = int(args.pop(0)) if args and args[0].isdigit() else 3
    print(cpu_banner(), flush=True)
    main(n, args or None)
