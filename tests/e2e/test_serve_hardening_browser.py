"""R43/R44 in a real browser: another site cannot frame the studio; hostile upload names
(5,000 characters, RTL override, newline, quotes) import instead of "AxiosError 400";
SIGTERM to `serve` while a session has sandbox workers ends them all and frees the port."""

from __future__ import annotations

import signal

import pytest

from tests.conftest import SAMPLES
from tests.e2e.conftest import nodes_metric, open_and_upload, wait_for_app
from tests.servers import StudioServer, all_gone, port_bindable, wait_until

pytestmark = pytest.mark.browser

PORT_FREE_S = 5


def test_r43_another_site_cannot_frame_the_studio(shared_studio, page):
    serve = shared_studio
    page.goto(f"{serve.url}/_stcore/health")            # any origin page; the frame is cross-document
    page.set_content(f'<iframe id="f" src="{serve.url}/" width="800" height="600"></iframe>')   # waits for load
    frames = [f for f in page.frames if f != page.main_frame]
    assert len(frames) == 1
    # The studio's index.html has <div id="root"> in its first bytes; a refused frame shows an error page.
    assert frames[0].query_selector("#root") is None


@pytest.mark.parametrize("name", ["A" * 5000 + ".onnx", "model\u202exnno.onnx", "two\nlines.onnx",
                                  "quote\"and;semicolon.onnx"])
def test_r43_hostile_upload_names_import(shared_studio, page, name):
    serve = shared_studio
    open_and_upload(page, serve.url, [{"name": name, "mimeType": "application/octet-stream",
                                       "buffer": (SAMPLES / "cnn_unfused.onnx").read_bytes()}])
    nodes = nodes_metric(page)
    assert "37" in nodes.inner_text()
    wait_for_app(page)            # a handled upload gets a fresh uploader; the old one goes when the run ends
    assert not any("AxiosError" in t for t in page.locator('[data-testid="stFileUploader"]').all_inner_texts())


def test_r44_sigterm_while_a_session_has_workers_stops_them_all(tmp_path, page):
    serve = StudioServer(tmp_path / "ws", str(SAMPLES / "cnn_unfused.onnx"))
    try:
        page.goto(serve.url)
        wait_for_app(page)
        nodes_metric(page)
        procs = serve.descendants()
        workers = [p for p in procs if "studio.core.worker" in " ".join(p.cmdline())]
        assert workers, [p.cmdline()[:4] for p in procs]        # inspect ran in a sandbox worker
        serve.send(signal.SIGTERM)
        assert wait_until(lambda: port_bindable(serve.port), PORT_FREE_S)
        assert wait_until(lambda: all_gone(procs), PORT_FREE_S), [p.pid for p in procs]
    finally:
        serve.stop()


