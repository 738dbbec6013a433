"""The Graph page through streamlit.testing.v1.AppTest: overview (level,
overlay, search, node details), detail (graphviz), diff of two versions with
pass lineage, and hostile names."""

from __future__ import annotations

import json

import onnx
import pytest

from benchmarks.graph_models import chain
from studio import api
from tests.conftest import SAMPLES, current_model, parse_model, save
from tests.graphview.optimized import fold_conv_bn


def _graph(at, mode: str | None = None):
    at.switch_page("views/graph.py").run()
    assert not at.exception, at.exception
    if mode is not None:
        at.radio(key="graph_mode").set_value(mode).run()
        assert not at.exception, at.exception
    return at


def _viewer_doc(at, i: int = 0) -> str:
    """The viewer document: in the Graph view's frame component (clicks come back to Python),
    or in the diff's plain iframe."""
    frames = at.get("bidi_component")
    if frames:
        return json.loads(frames[i].proto.json)["doc"]
    return at.get("iframe")[i].proto.srcdoc


def _viewer_data(at, i: int = 0) -> dict:
    """The scene inside the viewer's document (the JSON block the renderer draws)."""
    doc = _viewer_doc(at, i)
    return json.loads(doc.split('id="gv-data">', 1)[1].split("</script>", 1)[0])


def _chart(at, i: int = 0) -> dict:
    charts = at.get("echarts_chart")
    return json.loads(charts[i].proto.spec)


def _items(at, i: int = 0) -> list[dict]:
    return _chart(at, i)["series"][0]["data"]


def test_overview_level_overlay_search_and_details(app):
    at = _graph(app(str(SAMPLES / "cnn_unfused.onnx")).run(), "Overview")
    assert len(_items(at)) == 39                        # the whole model fits: everything drawn
    legend = at.get("html")[0].proto.body
    assert "op type" in legend and "BatchNormalization" in legend and "background:#" in legend
    at.slider(key="graph_level").set_value(1).run()
    items = _items(at)
    assert len(items) < 39 and any(it["symbol"] == "roundRect" for it in items)     # collapsed groups
    # Expanding one group (what the "Expand this group" button records) draws its members.
    h = api.load(SAMPLES / "cnn_unfused.onnx")
    layer2 = next(g for g in api.graph_index(h).hierarchy.groups if g.label == "layer2/layer2.0")
    at.session_state["graph_expanded"] = {h.sha256: {layer2.key}}
    expanded = _items(at.run())
    assert len(expanded) > len(items)
    assert any(it["name"] == "downsample (2)" for it in expanded)
    at.session_state["graph_expanded"] = {}
    at.selectbox(key="graph_overlay").set_value("FLOPs share").run()
    assert any("FLOPs share" in it["tooltip"]["formatter"] for it in _items(at))
    at.slider(key="graph_level").set_value(3).run()
    at.text_input(key="graph_query").input("Gemm").run()
    hits = [it for it in _items(at) if it["itemStyle"].get("borderColor") == "#d62728"]
    assert len(hits) == 1 and hits[0]["name"] == "Gemm"
    # Choosing a match opens the same node details as the Nodes page.
    at.selectbox(key="graph_match").set_value("/fc/Gemm").run()
    assert at.session_state["selected_node"] == "/fc/Gemm"
    assert any(md.value.startswith("### Gemm") for md in at.markdown)
    assert any("onnx-studio graph" in c.value for c in at.code)


def test_graph_viewer_opens_the_detector_with_numeric_shapes(app):
    """The default view is the box viewer: the detector opens at <= ~150 boxes, with its
    real scopes, Conv attributes and weights, and numeric edge shapes once dims are set."""
    at = app(str(SAMPLES / "yolo_detector.onnx")).run()
    at.session_state["onnx_studio_dims"] = {"height": 320, "width": 320}
    at = _graph(at.run())
    scene = _viewer_data(at)["scene"]
    assert any(g["label"] == "model.22" for g in scene["groups"])
    conv = next(lf for lf in scene["leaves"] if lf["key"] == "/model.0/conv/Conv")
    assert conv["attrs"][:2] == ["kernel 3×3", "stride 2"] and conv["w"] == ["W ⟨4×3×3×3⟩", "B ⟨4⟩"]
    shapes = [e[3] for e in scene["edges"] if e[3]]
    assert "1×4×160×160" in shapes and not any("height" in x or "floor" in x for x in shapes)
    assert any("onnx-studio graph yolo_detector.onnx --dim height=320 --dim width=320" in c.value for c in at.code)
    # An overlay colours a stripe on each box, with its legend.
    at.selectbox(key="graph_overlay").set_value("FLOPs share").run()
    data = _viewer_data(at)
    marked = [lf for lf in data["scene"]["leaves"] if lf.get("mark")]
    assert len(marked) >= 64 and all("%" in lf["ov"] for lf in marked)
    assert "FLOPs share" in _viewer_doc(at).split('id="elk-src"', 1)[0]


