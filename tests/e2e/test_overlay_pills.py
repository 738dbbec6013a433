"""An overlay colours every node shape in the box viewer (issue 33): a node drawn without a body (a pill:
Relu, Sigmoid, Mul, no attributes or weights) shows its overlay colour too, zoomed in and zoomed out,
read from the canvas pixels themselves (``__graph.pixel``) against the colour the scene gives the node."""

from __future__ import annotations

import pytest

from studio import api
from tests.conftest import SAMPLES
from tests.e2e.test_graph_viewer import _open

pytestmark = pytest.mark.browser


def _hex(color: str) -> str:
    return color.lower()


def test_flops_overlay_colours_the_pills(page, tmp_path):
    h = api.load(SAMPLES / "cnn_unfused.onnx")
    summary = api.inspect(h, {})
    path = api.write_graph_viewer(api.graph_index(h, summary), tmp_path / "cnn.html", summary=summary,
                                  overlay="FLOPs share").path
    errors = _open(page, path)
    leaves = page.evaluate("__graph.viewer.model.s.leaves")
    pills = [lf for lf in leaves if lf["kind"] == "op" and lf["op"] == "Relu" and not lf.get("attrs") and not lf["w"]
             and lf.get("mark")]
    assert pills, [(lf["op"], lf.get("mark")) for lf in leaves][:10]
    pill = pills[0]
    rect = page.evaluate(f"__graph.rectOf({pill['key']!r})")
    assert rect is not None and rect["h"] <= 24 * max(page.evaluate("__graph.transform().k"), 0.1) + 1
    assert page.evaluate("__graph.transform().k") * 18 >= 6                  # drawn with text: the detail drawing
    at = page.evaluate(f"__graph.pixel({rect['x'] + 2}, {rect['y'] + rect['h'] / 2})")
    assert at == _hex(pill["mark"]), (at, pill["mark"], pill["c"])          # was the op colour: no stripe
    assert errors == []
