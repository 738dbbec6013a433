"""Edits from the Graph page's node panel (streamlit.testing.v1.AppTest): each action builds the
script ``onnx-studio edit --script`` takes, previews what it removes, applies into a new version
whose provenance holds the script; "show as script" round-trips through the real CLI to the same
graph. Oracles: plain onnxruntime on the original (inner tensors exposed with onnx.helper)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from studio import api
from tests.clirun import run_cli
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
    """The same script through ``onnx-studio edit --script`` (the CLI's main(), tests/clirun.py)."""
    f = tmp_path / "edits.json"
    f.write_text(json.dumps(script))
    out = tmp_path / "cli" / "edited.onnx"
    proc = run_cli(None, ["edit", src, "--script", f, "-o", out], ROOT)
    assert proc.returncode == 0, "the edit command failed (its output is in the captured stdout/stderr)"
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


def _cli_parts(src, script: list[dict], tmp_path) -> list[onnx.ModelProto]:
    """The script through the real CLI; every model it wrote (a split's second part beside OUT)."""
    first = _cli(src, script, tmp_path)
    part2 = tmp_path / "cli" / "edited.part2.onnx"
    return [first, *([onnx.load(part2)] if part2.exists() else [])]


def test_insert_after_keeps_the_numbers_and_round_trips(app, tmp_path):
    at = _panel(app, CNN, "/relu/Relu")
    at.radio(key=f"{KEY}_edit_action").set_value("Insert after").run()
    assert not at.exception, at.exception
    script = _script(at)
    assert script == [{"op": "insert", "tensor": "/relu/Relu_output_0", "op_type": "Identity"}]
    ws, v, _ = _apply(at)
    assert v.provenance["edit"]["verification"] == {**v.provenance["edit"]["verification"], "method": "numeric",
                                                   "status": "passed"}
    edited = onnx.load(ws.handle(v.id).path)
    assert [n.op_type for n in edited.graph.node].count("Identity") == \
        [n.op_type for n in onnx.load(CNN).graph.node].count("Identity") + 1
    _same_graph(_cli(CNN, script, tmp_path), edited)
    # The applied edit is shown as script too (what the report offers after the rerun).
    at.toggle(key="graph_edit_done_script").set_value(True).run()
    assert script in [json.loads(c.value) for c in at.code if c.language == "json"]


MODEL_KEY = "graph_model"


def _model_panel(app):
    at = app(str(CNN)).run()
    at.switch_page("views/graph.py").run()
    assert not at.exception, at.exception
    return at


def _model_script(at) -> list[dict]:
    at.toggle(key=f"{MODEL_KEY}_edit_script").set_value(True).run()
    codes = [json.loads(c.value) for c in at.code if c.language == "json"]
    assert len(codes) == 1, codes
    return codes[0]


def _model_apply(at):
    parent = at.session_state["onnx_studio_version"]
    at.button(key=f"{MODEL_KEY}_edit_preview").click().run()
    assert not at.exception and not [e.value for e in at.error], [e.value for e in at.error]
    at.button(key=f"{MODEL_KEY}_edit_apply").click().run()
    assert not at.exception and not [e.value for e in at.error], [e.value for e in at.error]
    ws = current_model(at)
    return ws, ws.version(at.session_state["onnx_studio_version"]), parent


def test_split_at_a_cut_from_the_model_panel_gives_two_versions_that_chain_to_the_original(app, tmp_path):
    # The cut collected by clicking a node in the drawing, then "Add its outputs to the cut".
    at = _panel(app, CNN, "/relu/Relu")
    at.button(key=f"{KEY}_edit_to_cut").click().run()
    assert not at.exception, at.exception
    assert at.radio(key=f"{MODEL_KEY}_action").value == "Split at a cut"
    assert at.multiselect(key=f"{MODEL_KEY}_split_cut").value == ["/relu/Relu_output_0"]
    at.button(key=f"{MODEL_KEY}_edit_preview").click().run()
    texts = [m.value for m in at.markdown]
    assert any(t.startswith("**Part 1 outputs**") and t.endswith("Relu\\_output\\_0\\: float\\[batch,16,32,32\\]")
               for t in texts), texts
    assert any(t.startswith("**Part 2 inputs**") and "→ /relu/Relu\\_output" in t for t in texts), texts
    script = _model_script(at)
    assert script == [{"op": "split", "cut": ["/relu/Relu_output_0"]}]
    ws, first, parent = _model_apply(at)
    second = next(v for v in ws.versions if v.parent == parent and v.provenance.get("part") == 2)
    assert first.provenance["edit"]["verification"]["method"] == "reproduce"
    assert first.provenance["edit"]["verification"]["status"] == "passed"
    a, b = onnx.load(ws.handle(first.id).path), onnx.load(ws.handle(second.id).path)
    cli_a, cli_b = _cli_parts(CNN, script, tmp_path)
    _same_graph(cli_a, a)
    _same_graph(cli_b, b)
    feeds = _feeds(CNN)                                     # oracle: the parts in sequence = the original
    mid = ort_reference(a, feeds)
    out = ort_reference(b, {i.name: mid[i.name] for i in b.graph.input})
    np.testing.assert_allclose(out["logits"], ort_reference(CNN, feeds)["logits"], rtol=1e-5, atol=1e-6)


def _preprocessing(tmp_path):
    """x -> x * 0.5 - 0.25, float32[batch,3,32,32] (the classifier's input)."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 32, 32])
    y = helper.make_tensor_value_info("normalized", TensorProto.FLOAT, ["batch", 3, 32, 32])
    g = helper.make_graph([helper.make_node("Mul", ["image", "scale"], ["scaled"], name="pre_mul"),
                           helper.make_node("Sub", ["scaled", "shift"], ["normalized"], name="pre_sub")],
                          "pre", [x], [y], [helper.make_tensor("scale", TensorProto.FLOAT, [], [0.5]),
                                            helper.make_tensor("shift", TensorProto.FLOAT, [], [0.25])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=onnx.load(CNN).ir_version)
    path = tmp_path / "pre.onnx"
    onnx.save(m, path)
    return path


def _postprocessing(tmp_path):
    """logits -> Softmax, float32[batch,10] (after the classifier)."""
    m = onnx.parser.parse_model(f"""<ir_version: {onnx.load(CNN).ir_version}, opset_import: ["" : 17]>
post (float[batch,10] scores) => (float[batch,10] probs) {{ probs = Softmax <axis = 1> (scores) }}""")
    path = tmp_path / "post.onnx"
    onnx.save(m, path)
    return path


@pytest.mark.parametrize("action", ["Merge a model in front", "Merge a model after", "Change an input",
                                    "Add an opset or domain"])
def test_model_panel_actions_round_trip_between_ui_script_and_cli(app, tmp_path, action):
    at = _model_panel(app)
    merging = action.startswith("Merge")
    if merging:
        other = _preprocessing(tmp_path) if action.endswith("front") else _postprocessing(tmp_path)
        api.add_model(at.session_state["onnx_studio_project"], other, label="other")
        at.run()
    at.radio(key=f"{MODEL_KEY}_action").set_value("Merge a model" if merging else action).run()
    assert not at.exception, at.exception
    if merging:
        pick = next(s for s in at.selectbox if s.key == f"{MODEL_KEY}_merge_model")
        after = action.endswith("after")
        if after:
            at.radio(key=f"{MODEL_KEY}_merge_position").set_value("after (this model's outputs feed it)").run()
        wire = next(s for s in at.selectbox if s.key.startswith(f"{MODEL_KEY}_merge_{pick.value}_{int(after)}_"))
        wire.set_value("logits" if after else "normalized").run()
    elif action == "Change an input":
        next(t for t in at.text_input if t.key == f"{MODEL_KEY}_in_shape_input").set_value("[2, 3, 32, 32]").run()
    else:
        at.text_input(key=f"{MODEL_KEY}_op_domain").set_value("ai.onnx.ml").run()
        at.number_input(key=f"{MODEL_KEY}_op_version").set_value(3).run()
    script = _model_script(at)
    ws, v, parent = _model_apply(at)
    assert v.parent == parent and v.provenance["edit"]["script"] == script
    edited = onnx.load(ws.handle(v.id).path)
    _same_graph(_cli(CNN, script, tmp_path), edited)
    feeds = _feeds(CNN)
    if action == "Merge a model in front":
        assert script == [{"op": "merge", "model": script[0]["model"], "io_map": [["normalized", "input"]]}]
        assert [i.name for i in edited.graph.input] == ["image"]
        want = ort_reference(CNN, {"input": feeds["input"] * np.float32(0.5) - np.float32(0.25)})["logits"]
        np.testing.assert_allclose(ort_reference(edited, {"image": feeds["input"]})["logits"], want, rtol=1e-5,
                                   atol=1e-6)
    elif action == "Merge a model after":
        assert script == [{"op": "merge", "model": script[0]["model"], "io_map": [["logits", "scores"]],
                           "position": "after"}]
        assert [o.name for o in edited.graph.output] == ["probs"]
        logits = ort_reference(CNN, feeds)["logits"]
        want = np.exp(logits - logits.max(1, keepdims=True))
        np.testing.assert_allclose(ort_reference(edited, feeds)["probs"], want / want.sum(1, keepdims=True),
                                   rtol=1e-5, atol=1e-6)
    elif action == "Change an input":
        assert script == [{"op": "set_input", "input": "input", "shape": [2, 3, 32, 32]}]
        assert [d.dim_value for d in edited.graph.input[0].type.tensor_type.shape.dim] == [2, 3, 32, 32]
        two = {"input": np.concatenate([feeds["input"]] * 2)}
        np.testing.assert_allclose(ort_reference(edited, two)["logits"], ort_reference(CNN, two)["logits"],
                                   rtol=1e-5, atol=1e-6)
    else:
        assert script == [{"op": "add_opset", "domain": "ai.onnx.ml", "version": 3}]
        assert {(o.domain, o.version) for o in edited.opset_import} >= {("ai.onnx.ml", 3), ("", 17)}


def test_remove_outputs_previews_the_nodes_it_removes(app, tmp_path):
    """Add an output at the stem (node panel), then remove 'logits' (model panel): the preview lists
    exactly the nodes only 'logits' needed (oracle: a walk up from the stem over the original's protos);
    removing every output is refused in the preview, in one line."""
    at = _panel(app, CNN, "/relu/Relu")
    at.radio(key=f"{KEY}_edit_action").set_value("Add output here").run()
    _apply(at)
    at.radio(key=f"{MODEL_KEY}_action").set_value("Remove outputs").run()
    at.multiselect(key=f"{MODEL_KEY}_rm_outputs").set_value(["logits"]).run()
    at.button(key=f"{MODEL_KEY}_edit_preview").click().run()
    assert not at.exception and not [e.value for e in at.error], [e.value for e in at.error]
    graph = onnx.load(CNN).graph
    producer = {o: n for n in graph.node for o in n.output}
    keep, todo = set(), ["/relu/Relu_output_0"]
    while todo:
        n = producer.get(todo.pop())
        if n is not None and n.name not in keep:
            keep.add(n.name)
            todo.extend(n.input)
    gone = [n.name for n in graph.node if n.name not in keep]
    shown = next(m.value for m in at.markdown if m.value.startswith("**Removes "))
    assert shown.startswith(f"**Removes {len(gone)} nodes**") and gone, (shown, gone)
    assert all(name in shown.replace("\\", "") for name in gone), (shown, gone)
    script = _model_script(at)
    assert script == [{"op": "remove_outputs", "outputs": ["logits"]}]
    ws, v, parent = _model_apply(at)
    edited = onnx.load(ws.handle(v.id).path)
    assert sorted(n.name for n in edited.graph.node) == sorted(keep)
    _same_graph(_cli(ws.handle(parent).path, script, tmp_path), edited)
    at.multiselect(key=f"{MODEL_KEY}_rm_outputs").set_value(["/relu/Relu_output_0"]).run()
    at.button(key=f"{MODEL_KEY}_edit_preview").click().run()
    assert [e.value for e in at.error] and "at least one output" in at.error[0].value
    assert at.button(key=f"{MODEL_KEY}_edit_apply").disabled


@pytest.mark.parametrize("remove", [False, True])
def test_attribute_edits_round_trip_and_match_the_edit_by_hand(app, tmp_path, remove):
    """Set BatchNormalization's epsilon, or remove its (training-only) momentum; oracle: the same change made
    with onnx.helper on the original, run on ORT."""
    at = _panel(app, CNN, "/bn1/BatchNormalization")
    at.radio(key=f"{KEY}_edit_action").set_value("Edit an attribute").run()
    pick = next(s for s in at.selectbox if s.label == "Attribute")
    if remove:
        pick.set_value("momentum").run()
        next(c for c in at.checkbox if c.label.startswith("Remove it")).check().run()
    else:
        next(t for t in at.text_input if t.label.startswith("Value")).set_value("0.25").run()
    script = _script(at)
    want_op = ({"op": "remove_attr", "node": "/bn1/BatchNormalization", "name": "momentum"} if remove else
               {"op": "set_attr", "node": "/bn1/BatchNormalization", "name": "epsilon", "value": 0.25})
    assert script == [want_op]
    ws, v, _ = _apply(at)
    edited = onnx.load(ws.handle(v.id).path)
    _same_graph(_cli(CNN, script, tmp_path), edited)
    by_hand = onnx.load(CNN)
    bn = next(n for n in by_hand.graph.node if n.name == "/bn1/BatchNormalization")
    keep = [a for a in bn.attribute if a.name != ("momentum" if remove else "epsilon")]
    del bn.attribute[:]
    bn.attribute.extend(keep + ([] if remove else [onnx.helper.make_attribute("epsilon", 0.25)]))
    feeds = _feeds(CNN)
    np.testing.assert_allclose(ort_reference(edited, feeds)["logits"], ort_reference(by_hand, feeds)["logits"],
                               rtol=1e-6, atol=1e-7)
    if not remove:    # the change is real: epsilon 0.25 moves the logits away from the original's
        assert not np.allclose(ort_reference(edited, feeds)["logits"], ort_reference(CNN, feeds)["logits"])


def test_replace_a_weight_from_an_uploaded_npy_round_trips(app, tmp_path):
    """The node panel's weight upload: the script names the saved .npy, the CLI reads the same file and
    writes the same graph; oracle: the initializer replaced with onnx.numpy_helper, run on ORT."""
    import io

    at = _panel(app, CNN, "/conv1/Conv")
    at.radio(key=f"{KEY}_edit_action").set_value("Replace a weight (.npy)").run()
    conv = next(n for n in onnx.load(CNN).graph.node if n.name == "/conv1/Conv")
    inits = {t.name: t for t in onnx.load(CNN).graph.initializer}
    weight = next(x for x in conv.input if x in inits)
    pick = [s for s in at.selectbox if s.label == "Weight"]
    if pick:
        pick[0].set_value(weight).run()
    new = np.random.default_rng(11).normal(size=list(inits[weight].dims)).astype(np.float32)
    buf = io.BytesIO()
    np.save(buf, new)
    at.file_uploader[0].set_value(("w.npy", buf.getvalue(), "application/octet-stream")).run()
    assert not at.exception, at.exception
    script = _script(at)
    assert script[0]["op"] == "replace_initializer" and script[0]["name"] == weight
    np.testing.assert_array_equal(np.load(script[0]["npy"]), new)
    ws, v, _ = _apply(at)
    assert v.provenance["edit"]["verification"]["method"] == "none"       # values change on purpose: said so
    edited = onnx.load(ws.handle(v.id).path)
    _same_graph(_cli(CNN, script, tmp_path), edited)
    by_hand = onnx.load(CNN)
    target = next(t for t in by_hand.graph.initializer if t.name == weight)
    target.CopyFrom(onnx.numpy_helper.from_array(new, weight))
    feeds = _feeds(CNN)
    np.testing.assert_array_equal(ort_reference(edited, feeds)["logits"], ort_reference(by_hand, feeds)["logits"])


def test_the_diff_button_shows_that_edit_even_when_a_stale_picker_value_arrives_with_the_click(app):
    """CI, 2026-12-04: after "See it in the diff" the page showed the parent (v0) against the edit (v1),
    "Removed 0, Added 1": the diff had been derived from whichever version was current when the rerun
    drew it. Here the click comes in the same rerun as a sidebar picker value naming the parent (a browser
    that sends the picker's old value with the click): the diff still opens on exactly this edit."""
    at = _panel(app, CNN, "/Identity")
    at.radio(key=f"{KEY}_edit_action").set_value("Bypass").run()
    ws, v, parent = _apply(at)
    picker = next(s for s in at.sidebar.selectbox if s.key.startswith("version_picker_"))
    picker.set_value(parent)                          # the stale value, sent together with the click
    at.button(key="graph_edit_to_diff").click().run()
    assert not at.exception, at.exception
    assert at.session_state["graph_mode"] == "Diff"
    assert at.selectbox(key="diff_a").value == f"{ws.id}:{parent}"
    assert at.selectbox(key="diff_b").value == f"{ws.id}:{v.id}"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics.get("Removed") == "1" and metrics.get("Added") == "0", metrics
    assert at.session_state["onnx_studio_version"] == v.id          # the edit's version stays selected
    assert any(c.value.startswith(f"Version {v.id} ") for c in at.caption)
