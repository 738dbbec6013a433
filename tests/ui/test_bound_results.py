"""Results belong to what produced them (issue 33, R59, R63): a page shows a result, banner or Save
button only for the project, model, version and settings it was computed on; the project refuses
to file one model's result as a version of another, and a byte-identical version as "same as vN".

Oracles: the project catalog (versions and their sha256) and the page's own widgets, read after
each switch; the repro of the issue is the first test (Precision on one model, then another)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from studio import api
from studio.core.errors import SameContentError, WrongSourceError
from tests.conftest import SAMPLES, current_model, open_sample


def _saves(at) -> list[str]:
    return [b.key for b in at.button if b.key and b.key.startswith("precision_save_")]


def _pick_model(at, model_id: str):
    """Choose a model in the sidebar, as a user does."""
    picker = next(s for s in at.sidebar.selectbox if s.key and s.key.startswith("model_picker_"))
    picker.set_value(model_id).run()
    assert not at.exception, at.exception
    return at


@pytest.mark.slow
def test_precision_result_and_save_stay_with_their_model(app):
    """The issue's repro: Precision on one model, then another model opened: its page shows no table and
    no Save button of the first; back on the first, its result is there again and Save files the variant
    under the first model only (the file's sha is the one the report built)."""
    at = open_sample(app().run(), "cnn_unfused")
    first = at.session_state["onnx_studio_model"]
    at.switch_page("views/precision.py").run()
    at.multiselect(key="precision_variants").set_value(["fp32", "fp16"]).run()
    at.number_input(key="precision_budget").set_value(5).run()
    at.button(key="precision_run").click().run()
    assert not at.exception, at.exception
    assert list(at.dataframe[0].value["variant"]) == ["fp32", "fp16"] and _saves(at) == ["precision_save_fp16"]
    key, (source_sha, report) = at.session_state["onnx_studio_results"]["precision_report"]
    assert key.model == first and source_sha == current_model(at).version("v0").sha256

    at.switch_page("views/overview.py").run()
    open_sample(at, "mobilenet_like")
    second = at.session_state["onnx_studio_model"]
    assert second != first
    at.switch_page("views/precision.py").run()
    assert not at.exception, at.exception
    assert _saves(at) == [] and not at.dataframe and not at.get("plotly_chart")
    assert any("No result for this model" in i.value for i in at.info)
    assert "cnn" not in " ".join(s.value for s in at.success)

    _pick_model(at, first)
    at.switch_page("views/precision.py").run()
    assert _saves(at) == ["precision_save_fp16"]               # its own result, its own settings restored
    at.button(key="precision_save_fp16").click().run()
    assert not at.exception, at.exception
    pid = at.session_state["onnx_studio_project"]
    m1, m2 = api.project_model(pid, first), api.project_model(pid, second)
    assert [v.id for v in m2.versions] == ["v0"]                 # nothing filed under the other model
    saved = m1.versions[-1]
    assert saved.label == "fp16" and saved.parent == "v0"
    assert saved.sha256 == api.load(report.variant("fp16").path).sha256


def test_project_refuses_another_models_result_as_a_version(tmp_path):
    """Belt and braces below the page: a file derived from model A offered as a version of model B is
    refused in one line, nothing added; the same content twice is "same as vN", not a duplicate."""
    p = api.create_project("two models")
    a, va = api.add_model(p, SAMPLES / "cnn_unfused.onnx")
    b, vb = api.add_model(p, SAMPLES / "mobilenet_like.onnx")
    derived = tmp_path / "derived.onnx"
    m = onnx.load(SAMPLES / "cnn_unfused.onnx")
    m.doc_string = "a variant of cnn_unfused"
    onnx.save(m, derived)
    with pytest.raises(WrongSourceError, match=r"computed on another model .* not on v0 of 'mobilenet_like'"):
        api.add_version(b, derived, label="int8", parent=vb.id, source_sha256=va.sha256)
    assert [v.id for v in b.versions] == ["v0"]
    with pytest.raises(WrongSourceError):                        # a derived result needs its parent named
        api.add_version(b, derived, label="int8", parent=None, source_sha256=va.sha256)
    kept = api.add_version(a, derived, label="int8", parent=va.id, source_sha256=va.sha256)
    assert kept.id == "v1" and kept.parent == "v0"
    with pytest.raises(SameContentError, match=r"same as v1") as err:
        api.add_version(a, derived, label="int8 again", parent=va.id, source_sha256=va.sha256, refuse_same=True)
    assert err.value.version == "v1" and err.value.code == "SAME-CONTENT"
    assert [v.id for v in a.versions] == ["v0", "v1"]


def test_a_no_op_weight_replacement_is_same_as_its_parent(tmp_path):
    """R63: a weight written back with identical data into an edited version (the edit's writer made it,
    so the bytes come out the same) is refused as "same as v1", not stored as a silent duplicate."""
    p = api.create_project("no-op")
    model, v0 = api.add_model(p, SAMPLES / "cnn_unfused.onnx")
    src = onnx.load(SAMPLES / "cnn_unfused.onnx")
    w = next(t for t in src.graph.initializer if len(t.dims) == 4)
    npy = tmp_path / "same.npy"
    np.save(npy, numpy_helper.to_array(w))
    script = [{"op": "replace_initializer", "name": w.name, "npy": str(npy)}]
    first = api.edit(model.handle(v0.id), script, tmp_path / "one" / "edited.onnx")
    v1 = api.add_edited_version(model, v0.id, first, source_sha256=v0.sha256)
    h1 = model.handle(v1.id)
    again = api.edit(h1, script, tmp_path / "two" / "edited.onnx")
    assert api.load(again.outputs[0]).sha256 == v1.sha256       # the oracle: the bytes are v1's
    with pytest.raises(SameContentError, match="same as v1"):
        api.add_edited_version(model, v1.id, again, source_sha256=h1.sha256)
    assert [v.id for v in model.versions] == ["v0", "v1"]


def test_an_edit_of_one_model_is_not_saved_under_another(tmp_path):
    p = api.create_project("edit source")
    a, va = api.add_model(p, SAMPLES / "cnn_unfused.onnx")
    b, vb = api.add_model(p, SAMPLES / "mobilenet_like.onnx")
    ha = a.handle(va.id)
    first = next(n.name for n in ha.proto.graph.node if n.op_type == "Relu")
    result = api.edit(ha, [{"op": "insert", "tensor": next(n.output[0] for n in ha.proto.graph.node
                                                            if n.name == first), "op_type": "Identity"}],
                      tmp_path / "out" / "edited.onnx")
    with pytest.raises(WrongSourceError):
        api.add_edited_version(b, vb.id, result, source_sha256=ha.sha256)
    assert [v.id for v in b.versions] == ["v0"]


def test_dims_belong_to_the_model(app, tmp_path):
    """Dims of one model never fill another's boxes: the second model opens with its own metadata size
    (1280) after the first one's were set to 320, and going back finds the first one's 320 again."""
    from tests.inspect.test_dims_everywhere import _model

    big = tmp_path / "big.onnx"
    onnx.save(_model(), big)
    small_model = _model()
    del small_model.metadata_props[:]
    small_model.metadata_props.add(key="imgsz", value="[320, 320]")
    small = tmp_path / "small.onnx"
    onnx.save(small_model, small)

    at = app(str(small)).run()
    boxes = {n.key: n for n in at.number_input if n.key and n.key.startswith("dim_")}
    assert boxes["dim_0_height"].value == 320
    boxes["dim_0_height"].set_value(300)
    at = boxes["dim_1_width"].set_value(300).run()
    first = at.session_state["onnx_studio_model"]
    pid = at.session_state["onnx_studio_project"]
    model_b, _ = api.add_model(pid, big)                     # a second model, as an upload adds it
    _pick_model(at.run(), model_b.id)
    assert at.session_state["onnx_studio_dims"] == {"height": 1280, "width": 1280}
    boxes = {n.key: n for n in at.number_input if n.key and n.key.startswith("dim_")}
    assert boxes["dim_0_height"].value == 1280 and boxes["dim_1_width"].value == 1280
    at.switch_page("views/graph.py").run()                  # the Graph page reads the same stored values
    assert at.session_state["onnx_studio_dims"] == {"height": 1280, "width": 1280}
    _pick_model(at, first)
    at.switch_page("views/overview.py").run()
    assert at.session_state["onnx_studio_dims"] == {"height": 300, "width": 300}
    assert api.get_settings(pid, first)["dims"] == {"height": 300, "width": 300}
    assert api.get_settings(pid, model_b.id).get("dims") in (None, {"height": 1280, "width": 1280})


def test_the_same_file_twice_opens_the_model_it_already_is(app):
    """R63: opening (or uploading) a file the project already holds makes no duplicate model: the page
    says "same as m1 v0" and that model is open."""
    at = open_sample(app().run(), "cnn_unfused")
    open_sample(at, "mobilenet_like")
    open_sample(at, "cnn_unfused")
    pid = at.session_state["onnx_studio_project"]
    assert [m.name for m in api.project_models(pid)] == ["cnn_unfused", "mobilenet_like"]
    assert at.session_state["onnx_studio_model"] == "m1"
    assert any("same as m1" in i.value.replace("\\", "") for i in at.info), [i.value for i in at.info]


@pytest.mark.slow
def test_edit_banner_stays_on_the_version_it_made(app):
    """The "Saved as version v1 ... Undo / See it in the diff" banner of an edit on one model is not
    shown on another model's Graph page (nor its Undo button), and is back on the edited version."""
    from tests.ui.test_graph_edit import KEY, _apply, _node_id

    cnn = SAMPLES / "cnn_unfused.onnx"
    at = open_sample(app().run(), "cnn_unfused")
    first = at.session_state["onnx_studio_model"]
    at.switch_page("views/graph.py").run()
    at.session_state["selected_node"] = _node_id(cnn, "/relu/Relu")
    at.run()
    at.radio(key=f"{KEY}_edit_action").set_value("Insert after").run()
    _apply(at)
    banner = [s.value for s in at.success if s.value.startswith("Saved as version v1")]
    assert banner and "graph_edit_undo" in [b.key for b in at.button]

    at.switch_page("views/overview.py").run()
    open_sample(at, "mobilenet_like")
    at.switch_page("views/graph.py").run()
    assert not at.exception, at.exception
    assert not [s.value for s in at.success if s.value.startswith("Saved as version")]
    assert "graph_edit_undo" not in [b.key for b in at.button]
    _pick_model(at, first)
    at.switch_page("views/graph.py").run()
    assert at.session_state["onnx_studio_version"] in (None, "v1")     # the newest version: the edit's
    assert [s.value for s in at.success if s.value.startswith("Saved as version v1")] == banner


def test_kv_budget_length_belongs_to_the_decoder(app):
    """The KV budget's length and batch start from the open decoder (llama_genai: context 96), and the next
    decoder opened (gpt2_decoder_with_past) starts from its own, never "length 96 is beyond the model's
    context" carried over."""
    at = open_sample(app().run(), "llama_genai")
    assert at.number_input(key="kv_length").value == 96
    at.number_input(key="kv_batch").set_value(3).run()
    open_sample(at, "gpt2_decoder_with_past")
    at.run()
    context = {m.label: m.value for m in at.metric}["Context"]
    assert at.number_input(key="kv_length").value == int(context) != 96
    assert at.number_input(key="kv_batch").value == 1
    assert not [w.value for w in at.warning if "beyond the model's context" in w.value]


def test_profile_versions_follow_the_model_picked_on_the_page(app):
    """Another model picked in the sidebar while the Profile page is open: its versions are the ones picked
    (the page's default: the new model's original), not the last model's, whose file the page's command
    named (corpus oww_melspectrogram then romanizer_ar_decoder: `onnx-studio profile oww_melspectrogram.onnx`
    under the romanizer's 'No profile for this model')."""
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    pid = at.session_state["onnx_studio_project"]
    first = at.session_state["onnx_studio_model"]
    at.switch_page("views/profile.py").run()
    assert at.multiselect(key="profile_versions").value == [f"{first}:v0"]
    second, _ = api.add_model(pid, SAMPLES / "mobilenet_like.onnx")
    _pick_model(at.run(), second.id)
    assert at.multiselect(key="profile_versions").value == [f"{second.id}:v0"]     # before: [m1:v0]
    (hint,) = [c.value for c in at.code if c.value.startswith("onnx-studio profile")]
    assert hint.startswith("onnx-studio profile mobilenet_like.onnx "), hint
