"""ELK lays out without edge-label dummy nodes (issue 35 item 2).

Each edge label given to ELK became a label dummy node in a layer of its own, and elkjs's cost grows with
its nodes: on llama_optimum's opening view that was about a quarter of ELK's cold CPU time. The renderer
now sends no edge labels to ELK; a box with outgoing labels is sent taller (one row per distinct label
text, under the box) and wider if a label is, so ELK keeps every other box and edge out of that area,
and the label is drawn there, on its edge. Checked on what the page posts to ELK's worker and on the
laid-out drawing the renderer computed (world coordinates): every label under its producer's box, inside
the area ELK reserved, and no label over any box or other label."""

from __future__ import annotations

import pytest

from studio import api
from tests.conftest import SAMPLES

pytestmark = pytest.mark.browser

# Before the page's scripts: keep each graph posted to ELK's worker.
_POSTED = """(() => {
  window.__posted = [];
  const W = window.Worker;
  window.Worker = function (url, opts) {
    const w = new W(url, opts), post = w.postMessage.bind(w);
    w.postMessage = (m) => { window.__posted.push(JSON.parse(JSON.stringify(m.g))); return post(m); };
    return w;
  };
})()"""

_DRAWN = """() => {
  const v = __graph.viewer, out = {labels: [], boxes: []};
  v.lay.edges.forEach((ed) => { if (ed.label) out.labels.push({src: ed.e.src, text: ed.e.text, r: ed.label}); });
  v.boxes.forEach((o) => out.boxes.push({id: o.it.id, r: o.b}));
  return out;
}"""


def _nodes(g: dict) -> dict[str, dict]:
    out = {}
    for c in g.get("children", []):
        out[c["id"]] = c
        out.update(_nodes(c))
    return out


def _cross(a: dict, b: dict) -> bool:
    return a["x"] < b["x"] + b["w"] - 0.5 and b["x"] < a["x"] + a["w"] - 0.5 and \
        a["y"] < b["y"] + b["h"] - 0.5 and b["y"] < a["y"] + a["h"] - 0.5


def _open_detector(page, tmp_path) -> dict:
    """The sample detector's viewer, laid out by ELK; the graph the page posted to ELK's worker."""
    h = api.load(SAMPLES / "yolo_detector.onnx")
    html = api.write_graph_viewer(api.graph_index(h, None), tmp_path / "detector.html").path
    page.add_init_script(_POSTED)
    page.goto(html.as_uri())
    page.wait_for_function("() => window.__graphReady && window.__graph.ready()", timeout=120_000)
    assert page.evaluate("__graph.layoutKind()") == "elk"
    (posted,) = page.evaluate("window.__posted")
    return posted


def test_elk_gets_no_edge_labels_and_each_label_sits_under_its_producer(page, tmp_path):
    posted = _open_detector(page, tmp_path)
    assert posted["edges"] and not [e for e in posted["edges"] if e.get("labels")], "edge labels were sent to ELK"
    sent = _nodes(posted)
    drawn = page.evaluate(_DRAWN)
    boxes = {b["id"]: b["r"] for b in drawn["boxes"]}
    assert len(drawn["labels"]) > 20
    rows: dict[str, set[str]] = {}
    for lab in drawn["labels"]:
        rows.setdefault(lab["src"], set()).add(lab["text"])
    for lab in drawn["labels"]:
        box, node, r = boxes[lab["src"]], sent[lab["src"]], lab["r"]
        # ELK was given the box plus one 14 px row per distinct label text below it
        assert node["height"] >= box["h"] + 14 * len(rows[lab["src"]]) and node["width"] >= max(box["w"], r["w"])
        assert box["y"] + box["h"] <= r["y"] and r["y"] + r["h"] <= box["y"] + node["height"] + 0.5, (lab, box, node)
    # Nothing drawn over anything else: labels vs every box and vs each other.
    labels = [lab["r"] for lab in drawn["labels"]]
    for i, a in enumerate(labels):
        assert not [b for b in boxes.values() if _cross(a, b)], a
        assert not [b for b in labels[i + 1:] if _cross(a, b)], a


_STARTS = """() => {
  const by = {};
  __graph.viewer.lay.edges.forEach((ed) => { (by[ed.e.src] = by[ed.e.src] || []).push(ed.pts[0]); });
  return by;
}"""


def test_elk_merges_each_boxs_edges_into_one_exit_point(page, tmp_path):
    """ELK is asked to merge a box's edges (``elk.layered.mergeEdges``, in the root graph and in every open
    group's graph: ELK reads it per graph), so the edges leaving one box start at one point, as a tensor leaves
    a Netron box once, instead of one ELK port per edge (issue 35 item 2: fewer ports, less layout work, fewer
    crossings). Without it each edge leaves from its own point and this fails."""
    posted = _open_detector(page, tmp_path)
    groups = [n for n in _nodes(posted).values() if "children" in n]
    assert groups, "the detector opens with groups"
    for g in [posted, *groups]:
        assert g["layoutOptions"].get("elk.layered.mergeEdges") == "true", g["id"]
    starts = page.evaluate(_STARTS)
    fanned = {src: pts for src, pts in starts.items() if len(pts) > 1}
    assert len(fanned) >= 3, starts        # boxes with more than one drawn edge out (Split, skip sources)
    for src, pts in fanned.items():
        x0, y0 = pts[0]
        assert all(abs(x - x0) < 0.5 and abs(y - y0) < 0.5 for x, y in pts), (src, pts)
