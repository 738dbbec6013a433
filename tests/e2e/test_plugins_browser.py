"""A real browser opens the mmdeploy sample on the Plugins page, edits the Python op body, runs it, sees the
comparison with the reference (a mismatch for the edited body, a match for the generated one), and the
server is still alive."""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLES
from tests.e2e.conftest import wait_for_app

pytestmark = pytest.mark.browser

EDITOR = ".st-key-plugin_code_grid_sampler_ort-python textarea"


def test_edit_and_run_a_python_op(studio_server, page, shots):
    server = studio_server(SAMPLES / "mmdeploy_grid_sampler.onnx")
    page.goto(f"{server.url}/plugins")
    wait_for_app(page)
    page.get_by_text("Signature of").first.wait_for(timeout=120_000)
    editor = page.locator(EDITOR)
    code = editor.input_value()
    assert "def compute(" in code
    editor.fill(code.replace("return grid_sample_4d(", "return 2 * grid_sample_4d(", 1))
    editor.press("Control+Enter")
    wait_for_app(page)
    page.get_by_role("button", name="Run and compare with the reference").click()
    page.get_by_text("differs from the reference").first.wait_for(timeout=120_000)
    shots(page, "plugins-edited-mismatch")
    page.get_by_role("button", name="Reset to the generated code").click()
    page.wait_for_function(f"() => !document.querySelector('{EDITOR}').value.includes('return 2 * grid')",
                           timeout=60_000)
    wait_for_app(page)
    page.get_by_role("button", name="Run and compare with the reference").click()
    page.get_by_text("sample(s) match the reference").first.wait_for(timeout=120_000)
    shots(page, "plugins-generated-match")
    assert server.alive()
