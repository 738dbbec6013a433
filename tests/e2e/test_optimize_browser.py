"""A real browser runs the safe preset from the Optimize page and sees the report."""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLES
from tests.e2e.conftest import wait_for_app

pytestmark = pytest.mark.browser


@pytest.mark.covered_by("test_upload_to_exported_bundle")   # test_journey checks all this too
def test_safe_preset_from_the_optimize_page(shared_studio, page, shots):
    server = shared_studio
    page.goto(f"{server.url}/optimize{server.preload(SAMPLES / 'cnn_unfused.onnx')}")
    wait_for_app(page)
    page.get_by_role("heading", name="Optimize").wait_for()
    page.get_by_role("button", name="Run").click()
    page.get_by_text("Saved as version v1").wait_for(timeout=120_000)
    page.get_by_text("passes changed the model").first.wait_for()
    page.get_by_text("Op counts that changed").wait_for()
    report = page.locator('[data-testid="stDataFrame"]').first
    report.wait_for()
    shots(page, "optimize-safe-report")
    assert page.get_by_text("Equivalent CLI command").count() >= 1
    assert server.alive()
