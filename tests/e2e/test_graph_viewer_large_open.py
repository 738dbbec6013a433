"""The renderer with every group of a model past the old 12,000-leaf scene budget open (issue 35 item 2):
the quick layered layout runs in its worker (past 20,000 items) and lays out every node.

Oracle: the ONNX proto (tests/graphview/test_large_group_opens.py's model and its producer -> consumer pairs,
worked out from ``node.input`` / ``node.output``): every op has a box, every pair an edge between two boxes,
each edge leaving its producer's box bottom and ending on its consumer's box top, below it."""

from __future__ import annotations

import onnx
import pytest

from studio.graphview.model import graph_from_proto
from studio.graphview.viewer import graph_page
from tests.graphview.test_large_group_opens import _big_scope_model, _oracle

pytestmark = pytest.mark.browser


def test_the_browser_lays_out_every_node_of_it_off_the_main_thread(tmp_path, page):
    """The renderer with every group open: the quick layered layout ran in its worker (past 20,000 items),
    every op of the proto has a box, every proto producer -> consumer pair an edge drawn between two boxes,
    and each edge leaves its producer's box downwards (dataflow) and ends on its consumer's box."""
    path = _big_scope_model(tmp_path / "big.onnx")
    names, pairs = _oracle(onnx.load(str(path)))
    g = graph_from_proto(onnx.load(str(path)), "big")
    html, stats = graph_page(g)
    assert stats.sealed == 0
    page_path = tmp_path / "big.html"
    page_path.write_text(html, encoding="utf-8")
    page.set_default_timeout(120_000)
    page.goto(page_path.as_uri())
    page.wait_for_function("() => window.__graphReady")
    seq = page.evaluate("""() => { const v = __graph.viewer;
        v.model.s.groups.forEach((g, i) => { if (i) v.model.open.add(i); }); v.relayout(null);
        return __graph.layoutSeq(); }""")
    page.wait_for_function("(s) => __graph.viewer.lay && __graph.viewer.lay.seq === s && __graph.ready()", arg=seq)
    got = page.evaluate("""() => { const v = __graph.viewer, L = v.model.s.leaves, boxes = v.lay.boxes;
        const name = (id) => { const it = v.vis.items[id]; return it && it.leaf !== undefined && L[it.leaf].kind === 'op'
            ? L[it.leaf].full : null; };
        const ops = [], edges = [], bad = [];
        v.vis.order.forEach((id) => { if (name(id) !== null && boxes[id]) ops.push(name(id)); });
        v.lay.edges.forEach((ed) => {
          const a = boxes[ed.e.src], b = boxes[ed.e.dst], p = ed.pts, s = p[0], t = p[p.length - 1];
          if (name(ed.e.src) !== null && name(ed.e.dst) !== null) edges.push([name(ed.e.src), name(ed.e.dst)]);
          if (Math.abs(s[1] - (a.y + a.h)) > 0.01 || Math.abs(t[1] - b.y) > 0.01 || !(b.y > a.y)) bad.push(ed.e.id);
        });
        return {where: __graph.layoutWhere(), kind: __graph.layoutKind(), ops: ops, edges: edges, bad: bad.length,
                frames: v.frames.length, groups: v.model.s.groups.length - 1}; }""")
    assert got["where"] == "worker" and got["kind"] == "quick"
    assert set(got["ops"]) == names and len(got["ops"]) == len(names)
    assert {tuple(e) for e in got["edges"]} == pairs
    assert got["bad"] == 0
    assert got["frames"] == got["groups"]                 # every group drawn open, as a frame
