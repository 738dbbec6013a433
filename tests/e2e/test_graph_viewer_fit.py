"""Fit in the box viewer, read from the drawing itself (``window.__graph``): the minimap never
covers the fitted drawing, and a deep model on a wide screen is not a thin column -- the first
Fit fills the width from the inputs down, a second Fit shows all of it."""

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


def test_fit_keeps_the_drawing_clear_of_the_minimap(page, tmp_path):
    errors = _open(page, _viewer(tmp_path / "cnn.html", SAMPLES / "cnn_unfused.onnx"))
    _fit(page)
    if page.evaluate("__graph.fitMode()") == "width":    # a tall drawing: the width first, beside the minimap
        drawing, mini = page.evaluate("__graph.drawingRect()"), page.evaluate("__graph.minimapRect()")
        assert drawing["x"] + drawing["w"] <= mini["x"], (drawing, mini)
        _fit(page)
    drawing, canvas, mini = (page.evaluate(f"__graph.{f}()") for f in ("drawingRect", "canvasRect", "minimapRect"))
    assert _overlap(canvas, mini) > 0                    # the minimap does sit over the canvas...
    assert _overlap(drawing, mini) == 0, (drawing, mini)  # ...never over the fitted drawing
    assert _inside(drawing, canvas), (drawing, canvas)
    assert page.evaluate("__graph.fitMode()") == "all"
    assert errors == []


def test_fit_on_a_deep_model_fills_a_wide_screen(page, tmp_path):
    page.set_viewport_size({"width": 1800, "height": 900})
    errors = _open(page, _detector_html(tmp_path))         # the YOLO detector: ~7x taller than wide at the opening level
    canvas = page.evaluate("__graph.canvasRect()")
    _fit(page)
    assert page.evaluate("__graph.fitMode()") == "width"
    drawing = page.evaluate("__graph.drawingRect()")
    assert drawing["w"] >= 0.5 * canvas["w"], (drawing, canvas)          # not a thin column
    assert abs(drawing["y"] - canvas["y"]) <= 30                          # from the inputs down
    assert _overlap(drawing, page.evaluate("__graph.minimapRect()")) == 0     # beside the minimap, not under it
    _fit(page)                                                           # again: all of it
    assert page.evaluate("__graph.fitMode()") == "all"
    drawing = page.evaluate("__graph.drawingRect()")
    assert _inside(drawing, canvas), (drawing, canvas)
    assert _overlap(drawing, page.evaluate("__graph.minimapRect()")) == 0
    assert errors == []
