"""R29 in a real browser: session A opens a model whose OpenVINO read segfaults and
checks it; session B, at the same time, inspects its own model. A sees the crash as a
message, B's work completes, and the server lives on."""

from __future__ import annotations

from urllib.parse import parse_qs

import onnx
import pytest

from studio import api
from tests.conftest import SAMPLES
from tests.e2e.conftest import nodes_metric, open_and_upload
from tests.hostile_models import conv_without_weight

pytestmark = pytest.mark.browser


def _new_page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(90_000)
    return context, page


def _upload(page, url, path):
    open_and_upload(page, url, str(path))


def test_engine_crash_in_one_session_leaves_the_other_working(shared_studio, browser, shots, tmp_path):
    crash = tmp_path / "crash.onnx"
    onnx.save(conv_without_weight(), crash)
    server = shared_studio
    ctx_a, a = _new_page(browser)
    ctx_b, b = _new_page(browser)
    try:
        _upload(a, server.url, crash)
        a.get_by_text("onnx.checker").first.wait_for()          # loaded, flagged, not crashed
        # A's check on the two engines that run the model in a worker (a setting the model keeps, as a user's
        # choice is kept): MNN's and LiteRT's conversions of it took ~15 s more and are not what R29 is about.
        a.wait_for_function("() => location.search.includes('model=')")
        ids = parse_qs(a.url.split("?", 1)[1])
        api.set_setting(ids["project"][0], "ui:compat_engines", ["onnxruntime", "openvino"], model_id=ids["model"][0])
        a.get_by_role("link", name="Compatibility", exact=True).click()
        # B starts its own work while A's check (and OpenVINO's segfault) runs in A's worker.
        _upload(b, server.url, SAMPLES / "cnn_unfused.onnx")
        a.get_by_text("OpenVINO crashed").first.wait_for(timeout=180_000)
        shots(a, "session-a-engine-crashed")
        nodes = nodes_metric(b, timeout_ms=120_000)
        assert "37" in nodes.inner_text()
        shots(b, "session-b-inspected")
        assert server.alive()
        # A keeps working after the crash: back to its overview.
        a.get_by_role("link", name="Overview", exact=True).click()
        a.get_by_text("onnx.checker").first.wait_for()
    finally:
        ctx_a.close()
        ctx_b.close()
