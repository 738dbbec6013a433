"""Real-browser fixtures: `onnx-studio serve` in a subprocess and Debian's
headless Chromium driven by Playwright through ``executable_path``.

Without Chromium or Playwright the browser tests skip, except under CI (``CI=true``, or
ONNX_STUDIO_REQUIRE_BROWSER=1), where they fail naming what is missing: CI must run them
(tests/requirements.py).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from studio import api
from tests.servers import StudioServer
from tests.requirements import chromium_path

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _require_browser() -> str:
    from tests.requirements import require

    require("BROWSER")
    return chromium_path()


@pytest.fixture
def studio_server(tmp_path):
    """``studio_server(model=None, **env)``: ``onnx-studio serve`` for this test (tests.servers.StudioServer),
    on the test's own projects root (the one the test's api calls see) and a workspace in its temp folder."""
    servers: list[StudioServer] = []

    def start(model: Path | None = None, **env: str) -> StudioServer:
        ws = tmp_path / f"server-ws-{len(servers)}"
        s = StudioServer(ws, model=model, projects_root=Path(os.environ["ONNX_STUDIO_PROJECTS_ROOT"]), env=env)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


class SharedStudio:
    """The worker's one ``onnx-studio serve`` (no model, local mode) as one test sees it: the test's api
    calls use the server's projects root, its browser context is a fresh Streamlit session, and what it
    uploads or opens lands in a project of its own. ``projects()`` lists only the projects made since the
    test began (tests on one xdist worker run one at a time)."""

    def __init__(self, server: StudioServer) -> None:
        self.server = server
        self.url = server.url
        self._before = {p.id for p in api.list_projects()}

    def alive(self) -> bool:
        return self.server.alive()

    def projects(self) -> list:
        return [p for p in api.list_projects() if p.id not in self._before]

    def preload(self, model: Path) -> str:
        """What ``serve MODEL`` preloads, in a project of this test's own: the URL query that opens it
        (``serve MODEL``'s own preload is checked by test_serve_hardening_browser's R44 test)."""
        handle = api.load(model)
        project = api.create_project(handle.name)
        m, v = api.model_for(project, handle)
        return f"?project={project.id}&model={m.id}&version={v.id}"


@pytest.fixture(scope="session")
def _shared_server(tmp_path_factory):
    """The worker's shared server, started on first use (``get()``), again if a test left it dead."""
    started: list[StudioServer] = []

    def get() -> StudioServer:
        if not started or not started[-1].alive():
            root = tmp_path_factory.mktemp("shared-serve")
            started.append(StudioServer(root / "ws", projects_root=root / "projects"))
        return started[-1]

    yield get
    for s in started:
        s.stop()


@pytest.fixture
def shared_studio(_shared_server, monkeypatch) -> SharedStudio:
    """One ``onnx-studio serve`` per xdist worker for the browser tests that need no server of their own
    (each one started costs seconds of imports and a cold first run); restarted if a test left it dead.
    Tests that stop, kill or reconfigure a server use ``studio_server``."""
    _require_browser()                       # skip (or fail under CI) before starting anything
    server = _shared_server()
    monkeypatch.setenv("ONNX_STUDIO_PROJECTS_ROOT", str(server.projects_root))
    return SharedStudio(server)


@pytest.fixture(scope="session")
def browser():
    path = _require_browser()
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    b = pw.chromium.launch(executable_path=path, headless=True, args=CHROMIUM_ARGS)
    yield b
    b.close()
    pw.stop()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(60_000)
    yield pg
    context.close()


@pytest.fixture
def shots(tmp_path, request):
    """Save screenshots under the test's temp dir (and ONNX_STUDIO_ARTIFACTS if set)."""
    out = tmp_path / "screenshots"
    out.mkdir()
    extra = os.environ.get("ONNX_STUDIO_ARTIFACTS")

    def shot(page, name: str) -> Path:
        p = out / f"{name}.png"
        page.screenshot(path=str(p), full_page=True)
        if extra:
            dest = Path(extra) / request.node.name
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy(p, dest / p.name)
        assert p.stat().st_size > 5_000
        return p
    return shot


