"""Edits from the Graph page's node panel (streamlit.testing.v1.AppTest): each action builds the
script ``onnx-studio edit --script`` takes, previews what it removes, applies into a new version
whose provenance holds the script; "show as script" round-trips through the real CLI to the same
graph. Oracles: plain onnxruntime on the original (inner tensors exposed with onnx.helper)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest

from studio import api
from tests.conftest import ROOT, SAMPLES, current_model, ort_reference

pytestmark = pytest.mark.slow                # each applies a verified edit and runs the CLI once (~20-45 s)

CNN = SAMPLES / "cnn_unfused.onnx"
KEY = "graph_viewer"                         # the Graph view's node panel


def _node_id(path, name: str) -> str:
    return next(n.id for n in api.graph_index(api.load(path)).graph.nodes if n.name == name)


def _panel(app, path, node: str):
    at = app(str(path)).run()
    at.switch_page("views/graph.py").run()
    assert not at.exception, at.exception
    at.session_state["selected_node"] = _node_id(path, node)      # what a click in the viewer records
    at.run()
    assert not at.exception, at.exception
    return at


def _script(at) -> list[dict]:
    at.toggle(key=f"{KEY}_edit_script").set_value(True).run()
    codes = [c.value for c in at.code if c.language == "json"]
    assert len(codes) == 1, codes
    return json.loads(codes[0])


def _apply(at):
    """Preview, then apply; the new version (selected) of the page's model."""
    parent = at.session_state["onnx_studio_version"]
    at.button(key=f"{KEY}_edit_preview").click().run()
    assert not at.exception, at.exception
    assert not at.get("exception") and not [e for e in at.error], [e.value for e in at.error]
    at.button(key=f"{KEY}_edit_apply").click().run()
    assert not at.exception, at.exception
    assert not [e for e in at.error], [e.value for e in at.error]
    vid = at.session_state["onnx_studio_version"]
    assert vid != parent
    ws = current_model(at)
    return ws, ws.version(vid), parent


