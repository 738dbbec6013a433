"""A real browser compares the preloaded model on ONNX Runtime and OpenVINO on the
Verify page, with the layer-wise chart, and sees the verdict and the CLI hint."""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLES
from tests.e2e.conftest import wait_for_app

pytestmark = pytest.mark.browser


def test_verify_page_compares_two_engines(shared_studio, page, shots):
    server = shared_studio
    page.goto(f"{server.url}/verify{server.preload(SAMPLES / 'cnn_unfused.onnx')}")
    wait_for_app(page)
    page.get_by_text("Engine B").first.wait_for()
    page.get_by_text("Find the first diverging layer").click()
    wait_for_app(page)
    page.get_by_role("button", name="Compare").click()
    verdict = page.get_by_text("PASS: 1 outputs match")
    verdict.wait_for(timeout=180_000)
    page.get_by_text("First diverging layer", exact=True).wait_for()
    page.locator('[data-testid="stPlotlyChart"]').first.wait_for()
    assert "openvino" in page.content().lower()
    page.get_by_text("Equivalent CLI command").click()
    page.get_by_text("--engine-b openvino").first.wait_for()
    shots(page, "verify-ort-vs-openvino")
    assert server.alive()
