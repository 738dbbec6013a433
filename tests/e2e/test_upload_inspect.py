"""A real browser uploads a sample model through the uploader and sees its node count."""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLES
from tests.e2e.conftest import wait_for_app

pytestmark = pytest.mark.browser


def test_upload_sample_and_see_node_count(studio_server, page, shots):
    server = studio_server()
    page.goto(server.url)
    wait_for_app(page)
    page.get_by_text("Upload an ONNX model").wait_for()
    page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(
        str(SAMPLES / "cnn_unfused.onnx"))
    nodes = page.locator('[data-testid="stMetric"]').filter(has_text="Nodes")
    nodes.wait_for(timeout=90_000)
    assert "37" in nodes.inner_text()
    page.get_by_text("Op histogram").first.wait_for()
    shots(page, "overview-after-upload")
    assert server.alive()
