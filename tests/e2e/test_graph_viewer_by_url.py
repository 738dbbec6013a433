"""The Graph page's viewer under ``onnx-studio serve`` is loaded by URL (studio.ui.viewer_docs), not sent
inside the page's messages: the frame's address is the document's sha256 on the studio's own route, that
address answers the very document the frame shows (framed by the studio only), and a click's rerun keeps
the frame (same address, no reload: the view the user panned stays)."""

from __future__ import annotations

import hashlib
import re
import urllib.request

import pytest

from tests.conftest import SAMPLES
from tests.e2e.conftest import click_viewer_node, ready_viewer, wait_for_app

pytestmark = pytest.mark.browser

def test_the_viewer_frame_loads_its_document_by_url(shared_studio, page):
    server = shared_studio
    page.goto(server.url + server.preload(SAMPLES / "cnn_unfused.onnx"))
    wait_for_app(page)
    page.get_by_role("link", name="Graph", exact=True).click()
    frame = ready_viewer(page)
    m = re.fullmatch(re.escape(server.url) + r"/studio/viewer/([0-9a-f]{64})\.html", frame.url)
    assert m, frame.url                                    # not about:srcdoc: the document came by URL
    assert frame.frame_element().get_attribute("srcdoc") is None
    with urllib.request.urlopen(frame.url, timeout=30) as r:
        body, headers = r.read(), r.headers
    assert hashlib.sha256(body).hexdigest() == m.group(1)                # the address is the text's sha256
    assert "frame-ancestors 'self'" in headers["content-security-policy"]
    assert frame.evaluate("document.getElementById('gv-data').textContent.length") > 100
    # A click in the viewer reruns the page (the node's panel opens below): the frame stays, not reloaded.
    frame.evaluate("window.__sameDoc = 1")
    key = frame.evaluate("__graph.viewer.model.s.leaves.find(l => l.kind === 'op').key")
    frame.fill(".gv-toolbar input", key)
    frame.press(".gv-toolbar input", "Enter")
    frame.wait_for_function(f"() => __graph.selected() === {key!r} && __graph.ready()", timeout=60_000)
    click_viewer_node(page, frame, key)
    page.get_by_role("button", name="Neighbourhood in detail").first.wait_for(timeout=60_000)   # the rerun's panel
    wait_for_app(page)
    again = ready_viewer(page)
    assert again.url == frame.url and again.evaluate("window.__sameDoc") == 1
