"""Optimize page through AppTest: the safe preset on the CNN sample gives a
report table and a new, selected version whose provenance holds the lineage."""

from __future__ import annotations

from tests.conftest import SAMPLES, current_model, parse_model, save


def _table(at, column: str):
    """The dataframe that has ``column`` (the report has 'pass', the op diff 'op')."""
    return next(d.value for d in at.dataframe if column in d.value.columns)


def test_safe_preset_on_cnn_sample(app):
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/optimize.py").run()
    assert not at.exception
    assert at.selectbox(key="opt_preset").value == "safe"
    at.button(key="opt_run").click().run()
    assert not at.exception, at.exception
    report = _table(at, "pass")
    assert list(report["pass"])[:3] == ["eliminate-identity", "constants-to-initializers", "fold-constants"]
    fuse = report[report["pass"] == "fuse-conv-bn"].iloc[0]
    assert bool(fuse["changed"]) and fuse["status"] == "changed" and "match" in fuse["verification"]
    ops = _table(at, "op")
    bn = ops[ops["op"] == "BatchNormalization"].iloc[0]
    assert bn["before"] == 7 and bn["after"] == 0
    assert any("Saved as version v1" in i.value for i in at.info)
    # The new version is selected and carries the lineage.
    ws = current_model(at)
    v1 = ws.version("v1")
    assert at.session_state["onnx_studio_version"] == "v1" and v1.parent == "v0"
    lineage = v1.provenance["pipeline"]
    fused = [c for r in lineage if r["name"] == "fuse-conv-bn" for c in r["changes"] if c["kind"] == "fused"]
    assert fused and v1.provenance["preset"] == "safe"
    assert any("onnx-studio optimize" in c.value and "--preset safe" in c.value for c in at.code)


def test_custom_passes_with_an_option(app, tmp_path):
    m = parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[N,4] x) => (float[N,4] y) '
                    '{ a = Identity(x) y = Relu(a) }')
    at = app(str(save(m, tmp_path / "m.onnx"))).run()
    at.switch_page("views/optimize.py").run()
    at.selectbox(key="opt_preset").set_value("custom").run()
    at.multiselect(key="opt_passes").set_value(["eliminate-identity", "convert-opset"]).run()
    at.number_input(key="opt_target").set_value(18).run()
    at.button(key="opt_run").click().run()
    assert not at.exception
    report = _table(at, "pass")
    assert list(report["status"]) == ["changed", "changed"]
    assert any("--set convert-opset.target=18" in c.value for c in at.code)
    assert current_model(at).version("v1").provenance["passes"] == [
        "eliminate-identity", "convert-opset"]


def test_invalid_model_is_refused_with_the_checker_message(app, tmp_path):
    m = parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[1] x) => (float[1] y) { y = Relu(x) }')
    m.graph.node[0].input[0] = "missing"
    import onnx

    p = tmp_path / "bad.onnx"
    onnx.save(m, p)
    at = app(str(p)).run()
    at.switch_page("views/optimize.py").run()
    at.button(key="opt_run").click().run()
    assert not at.exception
    assert any("cannot optimize" in e.value for e in at.error)
