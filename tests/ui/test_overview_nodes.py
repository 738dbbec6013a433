"""Overview and Nodes pages through streamlit.testing.v1.AppTest."""

from __future__ import annotations

from tests.conftest import SAMPLES, metrics, open_sample, parse_model, save
from tests.hostile_models import dangling_input


def test_overview_shows_preloaded_model(app):
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    assert not at.exception
    m = metrics(at)
    assert m["Nodes"] == "37" and m["Params"].endswith("K")
    assert any("Op histogram" in str(c.proto.spec) for c in at.get("plotly_chart"))


def test_open_sample_from_picker(app):
    at = app().run()
    assert not at.exception and not at.metric
    open_sample(at, "if_loop")
    assert not at.exception
    assert metrics(at)["Nodes"] == "22"
    assert any("count the larger branch" in c.value and "then" in c.value for c in at.caption)


def test_path_outside_root_is_refused(app, tmp_path):
    outside = save(parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[1] x) => (float[1] y) '
                               '{ y = Relu(x) }'), tmp_path / "elsewhere" / "m.onnx")
    root = tmp_path / "root"
    root.mkdir()
    at = app(ONNX_STUDIO_PATH_ROOT=str(root)).run()
    at.text_input(key="model_path").input(str(outside)).run()
    at.button(key="open_path").click().run()
    assert not at.exception
    assert any("outside the workspace root" in e.value for e in at.error)
    assert not at.metric
    for bad in ("/etc/passwd", "/dev/zero", "../../etc/passwd"):
        at.text_input(key="model_path").input(bad).run()
        at.button(key="open_path").click().run()
        assert any("outside" in e.value for e in at.error), bad


def test_path_inside_root_opens(app, tmp_path):
    root = tmp_path / "root"
    (root / "models").mkdir(parents=True)
    (root / "models" / "cnn.onnx").write_bytes((SAMPLES / "cnn_unfused.onnx").read_bytes())
    at = app(ONNX_STUDIO_PATH_ROOT=str(root)).run()
    at.text_input(key="model_path").input("models/cnn.onnx").run()
    at.button(key="open_path").click().run()
    assert metrics(at)["Nodes"] == "37"


def test_shared_mode_disables_path_input(app):
    at = app(ONNX_STUDIO_SHARED="1").run()
    assert not at.text_input and any("disabled" in i.value for i in at.info)


def test_nodes_page_search_and_details(app):
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/nodes.py").run()
    assert not at.exception
    at.text_input(key="node_query").input("BatchNormalization").run()
    df = at.dataframe[0].value          # op types and tensor names both match
    assert (df["op"] == "BatchNormalization").sum() >= 4 and len(df) < 37
    at.text_input(key="node_query").input("").run()
    at.multiselect(key="node_ops").set_value(["BatchNormalization"]).run()
    df = at.dataframe[0].value
    assert len(df) >= 4 and set(df["op"]) == {"BatchNormalization"}
    # Details of the first listed node: attributes and its weight statistics.
    assert any(md.value.startswith("### BatchNormalization") for md in at.markdown)
    assert any(m.label == "std" for m in at.metric)


def test_hostile_names_are_shown_literally(app, tmp_path):
    m = parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[1] x) => (float[1] y) { y = Relu(x) }')
    m.graph.node[0].name = '<script>alert(1)</script>[x](javascript:alert(1))"];\n'
    m.producer_name = "<img src=x onerror=alert(1)>"
    m.doc_string = "A" * 1_000_000
    p = save(m, tmp_path / "evil.onnx")
    at = app(str(p)).run()
    assert not at.exception
    at.switch_page("views/nodes.py").run()
    assert not at.exception
    rendered = " ".join(md.value for md in at.markdown) + " ".join(c.value for c in at.caption)
    assert "<script>" not in rendered and "](javascript:" not in rendered and "<img" not in rendered
    assert "\\<script\\>" in rendered


def test_broken_model_shows_error_not_crash(app, tmp_path):
    p = tmp_path / "bad.onnx"
    p.write_bytes(b"\x08\x07" + b"\xff" * 100)
    at = app(str(p)).run()
    assert not at.exception
    assert any("onnx" in e.value.lower() for e in at.error)


def test_checker_failure_is_a_warning(app, tmp_path):
    p = save(dangling_input("missing_input"), tmp_path / "m.onnx")
    at = app(str(p)).run()
    assert not at.exception
    assert any("checker" in w.value for w in at.warning)


def _panel_expanded(at) -> bool:
    return next(e for e in at.expander if e.label == "Open a model").proto.expanded


def test_the_open_panel_stays_open_while_choosing_and_closes_once_a_model_opens(app):
    """Each rerun draws the panel with an ``expanded`` value; one that flips between runs collapses the panel
    in the browser under the user's next click (a lost "Open sample" click in CI). Picking a sample keeps it
    open on every run until the sample opens, whatever reruns come in between."""
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    assert not _panel_expanded(at)                          # a model is open: the panel starts collapsed
    at.selectbox(key="sample_pick").set_value("mmdeploy_grid_sampler").run()
    assert _panel_expanded(at)
    at.run()                                                # an unrelated rerun before the click
    assert _panel_expanded(at)
    at.button(key="open_sample").click().run()
    assert not at.exception
    assert any("Custom ops: mmdeploy" in w.value for w in at.warning)   # the sample is the open model
    assert not _panel_expanded(at)                          # opened: the panel closes
    at.run()
    assert not _panel_expanded(at)
