"""A real browser uploads a sample model through the uploader and sees its node count."""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLES
from tests.e2e.conftest import nodes_metric, open_and_upload

pytestmark = pytest.mark.browser


@pytest.mark.covered_by("test_upload_to_exported_bundle")   # test_journey checks all this too
def test_upload_sample_and_see_node_count(shared_studio, page, shots):
    server = shared_studio
    open_and_upload(page, server.url, str(SAMPLES / "cnn_unfused.onnx"))
    nodes = nodes_metric(page)
    assert "37" in nodes.inner_text()
    page.get_by_text("Op histogram").first.wait_for()
    shots(page, "overview-after-upload")
    assert server.alive()
