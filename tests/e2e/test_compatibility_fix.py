"""A real browser opens the mmdeploy sample, sees the Compatibility check fail, applies the
legalize-grid-sampler fix from the page, and sees the re-check turn green."""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLES
from tests.e2e.conftest import wait_for_app

pytestmark = pytest.mark.browser


@pytest.mark.covered_by("test_upload_to_exported_bundle")   # test_journey checks all this too
def test_fix_mmdeploy_grid_sampler_from_the_page(shared_studio, page, shots):
    server = shared_studio
    page.goto(f"{server.url}/compatibility{server.preload(SAMPLES / 'mmdeploy_grid_sampler.onnx')}")
    wait_for_app(page)
    page.get_by_text("❌ fails").first.wait_for(timeout=120_000)
    page.get_by_text("ORT-NO-KERNEL").first.wait_for()
    shots(page, "compatibility-before-fix")
    page.get_by_role("button", name="Fix: legalize-grid-sampler").click()
    page.get_by_text("Applied").first.wait_for(timeout=180_000)
    wait_for_app(page)
    page.get_by_text("✅ runs").first.wait_for(timeout=120_000)
    assert page.get_by_text("❌ fails").count() == 0
    assert page.get_by_role("button", name="Fix: legalize-grid-sampler").count() == 0
    shots(page, "compatibility-after-fix")
    assert server.alive()
