"""Real-browser fixtures: `onnx-studio serve` in a subprocess and Debian's
headless Chromium driven by Playwright through ``executable_path``.

Without Chromium or Playwright the browser tests skip, except under CI (``CI=true``, or
ONNX_STUDIO_REQUIRE_BROWSER=1), where they fail naming what is missing: CI must run them
(tests/requirements.py).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.requirements import chromium_path

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _require_browser() -> str:
    from tests.requirements import require

    require("BROWSER")
    return chromium_path()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, workspace: Path, model: Path | None = None, extra_env: dict | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "studio", "serve", "--port", str(self.port), "--workspace", str(workspace)]
        if model:
            cmd.append(str(model))
        env = {**os.environ, **(extra_env or {})}
        self.log = open(workspace / "server.log", "wb")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {(workspace / 'server.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError("server did not start within 90 s")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        import signal

        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


@pytest.fixture
def studio_server(tmp_path):
    servers: list[Server] = []

    def start(model: Path | None = None, **env: str) -> Server:
        ws = tmp_path / f"server-ws-{len(servers)}"
        ws.mkdir()
        s = Server(ws, model, env)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


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
    """Wait until Streamlit has rendered and finished running the script."""
    page.wait_for_selector('[data-testid="stApp"]')
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=90_000)
