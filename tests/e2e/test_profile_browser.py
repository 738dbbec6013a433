"""A real browser profiles two versions on two engines from the Profile page and
sees the latency chart and the ratio table."""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLES
from tests.e2e.conftest import nodes_metric, open_and_upload, wait_for_app

pytestmark = pytest.mark.browser


def _open_section(page, tab: str) -> None:
    """The Overview's "Open a model" expander collapses once a model is open: reopen it."""
    if not page.get_by_role("tab", name=tab).is_visible():
        page.get_by_text("Open a model").click()
    page.get_by_role("tab", name=tab).click()


def _wait_nodes(page, nodes: str) -> None:
    nodes_metric(page, nodes)
    wait_for_app(page)


def test_profile_two_versions_in_the_browser(shared_studio, page, shots):
    server = shared_studio
    open_and_upload(page, server.url, str(SAMPLES / "cnn_unfused.onnx"))
    _wait_nodes(page, "37")
    # A second version of the session: a sample model from the catalog.
    _open_section(page, "Sample model")
    page.locator('[data-testid="stSelectbox"]').filter(has_text="Sample").click()
    page.get_by_role("option").filter(has_text="mobilenet_like").click()
    wait_for_app(page)
    page.wait_for_timeout(1000)          # the pick's rerun: the panel stays open through it (no reopening here)
    wait_for_app(page)
    page.get_by_role("button", name="Open sample").click()      # the page's 60 s: a rerun may redraw it first
    _wait_nodes(page, "26")
    # Let the run finish (the sidebar's version picker is drawn last) before leaving the page.
    page.wait_for_function(
        """() => { const box = document.querySelector('[data-testid="stSidebar"] [data-testid="stSelectbox"]');
                   if (!box) return false;
                   const values = [box.textContent, ...Array.from(box.querySelectorAll('input'), i => i.value)];
                   return values.some(v => v && v.includes('mobilenet_like')); }""", timeout=60_000)
    wait_for_app(page)

    page.locator('[data-testid="stSidebarNav"]').get_by_text("Profile").click()
    page.get_by_role("heading", name="Profile").wait_for()
    wait_for_app(page)
    versions = page.locator('[data-testid="stMultiSelect"]').first
    # The project's two models side by side: add the first upload to the picked versions.
    versions.click()
    page.get_by_role("option").filter(has_text="cnn_unfused").first.click()
    page.keyboard.press("Escape")
    wait_for_app(page)
    assert "cnn_unfused" in versions.inner_text() and "mobilenet_like" in versions.inner_text()
    page.get_by_role("button", name="Run profile").click()

    page.get_by_text("Ratios against the baseline").wait_for(timeout=120_000)
    wait_for_app(page)
    page.locator("text=Latency per inference").first.wait_for()
    # Charts and tables mount one after another on a busy machine: wait for them, then count.
    page.locator('[data-testid="stPlotlyChart"]').nth(1).wait_for(timeout=60_000)
    page.locator('[data-testid="stDataFrame"]').nth(2).wait_for(timeout=60_000)
    verdicts = page.locator('[data-testid="stMarkdownContainer"] li')
    verdicts.nth(2).wait_for(timeout=30_000)
    assert verdicts.count() == 3                             # t0-ov, t1-ort, t1-ov against t0-ort
    text = " ".join(verdicts.all_inner_texts())
    assert "t1-ov" in text and ("faster" in text or "slower" in text or "no significant difference" in text)
    page.get_by_text("Equivalent CLI command").click()
    hint = page.get_by_text("onnx-studio profile ").first
    hint.wait_for()
    assert "cnn_unfused.onnx" in hint.inner_text() and "mobilenet_like.onnx" in hint.inner_text()
    shots(page, "profile-two-versions")
    assert server.alive()
