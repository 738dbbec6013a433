"""Issue 33: a decoder's repeated-layer group (``layers.0–2 ×3``) is reachable from the viewer's
search: its name (or a word of it) finds the group itself, first, opens it and centres it; a node
name inside a closed member opens the groups down to it. Read from the viewer's own state
(``window.__graph.viewer``), in real Chromium."""

from __future__ import annotations

import pytest

from studio import api
from tests.conftest import SAMPLES
from tests.e2e.test_graph_viewer import _open

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _viewer(tmp_path):
    h = api.load(SAMPLES / "llama_optimum.onnx")
    summary = api.inspect(h, {})
    return api.write_graph_viewer(api.graph_index(h, summary), tmp_path / "decoder.html", summary=summary).path


def _search(page, text: str) -> str:
    box = page.locator(".gv-toolbar input")
    box.fill(text)
    status = page.locator(".gv-status")
    box.press("Enter")
    # the search's own line ("N matches ..."), before a relayout writes its own over it
    said = status.text_content()
    try:        # the jump waits for the new layout (ELK in a worker): until something is selected
        page.wait_for_function("() => __graph.viewer.selected !== null && __graph.ready()", timeout=60_000)
    except Exception:  # noqa: BLE001 -- the assertions below say what is missing
        pass
    page.wait_for_timeout(200)
    return said


def _repeat(page) -> int:
    (g,) = page.evaluate("__graph.viewer.model.s.groups.map((g, i) => g.kind === 'repeat' ? i : -1)"
                         ".filter(i => i >= 0)")
    return g


def _close_all(page) -> None:
    seq = page.evaluate("__graph.layoutSeq()")
    page.evaluate("() => { const v = __graph.viewer; v.model.open = new Set([0]); v.selected = null; v.relayout(null); }")
    page.wait_for_function(f"() => __graph.layoutSeq() > {seq} && __graph.ready() && "
                           "document.querySelector('.gv-status').textContent.indexOf('laying out') < 0",
                           timeout=60_000)
    page.wait_for_timeout(100)


@pytest.mark.parametrize("query", ["layers", "×3", "layers.0–2"])
def test_search_finds_and_opens_the_repeat_group(page, tmp_path, query):
    errors = _open(page, _viewer(tmp_path))
    g = _repeat(page)
    assert page.evaluate(f"__graph.viewer.model.s.groups[{g}].label") == "layers.0–2 ×3"
    _close_all(page)
    assert not page.evaluate(f"__graph.viewer.model.open.has({g})")
    said = _search(page, query)
    assert page.evaluate("__graph.viewer.selected") == f"g{g}", said
    assert page.evaluate(f"__graph.viewer.model.groupVisible({g}) && __graph.viewer.model.open.has({g})")
    assert page.evaluate(f"!!__graph.viewer.lay.boxes['g{g}']")        # drawn, as an open frame
    assert errors == []


def test_a_node_name_inside_a_member_opens_the_group_down_to_it(page, tmp_path):
    errors = _open(page, _viewer(tmp_path))
    g = _repeat(page)
    _close_all(page)
    leaf, name = page.evaluate("""() => { const s = __graph.viewer.model.s;
        const i = s.leaves.findIndex(l => (l.full || '').indexOf('layers.2/') >= 0 && l.kind === 'op');
        return [i, s.leaves[i].full]; }""")
    _search(page, name)
    assert page.evaluate(f"__graph.viewer.model.open.has({g})")
    assert page.evaluate(f"__graph.viewer.model.rep({leaf})") == f"n{leaf}"     # drawn as itself
    assert page.evaluate("__graph.viewer.selected") == f"n{leaf}"
    assert errors == []
