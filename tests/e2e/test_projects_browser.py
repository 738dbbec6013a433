"""Projects in a real browser: what a user made survives a reload, a server restart and
a ``kill -9`` of the server mid-run (the run is then marked interrupted); on a --shared
server another browser session cannot reach it by path, by URL or through a cache."""

from __future__ import annotations

import os
import re
import signal
import time
from urllib.parse import parse_qs, urlparse

import pytest

from studio import api
from tests.conftest import SAMPLES
from tests.e2e.conftest import nodes_metric, open_and_upload, wait_for_app

pytestmark = pytest.mark.browser

CNN = SAMPLES / "cnn_unfused.onnx"


def _upload(page, url: str) -> None:
    open_and_upload(page, url, str(CNN))
    nodes_metric(page, timeout_ms=120_000)
    page.wait_for_function("() => location.search.includes('project=')")


def _nav(page, title: str) -> None:
    page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=title).click()
    page.get_by_role("heading", name=title).first.wait_for()
    wait_for_app(page)


def _query(page) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def _version_options(page) -> list[str]:
    page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').filter(has_text="Model version").click()
    options = page.get_by_role("option")
    options.first.wait_for()
    texts = options.all_inner_texts()
    page.keyboard.press("Escape")
    return texts


def test_project_survives_reload_restart_and_kill_9(studio_server, page, shots):
    server = studio_server()
    _upload(page, server.url)
    [info] = api.list_projects()
    pid = info.id
    assert _query(page)["project"] == pid and info.name == "cnn_unfused"     # named after its first model
    # Optimize: v1.
    _nav(page, "Optimize")
    page.get_by_role("button", name="Run").click()
    page.get_by_text("Saved as version v1").wait_for(timeout=180_000)
    # Precision: an INT8 variant kept as v2 (the page's settings come from the project: only fp32 and int8).
    api.set_setting(pid, "ui:precision_variants", ["fp32", "int8"], model_id="m1")
    api.set_setting(pid, "ui:precision_budget", 5, model_id="m1")
    _nav(page, "Precision")
    page.get_by_role("button", name="Build and measure").click()
    page.get_by_role("button", name="Save int8").wait_for(timeout=300_000)
    page.get_by_role("button", name="Save int8").click()
    page.get_by_text(re.compile("saved as v2")).wait_for(timeout=60_000)
    wait_for_app(page)
    shots(page, "before-reload")

    # Reload (F5): the same page, project, model and versions.
    page.reload()
    wait_for_app(page)
    page.get_by_role("heading", name="Precision").wait_for()
    assert _query(page)["project"] == pid
    page.locator('[data-testid="stSidebar"]').get_by_text(f"Project {info.name}").first.wait_for()
    labels = _version_options(page)
    assert [t.split(" · ")[:2] for t in labels] == [["v0", "original"],
                                                    ["v1", "safe"], ["v2", "int8"]]
    shots(page, "after-reload")
    bookmark = page.url

    # Restart the server: the bookmark opens the project.
    server.stop()
    server2 = studio_server()
    page.goto(bookmark.replace(server.url, server2.url))
    wait_for_app(page)
    page.get_by_role("heading", name="Precision").wait_for()
    assert [t.split(" · ")[0] for t in _version_options(page)] == ["v0", "v1", "v2"]

    # kill -9 the server while an optimize runs: the job is left running, then shown as interrupted.
    _nav(page, "Optimize")
    before = {j.id for j in api.project_jobs(pid)}
    killed = None
    for _ in range(3):
        page.get_by_role("button", name="Run").click()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and killed is None:
            new = [j for j in api.project_jobs(pid) if j.id not in before and j.kind == "optimize"]
            if new and new[0].state == "running":
                os.killpg(server2.proc.pid, signal.SIGKILL)
                server2.proc.wait(30)
                killed = new[0].id
            elif new:                       # finished before we saw it running: try once more
                before |= {j.id for j in new}
                break
            time.sleep(0.01)
        if killed:
            break
        wait_for_app(page)
    assert killed, "never saw the optimize job running"
    server3 = studio_server()
    url3 = bookmark.replace(server.url, server3.url)
    page.goto(url3.replace("/precision", "/projects"))
    wait_for_app(page)
    page.get_by_text("Some jobs were interrupted").wait_for()
    shots(page, "after-kill-9")
    jobs = {j.id: j.state for j in api.project_jobs(pid)}
    assert jobs[killed] == "interrupted"
    assert sorted(s for k, s in jobs.items() if k != killed) == ["done", "done"]    # optimize, precision
    assert [v.id for v in api.project_model(pid, "m1").versions] == ["v0", "v1", "v2"]
    assert server3.alive()


def test_shared_mode_session_b_cannot_reach_session_a(studio_server, browser, page, shots):
    server = studio_server(ONNX_STUDIO_SHARED="1")
    _upload(page, server.url)
    a = _query(page)
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    b = ctx.new_page()
    b.set_default_timeout(60_000)
    try:
        # Not listed.
        b.goto(f"{server.url}/projects")
        wait_for_app(b)
        b.get_by_text("0 projects (this session's)").wait_for()
        # Not by path: the path input is off.
        b.goto(server.url)
        wait_for_app(b)
        b.get_by_role("tab", name="Path").click()      # the "Open a model" panel is open without a model
        b.get_by_text("Opening files by path is disabled").wait_for()
        # Not by URL guessing: the model/version without the project id, or a guessed id.
        b.goto(f"{server.url}/overview?model={a['model']}&version={a['version']}")
        wait_for_app(b)
        b.get_by_text("Upload an ONNX model").wait_for()
        guessed = a["project"][:-3] + ("aaa" if not a["project"].endswith("aaa") else "bbb")
        b.goto(f"{server.url}/overview?project={guessed}&model={a['model']}")
        wait_for_app(b)
        b.get_by_text("does not exist").wait_for()
        assert b.locator('[data-testid="stMetric"]').count() == 0
        # Not through a cache: the same content uploaded by B is B's own model in B's own project.
        _upload(b, server.url)
        mine = _query(b)
        assert mine["project"] != a["project"]
        pa, pb = api.open_project(a["project"]), api.open_project(mine["project"])
        assert pa.root != pb.root and (pb.root / pb.model("m1").version("v0").path).is_file()
        _nav(b, "Projects")
        b.get_by_text("1 project (this session's)").wait_for()
        shots(b, "shared-b")
        # A link is a grant: with A's full URL, B's browser opens A's project.
        b.goto(f"{server.url}/overview?project={a['project']}")
        wait_for_app(b)
        b.locator('[data-testid="stMetric"]').filter(has_text="Nodes").wait_for()
    finally:
        ctx.close()