def wait_for_app(page) -> None:
    """Wait until Streamlit has rendered and finished running the script: no status widget and no stale
    element (``data-stale="true"``: one the run in progress has not drawn again yet, e.g. the previous
    model's Save button). The status widget shows only after a run has lasted a while, so under load a
    test saw the end of one run's URL update and then the previous page's elements (test_models_never_mix,
    load 10, 2026-12-04)."""
    page.wait_for_selector('[data-testid="stApp"]')
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]') && "
        "!document.querySelector('[data-stale=\"true\"]')", timeout=90_000)


UPLOADER = '[data-testid="stFileUploader"] input[type="file"]'


def open_and_upload(page, url: str, files) -> None:
    """Open the studio at ``url`` and pick ``files`` (a path, or Playwright file payloads) in the
    Overview's uploader."""
    page.goto(url)
    wait_for_app(page)
    page.get_by_text("Upload an ONNX model").wait_for()
    page.locator(UPLOADER).set_input_files(files)


def ready_viewer(page, also: str | None = None, timeout_s: float = 120):
    """The graph viewer's frame once it has laid out (and the JS expression ``also`` holds in it), looked for
    in every frame on the page each time: a page can hold two viewers (the Diff page's, beside a stale one), and
    a Streamlit rerun keeps the previous run's elements until it finishes, then replaces them, so the frame
    found first can be the old one and be detached while it is waited on (CI, 2026-12-04: the Diff page's test
    read 'Frame was detached')."""
    import time

    ready = "() => !!document.getElementById('gv-data') && !!window.__graphReady && window.__graph.ready()"
    if also:
        ready = f"{ready} && ({also})"          # still the arrow's body
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for f in page.frames:
            if f == page.main_frame:
                continue
            try:
                if f.evaluate(ready):
                    return f
            except Exception:       # detached while the page reruns, still navigating, or not a viewer yet
                continue
        page.wait_for_timeout(200)
    raise AssertionError(f"the graph viewer was not ready within {timeout_s:.0f} s: {ready}")


def click_viewer_node(page, frame, key: str, timeout_s: float = 60) -> None:
    """Click the node ``key`` of the graph viewer in ``frame`` as a user would, where it is on screen once the
    page has stopped moving: the frame scrolled into view, its place on the page and the node's place in it the
    same in two reads 150 ms apart. Reports and charts that mount above the viewer push it down while a run
    finishes, later on a busy machine than a fixed pause allows for, and a click at the old place misses."""
    import time

    deadline = time.monotonic() + timeout_s
    seen = None
    while True:
        frame.frame_element().scroll_into_view_if_needed()
        box = frame.frame_element().bounding_box()
        r = frame.evaluate(f"__graph.rectOf({key!r})")
        now = None if not box or not r else (box["x"], box["y"], r["x"], r["y"], r["w"], r["h"])
        if now is not None and now == seen:
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"node {key!r} kept moving on the page for {timeout_s:.0f} s: {seen} -> {now}")
        seen = now
        page.wait_for_timeout(150)
    page.mouse.click(box["x"] + r["x"] + r["w"] / 2, box["y"] + r["y"] + r["h"] / 2)


def nodes_metric(page, showing: str | None = None, timeout_ms: int = 90_000):
    """The Overview's Nodes metric once it is on the page (and shows ``showing``, when given)."""
    nodes = page.locator('[data-testid="stMetric"]').filter(has_text="Nodes")
    if showing is not None:
        nodes = nodes.filter(has_text=showing)
    nodes.wait_for(timeout=timeout_ms)
    return nodes


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed browser test's report carries what its page showed (the visible text of the sidebar
    and the main area): a CI log then says which state the page was in, where a screenshot is lost."""
    outcome = yield
    report = outcome.get_result()
    page = getattr(item, "funcargs", {}).get("page")
    if report.when != "call" or not report.failed or page is None:
        return
    try:
        text = page.evaluate(
            "() => ['stSidebar', 'stMain'].map(id => { const e = document.querySelector(`[data-testid=\"${id}\"]`);"
            " return `[${id}]\\n` + (e ? e.innerText : '(absent)'); }).join('\\n')", )
        report.sections.append(("page at failure", f"url {page.url}\n{text[:4000]}"))
    except Exception as exc:   # noqa: BLE001 -- a closed or crashed page: say so, keep the test's own failure
        report.sections.append(("page at failure", f"could not read the page: {type(exc).__name__}: {exc}"))