def _cli(src, script: list[dict], tmp_path) -> onnx.ModelProto:
    """The same script through ``onnx-studio edit --script`` (a real process)."""
    f = tmp_path / "edits.json"
    f.write_text(json.dumps(script))
    out = tmp_path / "cli" / "edited.onnx"
    proc = subprocess.run([sys.executable, "-m", "studio", "edit", str(src), "--script", str(f), "-o", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return onnx.load(out)


def _same_graph(a: onnx.ModelProto, b: onnx.ModelProto) -> None:
    assert a.graph.SerializeToString(deterministic=True) == b.graph.SerializeToString(deterministic=True)


def _feeds(path) -> dict:
    m = onnx.load(path)
    x = m.graph.input[0]
    shape = [d.dim_value or 1 for d in x.type.tensor_type.shape.dim]
    return {x.name: np.random.default_rng(3).normal(size=shape).astype(np.float32)}


def test_bypass_previews_the_removed_node_and_versions_the_script(app, tmp_path):
    at = _panel(app, CNN, "/Identity")
    at.radio(key=f"{KEY}_edit_action").set_value("Bypass").run()
    assert at.button(key=f"{KEY}_edit_apply").disabled             # nothing applies before its preview
    at.button(key=f"{KEY}_edit_preview").click().run()
    texts = [m.value for m in at.markdown]
    assert any(t.startswith("**Removes 1 nodes**") and "Identity" in t for t in texts), texts
    assert any("bypassed node '/Identity'" in t.replace("\\", "") for t in texts), texts
    script = _script(at)
    assert script == [{"op": "bypass", "node": "/Identity"}]
    assert any("onnx-studio edit cnn_unfused.onnx --script edits.json -o edited.onnx" in c.value for c in at.code)
    ws, v, parent = _apply(at)
    assert v.parent == parent and v.provenance["edit"]["script"] == script
    assert v.provenance["edit"]["verification"]["method"] == "numeric"
    assert v.provenance["edit"]["verification"]["status"] == "passed"
    assert "/Identity (Identity)" in v.provenance["edit"]["nodes_removed"]
    edited = onnx.load(ws.handle(v.id).path)
    assert "/Identity" not in [n.name for n in edited.graph.node]
    assert any(s.value.startswith(f"Saved as version {v.id}") for s in at.success)
    # The page reports the verification and offers the diff of the new version against its parent.
    assert any("Verification passed (numeric)" in i.value for i in at.info)
    at.button(key="graph_edit_to_diff").click().run()
    assert not at.exception, at.exception
    assert at.session_state["graph_mode"] == "Diff"
    assert at.selectbox(key="diff_b").value.endswith(f":{v.id}") and at.selectbox(key="diff_a").value.endswith(
        f":{parent}")
    # Round trip: the shown script through the CLI gives the same graph as the UI's version.
    _same_graph(_cli(CNN, script, tmp_path), edited)
    feeds = _feeds(CNN)
    for k, want in ort_reference(CNN, feeds).items():
        np.testing.assert_array_equal(ort_reference(edited, feeds)[k], want)


def _fill(at, action: str) -> None:
    """Each UI action's fields, filled as a user would."""
    at.radio(key=f"{KEY}_edit_action").set_value(action).run()
    if action == "Rename":
        for ti in at.text_input:
            if ti.value == "/relu/Relu":
                ti.set_value("stem_relu")
            elif ti.value == "/relu/Relu_output_0":
                ti.set_value("stem")
    at.run()


@pytest.mark.parametrize("action, op", [("Rename", "rename"), ("Add output here", "add_output"),
                                        ("Extract from here", "extract"), ("Delete with what follows", None),
                                        ("Edit an attribute", "set_attr")])
def test_every_action_round_trips_between_ui_script_and_cli(app, tmp_path, action, op):
    at = _panel(app, CNN, "/relu/Relu")
    _fill(at, action)
    if op is None:            # deleting the stem would remove every output: refused in the preview, one line
        at.button(key=f"{KEY}_edit_preview").click().run()
        assert [e.value for e in at.error] and "would remove every graph output" in at.error[0].value
        assert at.button(key=f"{KEY}_edit_apply").disabled
        return
    if action == "Edit an attribute":       # Relu has none: add one, the checker must refuse it
        at.selectbox(key=next(s.key for s in at.selectbox if s.label == "Attribute")).set_value("(a new attribute)")
        at.run()
        next(t for t in at.text_input if t.label == "New attribute's name").set_value("alpha").run()
        next(t for t in at.text_input if t.label.startswith("Value")).set_value("0.5").run()
        at.button(key=f"{KEY}_edit_preview").click().run()
        assert at.error and "fails the" in at.error[0].value, [e.value for e in at.error]
        return
    script = _script(at)
    assert script[0]["op"] == op
    ws, v, _ = _apply(at)
    assert v.provenance["edit"]["script"] == script
    edited = onnx.load(ws.handle(v.id).path)
    _same_graph(_cli(CNN, script, tmp_path), edited)
    feeds = _feeds(CNN)
    if op == "rename":
        assert script == [{"op": "rename", "tensors": {"/relu/Relu_output_0": "stem"},
                           "nodes": {"/relu/Relu": "stem_relu"}}]
        assert "stem_relu" in [n.name for n in edited.graph.node]
    else:                     # the cut's output holds the original's intermediate values (ORT, exposed by hand)
        orig = onnx.load(CNN)
        orig.graph.output.append(onnx.helper.make_empty_tensor_value_info("/relu/Relu_output_0"))
        want = ort_reference(orig, feeds)["/relu/Relu_output_0"]
        np.testing.assert_array_equal(ort_reference(edited, feeds)["/relu/Relu_output_0"], want)
        if op == "extract":
            assert [o.name for o in edited.graph.output] == ["/relu/Relu_output_0"]
            assert v.provenance["edit"]["verification"]["method"] == "reproduce"
