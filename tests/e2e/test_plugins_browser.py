"""A real browser opens the mmdeploy sample on the Plugins page, edits the Python op body in the code editor
component (Ace, in an iframe), runs it, sees the comparison with the reference (a mismatch for the edited
body, a match for the generated one after Reset), and the server is still alive. The network beyond the
studio is cut: the editor's frontend comes from its wheel, not from a CDN."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from tests.conftest import SAMPLES
from tests.e2e.conftest import wait_for_app

pytestmark = pytest.mark.browser

EDITOR = ".st-key-plugin_code_grid_sampler_ort-python__editor iframe"


def _offline(page) -> list:
    """Abort every request that would leave the machine (as on an offline box); return them as they come."""
    left: list = []

    def route(r):
        if urlsplit(r.request.url).hostname in ("127.0.0.1", "localhost"):
            r.continue_()
        else:
            left.append(r.request)
            r.abort("internetdisconnected")
    page.route("**/*", route)
    return left


def _editor_text(frame) -> str:
    return "\n".join(frame.locator(".ace_line").all_inner_texts())


def test_edit_and_run_a_python_op(shared_studio, page, shots):
    from playwright.sync_api import expect

    left = _offline(page)
    server = shared_studio
    page.goto(f"{server.url}/plugins{server.preload(SAMPLES / 'mmdeploy_grid_sampler.onnx')}")
    wait_for_app(page)
    page.get_by_text("Signature of").first.wait_for(timeout=120_000)
    editor = page.frame_locator(EDITOR)
    line = editor.locator(".ace_line", has_text="return grid_sample(")
    line.wait_for(timeout=60_000)
    assert "def compute(" in _editor_text(editor)
    assert editor.locator(".ace_gutter-cell", has_text="25").count() == 1     # line numbers
    assert editor.locator(".ace_keyword", has_text="return").count() > 0        # Python highlighting
    # Edit as a user does: put the cursor after `return ` and type; no Apply click, no shortcut.
    line.click(force=True)   # Ace lines let clicks through to its content layer, as for a user
    page.keyboard.press("Home")
    for _ in range(len("return ")):
        page.keyboard.press("ArrowRight")
    page.keyboard.type("2 * ")
    expect(editor.locator(".ace_line", has_text="return 2 * grid_sample(")).to_have_count(1)
    page.get_by_role("button", name="Run and compare with the reference").click()
    page.get_by_text("differs from the reference").first.wait_for(timeout=120_000)
    shots(page, "plugins-edited-mismatch")
    page.get_by_role("button", name="Reset to the generated code").click()
    # Reset remounts the editor with the generated body; while the rerun runs, the old one may still be there.
    page.wait_for_function("""sel => {
        const frames = document.querySelectorAll(sel);
        if (frames.length !== 1 || !frames[0].contentDocument) return false;
        const text = frames[0].contentDocument.querySelector('.ace_content')?.textContent || '';
        return text.includes('return grid_sample(') && !text.includes('return 2 * grid');
    }""", arg=EDITOR, timeout=60_000)
    wait_for_app(page)
    page.get_by_role("button", name="Run and compare with the reference").click()
    page.get_by_text("sample(s) match the reference").first.wait_for(timeout=120_000)
    shots(page, "plugins-generated-match")
    assert server.alive()
    # Only the editor theme's optional web font may have tried to leave; nothing executable did.
    assert not [r.url for r in left if r.resource_type not in ("stylesheet", "font")], [r.url for r in left]
