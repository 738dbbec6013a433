"""The graph view in a real browser: the 10,000-node overview draws (pixels on
the ECharts canvas) and a click opens the node's details; the diff of the CNN
and its optimized version (Streamlit page, and the offline HTML with pass
lineage); hostile names stay text in the offline HTML."""

from __future__ import annotations

import re
import time

import onnx
import pytest

from benchmarks.graph_models import resnet_like
from studio import api
from tests.conftest import SAMPLES, parse_model, save
from tests.e2e.conftest import UPLOADER, nodes_metric, ready_viewer, wait_for_app
from tests.graphview.optimized import fold_conv_bn

pytestmark = pytest.mark.browser

CHART = '[data-testid="stEChartsChart"]'
# Counts drawn pixels on the chart canvas and finds one pixel of a given colour (a node:
# edges are grey), in canvas pixels, with the canvas position to turn it into a click.
CANVAS_JS = """([sel, rgb]) => {
  const c = document.querySelector(sel + ' canvas');
  if (!c || !c.width) return null;
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let ink = 0, hit = null;
  for (let i = 0; i < d.length; i += 4) {
    if (d[i + 3] > 0 && (d[i] < 240 || d[i + 1] < 240 || d[i + 2] < 240)) ink++;
    if (!hit && rgb && d[i] === rgb[0] && d[i + 1] === rgb[1] && d[i + 2] === rgb[2] && d[i + 3] === 255) {
      const p = i / 4;
      hit = [p % c.width, Math.floor(p / c.width)];
    }
  }
  const r = c.getBoundingClientRect();
  return {ink: ink, hit: hit, left: r.left, top: r.top, scale: r.width / c.width};
}"""


def _rgb(hex_color: str) -> list[int]:
    return [int(hex_color[k:k + 2], 16) for k in (1, 3, 5)]


def _color_of(model, op: str) -> list[int]:
    view = api.graph_view(api.load(model))
    return _rgb(next(e.color for e in view.painted.legend if e.label == op))


def _wait_for_drawing(page, sel: str, rgb, min_ink: int, timeout_s: float = 180) -> dict:
    deadline = time.monotonic() + timeout_s
    r = None
    while time.monotonic() < deadline:
        r = page.evaluate(CANVAS_JS, [sel, rgb])
        if r and r["ink"] >= min_ink and (rgb is None or r["hit"]):
            return r
        page.wait_for_timeout(200)
    raise AssertionError(f"the chart did not draw within {timeout_s:.0f} s: {r}")


def _click(page, r: dict) -> None:
    page.mouse.click(r["left"] + (r["hit"][0] + 0.5) * r["scale"], r["top"] + (r["hit"][1] + 0.5) * r["scale"])


def _open_graph_page(page, url: str) -> None:
    page.goto(url)
    wait_for_app(page)
    page.get_by_role("link", name="Graph", exact=True).click()     # the st.navigation entry
    page.get_by_role("heading", name="Graph").wait_for()
    page.locator('[data-testid="stRadio"]').get_by_text("Overview", exact=True).click()   # the dot overview


def test_overview_of_10k_nodes_draws_and_a_click_opens_details(shared_studio, page, shots, tmp_path):
    model = resnet_like(1000, tmp_path / "r10k.onnx")
    conv = _color_of(model, "Conv")
    server = shared_studio
    _open_graph_page(page, server.url + server.preload(model))
    t0 = time.monotonic()
    r = _wait_for_drawing(page, CHART, conv, min_ink=20_000)
    print(f"10k-node overview drawn {time.monotonic() - t0:.1f} s after opening the Graph page")
    page.get_by_text("10,004 items drawn").wait_for()
    shots(page, "overview-10k")
    _click(page, r)
    details = page.locator("h3").filter(has_text=re.compile(r"^Conv · /stage\d+/block\d+/conv\d/Conv"))
    details.wait_for(timeout=90_000)
    page.get_by_text("Attributes").first.wait_for()
    shots(page, "node-details-10k")
    assert server.alive()


def test_diff_page_shows_the_removed_batchnorms(shared_studio, page, shots, tmp_path):
    opt, _ = fold_conv_bn(onnx.load(str(SAMPLES / "cnn_unfused.onnx")))
    optimized = save(opt, tmp_path / "cnn_optimized.onnx")
    server = shared_studio
    page.goto(server.url + server.preload(SAMPLES / "cnn_unfused.onnx"))
    wait_for_app(page)
    page.get_by_text("Open a model").first.click()
    page.locator(UPLOADER).set_input_files(str(optimized))
    nodes_metric(page, "26")
    page.get_by_role("link", name="Graph", exact=True).click()
    page.get_by_role("heading", name="Graph").wait_for()
    page.get_by_text("Diff", exact=True).click()
    removed = page.locator('[data-testid="stMetric"]').filter(has_text="Removed")
    removed.wait_for(timeout=90_000)
    assert "11" in removed.inner_text()
    page.locator("iframe").first.wait_for(timeout=90_000)          # the viewer: one layout, both sides
    frame = ready_viewer(page, "(window.__graph.viewer?.model?.s?.leaves || []).some(l => l.status)")
    assert frame.evaluate("__graph.viewer.model.s.leaves.filter(l => l.status === 'removed').length") == 11
    page.get_by_text("Changed nodes").first.wait_for()
    shots(page, "diff-page")
    assert server.alive()


def test_offline_diff_html_with_lineage(page, shots, tmp_path):
    before = api.load(SAMPLES / "cnn_unfused.onnx")
    opt, records = fold_conv_bn(before.proto, rename=True)
    after = api.load(save(opt, tmp_path / "cnn_optimized.onnx"))
    out = api.write_diff(api.diff(before, after, lineage=records), tmp_path / "diff.html").path
    page.route("**/*", lambda route: route.abort() if not route.request.url.startswith("file:") else route.continue_())
    page.goto(out.as_uri())
    page.wait_for_function("document.body.dataset.rendered === '1'", timeout=120_000)
    r = _wait_for_drawing(page, "#chart-0", _rgb("#e15759"), min_ink=2_000)
    text = page.inner_text("body")
    assert "11 removed, 0 added, 7 changed" in text
    assert text.count("fused by fuse-conv-bn") >= 7        # the changes table names the pass
    _click(page, r)                                         # a removed node: its lineage in the details
    page.locator("#details").filter(has_text="by ").wait_for()
    assert re.search(r"(fused by fuse-conv-bn|removed by eliminate-identity)", page.inner_text("#details"))
    page.fill("#search", "BatchNormalization")
    page.locator("#search-count").filter(has_text="match").wait_for()
    shots(page, "diff-html-lineage")


def test_offline_html_keeps_hostile_names_as_text(page, tmp_path):
    m = parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[1] x) => (float[1] y) { y = Relu(x) }')
    m.graph.node[0].name = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
    view = api.graph_view(api.load(save(m, tmp_path / "evil.onnx")))
    out = api.write_graph_view(view, tmp_path / "evil.html").path
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(out.as_uri())
    page.wait_for_function("document.body.dataset.rendered === '1'", timeout=60_000)
    page.fill("#search", "relu")
    page.locator("#details").filter(has_text="<script>").wait_for()
    assert "<img src=x" in page.inner_text("#details")        # shown as text
    assert page.evaluate("window.__pwned === undefined") and not dialogs
    assert page.locator("#details img, #details script").count() == 0
