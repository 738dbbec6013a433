"""Fit in the box viewer, read from the drawing itself (``window.__graph``): the minimap never
covers the fitted drawing, and Fit shows every box of it -- a deep model included (issue 33: the
former first Fit filled the width of a detector or a decoder and showed only its top part; that
"width first" expectation was changed here on purpose: Fit now means all of it, at once)."""

from __future__ import annotations

import pytest

from studio import api
from tests.conftest import SAMPLES
from tests.e2e.test_graph_viewer import _detector_html, _open

pytestmark = pytest.mark.browser


def _overlap(a: dict, b: dict) -> float:
    w = min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"])
    h = min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"])
    return max(0.0, w) * max(0.0, h)


def _inside(a: dict, b: dict, slack: float = 1.0) -> bool:
    return (a["x"] >= b["x"] - slack and a["y"] >= b["y"] - slack and a["x"] + a["w"] <= b["x"] + b["w"] + slack
            and a["y"] + a["h"] <= b["y"] + b["h"] + slack)


def _viewer(path, model_path):
    h = api.load(model_path)
    summary = api.inspect(h, {})
    return api.write_graph_viewer(api.graph_index(h, summary), path, summary=summary).path


def _fit(page) -> None:
    page.locator('[data-act="fit"]').click()
    page.wait_for_timeout(150)


def _boxes_on_screen(page) -> list[dict]:
    """Every drawn box (node or collapsed group) in screen px, from the renderer's own layout."""
    return page.evaluate("""() => { const v = __graph.viewer, t = v.t, r = v.panels[0].canvas.getBoundingClientRect();
        return v.boxes.map(o => ({x: o.b.x * t.k + t.x + r.left, y: o.b.y * t.k + t.y + r.top,
                                  w: o.b.w * t.k, h: o.b.h * t.k})); }""")


def test_fit_keeps_the_drawing_clear_of_the_minimap(page, tmp_path):
    errors = _open(page, _viewer(tmp_path / "cnn.html", SAMPLES / "cnn_unfused.onnx"))
    _fit(page)
    drawing, canvas, mini = (page.evaluate(f"__graph.{f}()") for f in ("drawingRect", "canvasRect", "minimapRect"))
    assert _overlap(canvas, mini) > 0                    # the minimap does sit over the canvas...
    assert _overlap(drawing, mini) == 0, (drawing, mini)  # ...never over the fitted drawing
    assert _inside(drawing, canvas), (drawing, canvas)
    assert page.evaluate("__graph.fitMode()") == "all"
    assert errors == []


@pytest.mark.slow
@pytest.mark.parametrize("which", ["detector", "decoder"])
def test_fit_shows_every_box_of_a_tall_graph(page, tmp_path, which):
    """One Fit on yolo_detector (~7x taller than wide) and on a decoder: every box is inside the
    canvas and clear of the minimap."""
    page.set_viewport_size({"width": 1800, "height": 900})
    path = (_detector_html(tmp_path) if which == "detector"
            else _viewer(tmp_path / "decoder.html", SAMPLES / "llama_optimum.onnx"))
    errors = _open(page, path)
    _fit(page)
    canvas, mini = page.evaluate("__graph.canvasRect()"), page.evaluate("__graph.minimapRect()")
    boxes = _boxes_on_screen(page)
    assert len(boxes) > 20
    outside = [b for b in boxes if not _inside(b, canvas)]
    assert not outside, (len(outside), len(boxes), outside[:3], canvas)
    assert not [b for b in boxes if _overlap(b, mini) > 0]
    assert page.evaluate("__graph.fitMode()") == "all"
    assert errors == []
