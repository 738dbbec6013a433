"""The box viewer in a real Chromium: the YOLO detector opens at a readable level
(no two label boxes intersect at the default zoom, skip connections drawn), a
group expands in place, clicking an edge jumps to the producer (opening the
groups that hide it), the diff's two panels share one layout and one pan/zoom,
and the Graph page embeds the same viewer.

The renderer exposes what it computed on ``window.__graph`` (label rects in
screen pixels, item rects, the transform), so these checks read the drawing
itself, not a DOM that a canvas does not have."""

from __future__ import annotations

import onnx
import pytest

from studio import api
from tests.conftest import SAMPLES, save
from tests.e2e.conftest import ready_viewer, wait_for_app
from tests.graphview.optimized import fold_conv_bn

pytestmark = pytest.mark.browser

DETECTOR = SAMPLES / "yolo_detector.onnx"
READY = "() => window.__graphReady && window.__graph.ready()"


def _detector_html(tmp_path):
    h = api.load(DETECTOR)
    summary = api.inspect(h, {"height": 320, "width": 320})
    return api.write_graph_viewer(api.graph_index(h, summary), tmp_path / "detector.html", summary=summary).path


def _open(page, path):
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route("**/*", lambda r: r.abort() if not r.request.url.startswith(("file:", "blob:")) else r.continue_())
    page.goto(path.as_uri())
    page.wait_for_function(READY, timeout=120_000)
    return errors


def _settle(page, seq_before: int) -> None:
    page.wait_for_function(f"() => __graph.layoutSeq() > {seq_before} && __graph.ready() && "
                           "document.querySelector('.gv-status').textContent.indexOf('laying out') < 0",
                           timeout=60_000)
    page.wait_for_timeout(100)


def _intersections(rects: list[dict]) -> list[tuple[dict, dict]]:
    out = []
    for i, a in enumerate(rects):
        for b in rects[i + 1:]:
            if a["x"] < b["x"] + b["w"] - 0.5 and b["x"] < a["x"] + a["w"] - 0.5 and \
                    a["y"] < b["y"] + b["h"] - 0.5 and b["y"] < a["y"] + a["h"] - 0.5:
                out.append((a, b))
    return out


