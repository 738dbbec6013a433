"""The export bundle's report embeds the same box viewer as `onnx-studio graph`: opened from
disk in a real Chromium (no network), the graph inside report.html lays out and draws."""

from __future__ import annotations

import pytest

from studio import api
from tests.conftest import SAMPLES

pytestmark = pytest.mark.browser


def test_report_graph_draws_offline_inside_the_report(page, tmp_path):
    result = api.export(api.load(SAMPLES / "cnn_unfused.onnx"), "onnxruntime", tmp_path / "bundle", zip=False)
    assert result.ok, result.failures
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route("**/*", lambda r: r.abort() if not r.request.url.startswith(("file:", "blob:", "data:"))
               else r.continue_())
    page.goto((result.bundle / "report.html").as_uri())
    page.locator("iframe[src='graph.html']").scroll_into_view_if_needed()   # Chromium paints visible frames only
    page.frame_locator("iframe[src='graph.html']").locator("canvas").first.wait_for(timeout=60_000)
    graph = next(f for f in page.frames if f.url.endswith("graph.html"))
    graph.wait_for_function("() => window.__graphReady && window.__graph.ready()", timeout=120_000)
    assert graph.evaluate("__graph.visibleCount()") > 0 and graph.evaluate("__graph.engine()") == "worker"
    assert "(ELK, worker)" in graph.locator(".gv-status").inner_text()
    assert not errors, errors
