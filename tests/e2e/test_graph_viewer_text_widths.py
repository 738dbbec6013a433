"""The viewer measures each label once per font (issue 35 item 2: a 10k-node model repeats a few hundred
labels, and ``measureText`` was ~9 % of laying out its fully opened graph). Counted in the page: every
``measureText`` call, recorded before the renderer's scripts run, while the whole 2k-node graph is opened
twice; the oracle is the number of distinct (font, text) pairs."""

from __future__ import annotations

import pytest

from benchmarks.graph_models import resnet_like
from studio import api

pytestmark = pytest.mark.browser

_COUNT = """(() => {
  const real = CanvasRenderingContext2D.prototype.measureText;
  window.__measured = [];
  CanvasRenderingContext2D.prototype.measureText = function (t) { window.__measured.push(this.font + '|' + t);
    return real.call(this, t); };
})()"""


def test_each_label_is_measured_once_per_font(page, tmp_path):
    h = api.load(resnet_like(200, tmp_path / "r2k.onnx"))
    html = api.write_graph_viewer(api.graph_index(h, None), tmp_path / "r2k.html").path
    page.add_init_script(_COUNT)
    page.route("**/*", lambda r: r.abort() if not r.request.url.startswith(("file:", "blob:")) else r.continue_())
    page.goto(html.as_uri())
    page.wait_for_function("() => window.__graphReady && window.__graph.ready()", timeout=120_000)
    for _ in range(2):   # open everything, close it, open it again: the second opening measures nothing new
        seq = page.evaluate("__graph.layoutSeq()")
        page.evaluate("() => { const v = __graph.viewer; v.model.s.groups.forEach((g, i) => { if (i) v.model.open.add(i); });"
                      " v.relayout(null); }")
        page.wait_for_function(f"() => __graph.layoutSeq() > {seq} && __graph.ready()", timeout=120_000)
        assert page.evaluate("__graph.visibleCount()") == 2004    # the 2,002 nodes, the input and the output
        page.evaluate("() => { const v = __graph.viewer; v.model.open.clear(); v.relayout(null); }")
    assert page.evaluate("__graph.visibleCount()") < 100
    measured = page.evaluate("window.__measured")
    assert len(measured) > 20                                   # labels were measured...
    assert len(measured) == len(set(measured)), len(measured) - len(set(measured))   # ...each once
