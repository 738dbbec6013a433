"""ELK on the fully opened llama decoder sample (issue 35 item 2: the fully opened drawing settles ahead of
Netron's first paint, and stays a dataflow).

Oracle: the drawing the renderer computed from ELK's answer (world coordinates) and the ONNX proto's own
producer -> consumer pairs: every edge routed, every box clear of every other box, and what the page posted
to ELK's worker."""

from __future__ import annotations

import pytest

from studio import api
from tests.conftest import SAMPLES
from tests.e2e.test_graph_viewer_elk_labels import _POSTED     # keeps each graph posted to ELK's worker

pytestmark = pytest.mark.browser

_OPEN_ALL = """() => { const v = __graph.viewer;
  v.model.s.groups.forEach((g, i) => { if (i) v.model.open.add(i); }); v.relayout(null); return v.layoutSeq; }"""

# The settled drawing: leaf boxes and each edge's route, by item id
_DRAWN = """() => { const v = __graph.viewer, boxes = {}, edges = [];
  v.boxes.forEach((o) => { boxes[o.it.id] = o.b; });
  v.lay.edges.forEach((ed) => edges.push({id: ed.e.id, src: ed.e.src, dst: ed.e.dst, pts: ed.pts}));
  return {kind: __graph.layoutKind(), boxes: boxes, edges: edges, frames: v.frames.length,
          groups: v.model.s.groups.length - 1}; }"""


def _opened(page, tmp_path) -> tuple[dict, dict]:
    """llama_optimum's viewer with every group open, laid out by ELK: the graph posted for it, the drawing."""
    h = api.load(SAMPLES / "llama_optimum.onnx")
    html = api.write_graph_viewer(api.graph_index(h, None), tmp_path / "llama.html").path
    page.add_init_script(_POSTED)
    page.goto(html.as_uri())
    page.wait_for_function("() => window.__graphReady && window.__graph.ready()", timeout=120_000)
    seq = page.evaluate(_OPEN_ALL)
    page.wait_for_function("(s) => __graph.viewer.lay && __graph.viewer.lay.seq === s && __graph.ready()", arg=seq,
                           timeout=120_000)
    drawn = page.evaluate(_DRAWN)
    assert drawn["kind"] == "elk" and drawn["frames"] == drawn["groups"]
    return page.evaluate("window.__posted")[-1], drawn


def _cross(a: dict, b: dict) -> bool:
    return a["x"] < b["x"] + b["w"] - 0.5 and b["x"] < a["x"] + a["w"] - 0.5 and \
        a["y"] < b["y"] + b["h"] - 0.5 and b["y"] < a["y"] + a["h"] - 0.5


def test_fully_opened_llama_is_laid_out_with_one_crossing_pass_and_stays_clean(page, tmp_path):
    """ELK is asked for one crossing-minimisation pass (thoroughness 1, was 2: the same drawing of this
    model, ~25 % less of ELK's CPU time), and the drawing it gives is still whole: every edge routed from
    its producer's box to its consumer's, no two boxes overlapping."""
    posted, drawn = _opened(page, tmp_path)
    assert posted["layoutOptions"]["elk.layered.thoroughness"] == "1"
    assert posted["layoutOptions"]["elk.hierarchyHandling"] == "INCLUDE_CHILDREN"
    boxes, edges = drawn["boxes"], drawn["edges"]
    assert len(boxes) > 300 and len(edges) == len(posted["edges"])
    for e in edges:
        a, b, p = boxes.get(e["src"]), boxes.get(e["dst"]), e["pts"]
        assert a and b and len(p) >= 2, e
        assert abs(p[0][1] - (a["y"] + a["h"])) < 0.6 and a["x"] - 0.5 <= p[0][0] <= a["x"] + a["w"] + 0.5, e
        assert abs(p[-1][1] - b["y"]) < 0.6 and b["x"] - 0.5 <= p[-1][0] <= b["x"] + b["w"] + 0.5, e
    rects = list(boxes.values())
    for i, r in enumerate(rects):
        assert not [o for o in rects[i + 1:] if _cross(r, o)], r


def test_no_edge_of_the_llama_drawing_points_upwards(page, tmp_path):
    """Every edge of ELK's drawing runs downwards, opening view and fully opened: its consumer's box starts
    below its producer's box, and the route ends below where it starts. A depth band that both fed a kept
    sub-scope and was fed by it (``self_attn``'s band and ``repeat_kv``) made a loop among siblings, and one
    edge per layer pointed upwards (6 when fully opened, 1 in the opening view); bands are now cut there."""
    def upward(drawn: dict) -> list[str]:
        boxes = drawn["boxes"]
        return [e["id"] for e in drawn["edges"] if boxes[e["dst"]]["y"] < boxes[e["src"]]["y"] + boxes[e["src"]]["h"] - 0.5
                or e["pts"][-1][1] < e["pts"][0][1]]

    h = api.load(SAMPLES / "llama_optimum.onnx")
    html = api.write_graph_viewer(api.graph_index(h, None), tmp_path / "llama.html").path
    page.goto(html.as_uri())
    page.wait_for_function("() => window.__graphReady && window.__graph.ready()", timeout=120_000)
    first = page.evaluate(_DRAWN)
    assert first["kind"] == "elk" and first["frames"] > 0 and len(first["edges"]) > 50
    assert upward(first) == []
    _, opened = _opened(page, tmp_path)
    assert len(opened["edges"]) > 300 and upward(opened) == []
