"""Issue 31 item 9: every HTML report the studio writes shows model-controlled strings as text. A model
whose graph name, tensor names, node name, producer and doc string are HTML/script markup goes through
``graph -o``, ``compare --chart``, ``export`` (its report and graph view) and ``batch`` (its report, with
the plots); no report holds the markup raw, and the escaped form is there (the name is shown, not lost).
The batch report's plot labels were raw before (plotly draws label text as HTML)."""

from __future__ import annotations

import html

import onnx
import pytest
from onnx import TensorProto, helper

from studio.cli import main

MARKUP = {
    "input": '<script>alert("in")</script>',
    "output": "<img src=q onerror=alert(2)>",
    "node": "<b onmouseover=alert(3)>n",
    "graph": "<svg onload=alert(4)>",
    "producer": "<iframe src=javascript:alert(5)>",
    "doc": "<script>alert(6)</script>",
}


def _hostile_model() -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Relu", [MARKUP["input"]], [MARKUP["output"]], name=MARKUP["node"])],
                          MARKUP["graph"], [helper.make_tensor_value_info(MARKUP["input"], TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info(MARKUP["output"], TensorProto.FLOAT, [1, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name=MARKUP["producer"])
    m.ir_version = 8
    m.doc_string = MARKUP["doc"]
    return m


@pytest.mark.slow
def test_every_html_report_escapes_model_strings(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    onnx.save(_hostile_model(), tmp_path / "<svg onload=alert(7)>.onnx")
    model = "<svg onload=alert(7)>.onnx"
    runs = [["graph", model, "-o", "g.html"],
            ["compare", model, model, "--layerwise", "--chart", "c.html"],
            ["export", model, "--target", "ort", "-o", "exp"],
            ["batch", model, "-o", "b", "--stages", "inspect,check", "--engines", "onnxruntime", "--workers", "1"]]
    for argv in runs:
        assert main(argv) == 0, (argv, capsys.readouterr().err[-800:])
    pages = sorted(tmp_path.rglob("*.html"))
    assert {p.name for p in pages} >= {"g.html", "c.html", "report.html", "graph.html", "batch.html"}, pages
    raw = [*MARKUP.values(), "<svg onload=alert(7)>"]
    for page in pages:
        text = page.read_text(encoding="utf-8", errors="replace")
        found = [m for m in raw if m in text]
        assert found == [], f"{page.relative_to(tmp_path)} holds raw model markup: {found}"
    batch = (tmp_path / "b" / "batch.html").read_text(encoding="utf-8")
    assert html.escape("<svg onload=alert(7)>.onnx") in batch
