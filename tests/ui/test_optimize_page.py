"""Optimize page through AppTest: the safe preset on the CNN sample gives a
report table and a new, selected version whose provenance holds the lineage."""

from __future__ import annotations

from tests.conftest import SAMPLES, current_model, parse_model, save, table_with
from tests.hostile_models import dangling_input


def test_safe_preset_on_cnn_sample(app):
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/optimize.py").run()
    assert not at.exception
    assert at.selectbox(key="opt_preset").value == "safe"
    at.button(key="opt_run").click().run()
    assert not at.exception, at.exception
    report = table_with(at, "pass")
    assert list(report["pass"])[:3] == ["eliminate-identity", "constants-to-initializers", "fold-constants"]
    fuse = report[report["pass"] == "fuse-conv-bn"].iloc[0]
    assert bool(fuse["changed"]) and fuse["status"] == "changed" and "match" in fuse["verification"]
    ops = table_with(at, "op")
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
    report = table_with(at, "pass")
    assert list(report["status"]) == ["changed", "changed"]
    assert any("--set convert-opset.target=18" in c.value for c in at.code)
    assert current_model(at).version("v1").provenance["passes"] == [
        "eliminate-identity", "convert-opset"]


def test_invalid_model_is_refused_with_the_checker_message(app, tmp_path):
    p = save(dangling_input("missing"), tmp_path / "bad.onnx")
    at = app(str(p)).run()
    at.switch_page("views/optimize.py").run()
    at.button(key="opt_run").click().run()
    assert not at.exception
    assert any("cannot optimize" in e.value for e in at.error)


def test_ort_transformers_preset_from_the_page(app):
    """The preset list comes from studio.api: ort-transformers is offered and fuses the sample transformer."""
    at = app(str(SAMPLES / "transformer_block.onnx")).run()
    at.switch_page("views/optimize.py").run()
    assert any(o.startswith("ort-transformers — ") for o in at.selectbox(key="opt_preset").options)
    at.selectbox(key="opt_preset").set_value("ort-transformers").run()
    at.button(key="opt_run").click().run()
    assert not at.exception, at.exception
    report = table_with(at, "pass")
    fuse = report[report["pass"] == "fuse-transformers"].iloc[0]
    assert fuse["status"] == "changed" and "match" in fuse["verification"]
    ops = table_with(at, "op")
    assert ops[ops["op"] == "Attention"].iloc[0]["after"] == 1
    assert ops[ops["op"] == "Softmax"].iloc[0]["after"] == 0


def test_unset_dims_stay_unset_for_every_page(app, tmp_path):
    """Visiting Optimize sets no dim: an unset free length stays unset for the pages after it (Precision's
    command has no --dim) and the run searches a size the model takes. A Conv of kernel 5 over a free
    length refuses length 1; before, the page's boxes wrote 1 into the model's dims (Precision, Profile and
    Export then ran at length 1: corpus oww_melspectrogram's every row failed) and its own run was
    'structure only'."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    import numpy as np

    w = numpy_helper.from_array(np.ones((2, 1, 5), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["xi"]), helper.make_node("Conv", ["xi", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "length"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, None])], [w])
    path = tmp_path / "conv1d.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)

    at = app(str(path)).run()
    assert at.session_state["onnx_studio_dims"] == {}
    at.switch_page("views/optimize.py").run()
    assert not at.exception, at.exception
    (box,) = [n for n in at.number_input if n.key.startswith("opt_dim_")]
    assert box.value is None                                     # before: 1, and stored as the model's dim
    assert at.session_state["onnx_studio_dims"] == {}
    at.button(key="opt_run").click().run()
    assert not at.exception, at.exception
    report = table_with(at, "pass")
    identity = report[report["pass"] == "eliminate-identity"].iloc[0]
    assert bool(identity["changed"]) and "match" in identity["verification"], identity["verification"]
    at.switch_page("views/precision.py").run()
    (hint,) = [c.value for c in at.code if c.value.startswith("onnx-studio precision")]
    assert "--dim" not in hint, hint
