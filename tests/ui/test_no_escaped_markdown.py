"""Model names full of Markdown punctuation show as typed: no backslash from Markdown escaping in
table cells, option labels, metrics or code spans (issue 15: the page showed ``fix\\-input\\-shapes``)."""

from __future__ import annotations

import re

import onnx
from onnx import TensorProto, helper

from tests.conftest import save

NAME = "fix-input-shapes_a.b(c)"


def _model(path):
    x = helper.make_tensor_value_info(f"in-{NAME}", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info(f"out-{NAME}", TensorProto.FLOAT, ["batch", 4])
    nodes = [helper.make_node("Relu", [x.name], ["t"], name=f"{NAME}_relu"),
             helper.make_node("Sigmoid", ["t"], [y.name], name=f"{NAME}_sigmoid")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    onnx.helper.set_model_props(model, {f"key-{NAME}": f"value-{NAME}"})
    return save(model, path)


def _values(at) -> list[str]:
    """Every text a user reads in a non-Markdown element: cells, option labels, metrics, code."""
    out: list[str] = []
    for df in at.dataframe:
        out += [str(v) for v in df.value.astype(str).to_numpy().ravel()] + [str(c) for c in df.value.columns]
    for sb in at.selectbox:
        out += [str(o) for o in sb.options]
    for ms in at.multiselect:
        out += [str(o) for o in ms.options]
    for m in at.metric:
        out += [str(m.label), str(m.value)]
    out += [c.value for c in at.code]
    return out


def _code_spans(at) -> list[str]:
    texts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    return [span for t in texts for span in re.findall(r"(`+)(.+?)\1", t) for span in [span[1]]]


def test_names_with_markdown_punctuation_show_plain(app, tmp_path):
    model = _model(tmp_path / f"{NAME}.onnx")
    at = app(str(model)).run()
    assert not at.exception
    pages = {"overview": [], "nodes": [], "compatibility": []}
    for page in pages:
        at.switch_page(f"views/{page}.py").run()
        assert not at.exception
        pages[page] = _values(at)
        spans = _code_spans(at)
        assert not [s for s in spans if "\\" in s], (page, spans)
        if page == "compatibility":
            assert "fix-input-shapes" in spans          # the fix pass, as a code span, unescaped
    everything = [v for vals in pages.values() for v in vals]
    assert any(NAME in v for v in everything)           # the names are there...
    assert not [v for v in everything if "\\" in v]     # ...and never with a Markdown backslash