def test_detail_view_of_a_neighbourhood_and_a_group(app):
    at = _graph(app(str(SAMPLES / "if_loop.onnx")).run())
    at.radio(key="graph_mode").set_value("Detail").run()
    at.text_input(key="graph_focus").input("/Loop").run()
    dot = at.get("graphviz_chart")[0].proto.spec
    assert dot.startswith("digraph") and "Loop" in dot
    at.radio(key="graph_region").set_value("A group").run()
    assert not at.exception
    assert "cluster_" in at.get("graphviz_chart")[0].proto.spec


def test_diff_of_two_versions_shows_the_removed_batchnorms(app):
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    ws = current_model(at)
    opt, records = fold_conv_bn(onnx.load(str(SAMPLES / "cnn_unfused.onnx")))
    v = ws.add_model(opt, "optimized", "v0", {"pipeline": records})
    at.session_state["onnx_studio_version"] = v.id
    at = _graph(at.run())
    at.radio(key="graph_mode").set_value("Diff").run()
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Removed"] == "11" and metrics["Changed"] == "7"
    frames = {df.value.columns[0]: df.value for df in at.dataframe}
    changed = frames["status"]
    bn = changed[(changed["op"] == "BatchNormalization")]
    assert len(bn) == 7 and set(bn["status"]) == {"removed"}
    assert all("fused by fuse-conv-bn" in p for p in bn["pass"])
    ops = frames["op type"].set_index("op type")
    assert ops.loc["BatchNormalization", "after"] == "0"
    data = _viewer_data(at)
    removed = [lf for lf in data["scene"]["leaves"] if lf.get("status") == "removed"]
    assert len(removed) == 11 and len(data["panels"]) == 1
    at.radio(key="diff_mode").set_value("side-by-side").run()
    panels = _viewer_data(at)["panels"]
    assert [p["side"] for p in panels] == ["a", "b"]          # one layout, drawn twice


def test_hostile_names_on_the_graph_page(app, tmp_path):
    m = parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[1] x) => (float[1] y) { y = Relu(x) }')
    m.graph.node[0].name = '<script>alert(1)</script>[x](javascript:alert(1))"];\n'
    p = save(m, tmp_path / "evil.onnx")
    at = _graph(app(str(p)).run(), "Overview")
    at.text_input(key="graph_query").input("script").run()
    at.selectbox(key="graph_match").set_value(at.selectbox(key="graph_match").options[0]).run()
    assert not at.exception
    rendered = " ".join(md.value for md in at.markdown) + " ".join(c.value for c in at.caption)
    assert "<script>" not in rendered and "](javascript:" not in rendered
    tips = " ".join(it["tooltip"]["formatter"] for it in _items(at))
    assert "<script>" not in tips and "&lt;script&gt;" in tips
    assert "<script>" not in " ".join(h.proto.body for h in at.get("html"))


@pytest.mark.slow
def test_huge_model_is_drawn_before_inspect(app, tmp_path):
    """R20: a 60,000-node chain gets an aggregated overview first; shapes and FLOPs on request."""
    at = _graph(app(str(chain(60_000, tmp_path / "chain.onnx"))).run(), "Overview")
    assert 0 < len(_items(at)) <= 12_000
    assert any("drawn as" in i.value for i in at.info)
    assert any("without shapes and FLOPs" in c.value for c in at.caption)
    assert "FLOPs share" not in at.selectbox(key="graph_overlay").options
    at.button(key="graph_add_shapes").click().run()
    assert not at.exception
    assert "FLOPs share" in at.selectbox(key="graph_overlay").options