def test_detector_opens_readable_with_skip_connections(page, shots, tmp_path):
    errors = _open(page, _detector_html(tmp_path))
    assert page.evaluate("__graph.engine()") == "worker"             # ELK ran off the main thread
    assert page.evaluate("__graph.visibleCount()") <= 150
    k = page.evaluate("__graph.transform().k")
    assert k >= 0.85                                                 # text at a readable size
    shots(page, "detector-opening")
    # Walk the drawing from top to bottom at the default zoom: no two labels intersect anywhere.
    height = page.evaluate("__graph.viewer.bounds.h * __graph.transform().k")
    seen = 0
    for step in range(int(height // 700) + 1):
        page.evaluate(f"() => {{ const v = __graph.viewer; v.t.y = 10 - v.bounds.y * v.t.k - {step * 700}; v.draw(); }}")
        rects = page.evaluate("__graph.labels()")
        kinds = {r["kind"] for r in rects}
        seen += len(rects)
        assert not _intersections(rects), _intersections(rects)[:3]
        if step == int(height // 700) // 2:
            shots(page, "detector-middle")
        assert kinds & {"leaf", "group"}
    assert seen > 100
    # The FPN/PAN skip connections are drawn as edges of their own.
    edges = page.evaluate("__graph.edges()")
    for tensor in ("/model.6/cv2/act/Mul_output_0", "/model.4/cv2/act/Mul_output_0",
                   "/model.9/cv2/act/Mul_output_0", "/model.12/cv2/act/Mul_output_0"):
        assert any(tensor in e[2] for e in edges), tensor
    assert any(e[3] == "1×16×20×20" for e in edges)                  # numeric shapes on the edges
    # Find: Enter jumps to the match, opening the groups that hide it.
    page.fill(".gv-toolbar input", "softmax")
    page.press(".gv-toolbar input", "Enter")
    page.wait_for_function("() => __graph.selected() === '/model.22/dfl/Softmax'", timeout=60_000)
    assert "axis = 1" in page.inner_text(".gv-details")
    assert not errors


def test_expand_in_place_and_click_an_edge_to_its_producer(page, shots, tmp_path):
    _open(page, _detector_html(tmp_path))
    key = "root/s:model.2/s:m.0"
    assert not page.evaluate(f"__graph.isOpen({key!r})")
    page.evaluate(f"() => __graph.viewer.center(__graph.viewer.model.byKey['group:{key}'], 1)")
    page.wait_for_timeout(100)
    before = page.evaluate(f"__graph.rectOf('group:{key}')")
    seq = page.evaluate("__graph.layoutSeq()")
    page.mouse.click(before["x"] + before["w"] / 2, before["y"] + before["h"] / 2)
    _settle(page, seq)
    assert page.evaluate(f"__graph.isOpen({key!r})")
    after = page.evaluate(f"__graph.rectOf('group:{key}')")
    assert abs(after["x"] - before["x"]) < 2 and abs(after["y"] - before["y"]) < 2     # expanded in place
    assert after["h"] > before["h"]
    assert page.evaluate("__graph.rectOf('/model.2/m.0/Add')") is not None             # its members are drawn
    shots(page, "detector-expanded")
    # Its frame's header collapses it again, in place.
    gid = page.evaluate(f"__graph.viewer.model.byKey['group:{key}']")
    head = next(r for r in page.evaluate("__graph.labels()") if r["kind"] == "frame" and r["id"] == gid)
    c = page.locator(".gv-canvas").first.bounding_box()
    seq = page.evaluate("__graph.layoutSeq()")
    page.mouse.click(c["x"] + head["x"] + 4, c["y"] + head["y"] + head["h"] / 2)
    _settle(page, seq)
    assert not page.evaluate(f"__graph.isOpen({key!r})")
    again = page.evaluate(f"__graph.rectOf('group:{key}')")
    assert abs(again["x"] - before["x"]) < 2 and abs(again["y"] - before["y"]) < 2
    assert page.evaluate("__graph.rectOf('/model.2/m.0/Add')") is None
    # The skip tensor's producer sits inside the closed group model.6/cv2: a click on the
    # edge's label opens that group, selects the producer and centres it.
    tensor = "/model.6/cv2/act/Mul_output_0"
    page.evaluate(f"() => {{ const r = __graph.edgeLabelRect({tensor!r}); const v = __graph.viewer;"
                  " v.t.x += v.panels[0].w / 2 - (r.x + r.w / 2 - v.panels[0].canvas.getBoundingClientRect().left);"
                  " v.t.y += v.panels[0].h / 2 - (r.y + r.h / 2 - v.panels[0].canvas.getBoundingClientRect().top);"
                  " v.draw(); }")
    lab = page.evaluate(f"__graph.edgeLabelRect({tensor!r})")
    assert lab is not None
    seq = page.evaluate("__graph.layoutSeq()")
    page.mouse.click(lab["x"] + lab["w"] / 2, lab["y"] + lab["h"] / 2)
    _settle(page, seq)
    page.wait_for_function("() => __graph.selected() === '/model.6/cv2/act/Mul'")
    assert page.evaluate("__graph.isOpen('root/s:model.6/s:cv2')")
    r = page.evaluate("__graph.rectOf('/model.6/cv2/act/Mul')")
    canvas = page.locator(".gv-canvas").first.bounding_box()
    assert abs(r["x"] + r["w"] / 2 - (canvas["x"] + canvas["width"] / 2)) < 3
    assert abs(r["y"] + r["h"] / 2 - (canvas["y"] + canvas["height"] / 2)) < 3
    details = page.inner_text(".gv-details")
    assert "producer" in details and "consumers" in details and "/model.11/Concat" in details
    shots(page, "tensor-jump")
    # A consumer link jumps there too.
    page.locator(".gv-details a", has_text="/model.11/Concat").first.click()
    page.wait_for_function("() => __graph.selected() === '/model.11/Concat'")


def test_diff_panels_share_one_layout_and_pan_zoom(page, shots, tmp_path):
    before = api.load(SAMPLES / "cnn_unfused.onnx")
    opt, records = fold_conv_bn(before.proto)
    after = api.load(save(opt, tmp_path / "cnn_optimized.onnx"))
    d = api.diff(before, after, lineage=records)
    out = api.write_diff_viewer(d, tmp_path / "diff.html").path
    _open(page, out)
    key = next(n.id for n in api.graph_index(after).graph.nodes if n.op_type == "Gemm")

    def both():
        return page.evaluate(f"__graph.rectOf({key!r}, 0)"), page.evaluate(f"__graph.rectOf({key!r}, 1)")

    def offset():
        boxes = page.locator(".gv-canvas")
        return boxes.nth(1).bounding_box()["x"] - boxes.nth(0).bounding_box()["x"]

    a, b = both()
    assert a["w"] == b["w"] and a["y"] == b["y"] and abs(b["x"] - a["x"] - offset()) < 0.5
    c0 = page.locator(".gv-canvas").nth(0).bounding_box()
    page.mouse.move(c0["x"] + 200, c0["y"] + 200)
    page.mouse.down()
    page.mouse.move(c0["x"] + 320, c0["y"] + 120, steps=6)
    page.mouse.up()
    a2, b2 = both()
    assert abs(a2["x"] - a["x"] - 120) < 1 and abs(a2["y"] - a["y"] + 80) < 1
    assert abs(b2["x"] - b["x"] - 120) < 1 and abs(b2["y"] - b["y"] + 80) < 1      # the other panel followed
    c1 = page.locator(".gv-canvas").nth(1).bounding_box()
    page.mouse.move(c1["x"] + 300, c1["y"] + 300)
    page.mouse.wheel(0, -300)
    # mouse.wheel returns before the page has handled the event: wait for the zoom itself, not a pause
    page.wait_for_function(f"() => __graph.rectOf({key!r}, 0).w !== {a2['w']!r}", timeout=60_000)
    a3, b3 = both()
    assert a3["w"] > a2["w"] * 1.2 and abs(a3["w"] - b3["w"]) < 0.01 and a3["y"] == b3["y"]
    removed = page.evaluate("__graph.viewer.model.s.leaves.filter(l => l.status === 'removed').length")
    assert removed == 11
    shots(page, "diff-synced")


def test_graph_page_embeds_the_viewer(shared_studio, page, shots, tmp_path):
    server = shared_studio
    page.goto(server.url + server.preload(DETECTOR))
    wait_for_app(page)
    page.get_by_role("link", name="Graph", exact=True).click()
    page.get_by_role("heading", name="Graph").wait_for()
    page.locator("iframe").first.wait_for(timeout=120_000)
    frame = ready_viewer(page)
    assert 0 < frame.evaluate("__graph.visibleCount()") <= 150
    assert frame.evaluate("__graph.transform().k") >= 0.85
    rects = frame.evaluate("__graph.labels()")
    assert rects and not _intersections(rects)
    shots(page, "graph-page-viewer")
    # A node clicked in the viewer comes back to Python: its panel (attributes, per-engine status)
    # opens below, and the drawing is not reloaded under the user (same document, same zoom).
    leaf, key, op = frame.evaluate("""() => { const v = __graph.viewer;
        for (const r of __graph.labels()) {
          if (r.kind !== 'leaf') continue;
          const lf = v.model.s.leaves[v.vis.items[r.id].leaf];
          if (lf.kind === 'op' && r.w > 20 && r.h > 10) return [r, lf.key, lf.op];
        } return [null, null, null]; }""")
    assert leaf is not None
    k_before = frame.evaluate("__graph.transform().k")
    frame.evaluate("window.__sameDocument = true")
    box = frame.locator(".gv-canvas").first.bounding_box()
    page.mouse.click(box["x"] + leaf["x"] + leaf["w"] / 2, box["y"] + leaf["y"] + leaf["h"] / 2)
    heading = page.get_by_role("heading", name=f"{op} · {key}", exact=True)
    heading.first.wait_for(timeout=60_000)
    page.get_by_role("button", name="Neighbourhood in detail").wait_for(timeout=60_000)   # drawn after the heading
    assert frame.evaluate("window.__sameDocument === true")                    # not reloaded
    assert abs(frame.evaluate("__graph.transform().k") - k_before) < 1e-6
    shots(page, "graph-page-node-panel")
    assert server.alive()


def test_focus_opens_on_a_node_and_hostile_names_stay_text(page, tmp_path):
    """``focus`` (what the Nodes page's selection or a bookmarked node= passes) opens the
    node's groups and centres it; a name that is markup is drawn and listed as text."""
    m = onnx.load(str(DETECTOR))
    node = next(n for n in m.graph.node if n.name == "/model.22/dfl/Softmax")
    node.name = '/model.22/dfl/<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
    h = api.load(save(m, tmp_path / "evil.onnx"))
    index = api.graph_index(h)
    nid = next(n.id for n in index.graph.nodes if n.op_type == "Softmax")
    out = tmp_path / "focus.html"
    out.write_text(api.graph_viewer_html(index, focus=nid), encoding="utf-8")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    _open(page, out)
    page.wait_for_function(f"() => __graph.selected() === {nid!r}", timeout=60_000)
    assert page.evaluate("__graph.isOpen('root/s:model.22/s:dfl')")
    r = page.evaluate(f"__graph.rectOf({nid!r})")
    canvas = page.locator(".gv-canvas").first.bounding_box()
    assert abs(r["x"] + r["w"] / 2 - (canvas["x"] + canvas["width"] / 2)) < 3
    assert "<img src=x" in page.inner_text(".gv-details")                 # shown as text
    assert page.evaluate("window.__pwned === undefined") and not dialogs
    assert page.locator(".gv-details img, .gv-details script").count() == 0
