"""The quick layered layout (issue 35): the viewer's first paint no longer waits for ELK's cold worker
(1.2 s to compile ELK, then 3-5 s for a ~170-item compound layout on this machine), and a fully opened
graph above ELK's 1,500 items is a dataflow, not a wrapped column.

Read from the drawing the renderer computed (``__graph.viewer``: the laid-out boxes, the visible graph's
edges), checked against the graph's own edges: every edge goes downwards (inputs on top), no two boxes
of one group overlap, every item lies inside its open group's frame, and only what is on screen gets a
label rect (culling)."""

from __future__ import annotations

import pytest

from benchmarks.graph_models import resnet_like
from studio import api
from tests.conftest import SAMPLES

pytestmark = pytest.mark.browser

# Before renderer.js: at the moment the first-paint marker is set, the layout that frame showed.
_CAPTURE = """(() => {
  let value;
  Object.defineProperty(window, '__graphReady', {configurable: true, get: () => value, set: (v) => {
    window.__firstKind = window.__graph ? window.__graph.layoutKind() : null;
    window.__firstGeometry = window.__geometry();
    value = v;
  }});
  window.__geometry = () => {
    const v = window.__graph.viewer, lay = v.lay, vis = v.vis, bad = {up: [], overlap: [], outside: []};
    vis.edges.forEach((e) => {
      const a = lay.boxes[e.src], b = lay.boxes[e.dst];
      if (a.y + a.h > b.y + 0.5) bad.up.push([e.src, e.dst]);
    });
    const byParent = {};
    vis.order.forEach((id) => { const it = vis.items[id]; (byParent[it.parent] = byParent[it.parent] || []).push(id); });
    Object.keys(byParent).forEach((p) => {
      const ids = byParent[p].slice().sort((x, y) => lay.boxes[x].y - lay.boxes[y].y);
      for (let i = 0; i < ids.length; i++) {
        const a = lay.boxes[ids[i]];
        for (let j = i + 1; j < ids.length; j++) {
          const b = lay.boxes[ids[j]];
          if (b.y >= a.y + a.h - 0.5) break;
          if (a.x < b.x + b.w - 0.5 && b.x < a.x + a.w - 0.5) bad.overlap.push([ids[i], ids[j]]);
        }
      }
      const frame = lay.boxes['g' + p];
      if (+p > 0 && frame && vis.items['g' + p].type === 'open') byParent[p].forEach((id) => {
        const b = lay.boxes[id];
        if (b.x < frame.x || b.y < frame.y || b.x + b.w > frame.x + frame.w + 0.5 || b.y + b.h > frame.y + frame.h + 0.5)
          bad.outside.push(id);
      });
    });
    return {items: vis.order.length, edges: vis.edges.length, bad: bad};
  };
})()"""


def _open(page, html) -> list[str]:
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.add_init_script(_CAPTURE)
    page.route("**/*", lambda r: r.abort() if not r.request.url.startswith(("file:", "blob:")) else r.continue_())
    page.goto(html.as_uri())
    page.wait_for_function("() => window.__graphReady && window.__graph.ready()", timeout=120_000)
    return errors


def test_first_paint_is_the_quick_dataflow_layout_then_elk(page, tmp_path):
    h = api.load(SAMPLES / "yolo_detector.onnx")
    html = api.write_graph_viewer(api.graph_index(h, None), tmp_path / "detector.html").path
    errors = _open(page, html)
    first = page.evaluate("window.__firstGeometry")
    assert page.evaluate("window.__firstKind") == "quick"
    assert first["items"] > 50 and first["edges"] > 50, first
    assert first["bad"] == {"up": [], "overlap": [], "outside": []}, first["bad"]
    # ELK's compound layout replaced it once its worker answered, and only then is the viewer ready.
    assert page.evaluate("__graph.layoutKind()") == "elk"
    assert "(ELK, worker)" in page.inner_text(".gv-status")
    assert not errors


def test_fully_opened_graph_above_elk_is_a_dataflow_and_culled(page, tmp_path):
    model = resnet_like(200, tmp_path / "r2k.onnx")      # 2,002 nodes: every group open is past ELK's 1,500
    h = api.load(model)
    html = api.write_graph_viewer(api.graph_index(h, api.inspect(h)), tmp_path / "r2k.html").path
    errors = _open(page, html)
    seq = page.evaluate("__graph.layoutSeq()")
    page.evaluate("() => { const v = __graph.viewer; v.model.s.groups.forEach((g, i) => { if (i) v.model.open.add(i); });"
                  " v.relayout(null); }")
    page.wait_for_function(f"() => __graph.layoutSeq() > {seq} && __graph.ready()", timeout=120_000)
    assert page.evaluate("__graph.layoutKind()") == "quick"
    assert "quick layered layout" in page.inner_text(".gv-status")
    assert page.evaluate("__graph.visibleCount()") == 2004      # the 2,002 nodes, the input and the output
    geo = page.evaluate("window.__geometry()")
    assert geo["bad"] == {"up": [], "overlap": [], "outside": []}, {k: v[:5] for k, v in geo["bad"].items()}
    # A residual block's skip edge goes around its body: the Add sits below the block's input, and the
    # graph reads top to bottom (the last node far below the first), not wrapped into columns.
    top = page.evaluate("__graph.viewer.lay.boxes[__graph.viewer.model.byKey['/stem/Identity']].y")
    bottom = page.evaluate("__graph.viewer.lay.boxes[__graph.viewer.model.byKey['/head/Identity']].y")
    assert bottom - top > 200 * 4 * 18
    # Culling: at reading zoom only the boxes on screen are drawn (each gets its label rect), all of them
    # inside the canvas, far fewer than the 2,002 laid out.
    page.evaluate("() => { const v = __graph.viewer; v.t.k = 1; v.t.x = 20; v.t.y = 20; v.draw(); }")
    labels = page.evaluate("__graph.labels().filter((l) => l.kind === 'leaf')")
    canvas = page.evaluate("__graph.canvasRect()")
    assert 0 < len(labels) < 200
    assert all(r["x"] + r["w"] >= 0 and r["y"] + r["h"] >= 0 and r["x"] <= canvas["w"] and r["y"] <= canvas["h"]
               for r in labels)
    assert not errors
