"""The Data page (AppTest): add the sample photos to the project, preview them as the model
gets them, evaluate on OpenVINO against a top-1 target, delete after confirmation."""

from __future__ import annotations

from studio import api
from tests.conftest import open_sample, sample_with_photos, table_with


def test_data_page_add_preview_evaluate_delete(app):
    at = app().run()
    open_sample(at, "image_classifier")
    assert not at.exception, at.exception
    at.switch_page("views/data.py").run()
    assert not at.exception, at.exception
    at.button(key="data_add_photos").click().run()
    assert not at.exception, at.exception
    pid = at.session_state["onnx_studio_project"]
    (row,) = api.project_datasets(pid)
    assert row.name == "sample-photos"
    table = at.dataframe[0].value
    assert list(table["samples"]) == [12] and list(table["preprocessing"]) == ["imagenet"]
    assert any("float32[1, 3, 64, 64]" in c.value.replace("\\", "") for c in at.caption)
    at.selectbox(key="data_engine").set_value("OpenVINO").run()
    assert at.selectbox(key="data_metric").value == "top1-agreement"       # only targets that apply are offered
    assert at.number_input(key="data_value_top1-agreement").value == 0.99
    at.button(key="data_eval").click().run()
    assert not at.exception, at.exception
    assert any("met" in s.value for s in at.success)
    metrics = table_with(at, "metric")
    assert "top1-agreement" in set(metrics["metric"])
    at.button(key="data_delete").click().run()
    at.button(key="data_delete_yes").click().run()
    assert api.project_datasets(pid) == []


def test_verify_and_precision_pick_a_dataset(app):
    at, _ = sample_with_photos(app, "image_classifier")
    at.switch_page("views/verify.py").run()
    assert not at.exception, at.exception
    at.radio(key="verify_inputs_kind").set_value("Dataset").run()
    assert at.selectbox(key="verify_metric").value == "top1-agreement"
    at.button(key="verify_run").click().run()
    assert not at.exception, at.exception
    assert any("top1-agreement>=0.99: met" in s.value.replace("\\", "") for s in at.success), [s.value for s in at.success]
    at.switch_page("views/precision.py").run()
    at.radio(key="precision_calib_kind").set_value("Dataset").run()
    assert at.selectbox(key="precision_metric").value == "top1-agreement"


def _caffe_ranges(ds, n=4):
    """Per-channel (min, max) of the first samples by hand: PIL centre crop 96 -> 73 -> 64, BGR minus mean."""
    import numpy as np
    from PIL import Image

    mean = np.array([103.939, 116.779, 123.68], np.float32)
    out = []
    for ref in ds.samples[:n]:
        im = Image.open(ds.folder / ref.file).convert("RGB").resize((73, 73), Image.BILINEAR).crop((4, 4, 68, 68))
        x = np.asarray(im, np.float32)[..., ::-1] - mean
        out.append({ch: (float(x[..., i].min()), float(x[..., i].max())) for i, ch in enumerate("BGR")})
    return out


def _preview(at):
    return table_with(at, "channel")


def _caffe_photos_on_the_data_page(app):
    """The caffe sample open, its photos added on the Data page with the imagenet preset; the AppTest,
    the project id and the dataset's row."""
    at = open_sample(app().run(), "caffe_classifier")
    at.switch_page("views/data.py").run()
    at.selectbox(key="data_preset").set_value("imagenet").run()
    at.button(key="data_add_photos").click().run()
    assert not at.exception, at.exception
    pid = at.session_state["onnx_studio_project"]
    (row,) = api.project_datasets(pid)
    return at, pid, row


def test_data_page_caffe_recipe_entered_field_by_field_saved_and_previewed(app):
    import pytest

    at, pid, row = _caffe_photos_on_the_data_page(app)
    assert list(at.dataframe[0].value["preprocessing"]) == ["imagenet"]
    table = _preview(at)                      # ImageNet normalization: about -2.1..2.6
    assert table["min"].min() > -2.2 and table["max"].max() < 2.7 and list(table["channel"][:3]) == ["R", "G", "B"]
    assert any("Caffe-style: BGR pixels 0–255 minus that mean" in c.value.replace("\\", "") for c in at.caption)

    key = f"_{row.id}"
    at.text_input(key="rcp_scale" + key).set_value("abc").run()
    assert any("scale must be a positive number" in e.value.replace("\\", "") for e in at.error)
    for field, value in (("scale", "1"), ("mean", "103.939,116.779,123.68"), ("std", "1,1,1")):
        at.text_input(key=f"rcp_{field}{key}").set_value(value).run()
    at.selectbox(key="rcp_color" + key).set_value("BGR").run()
    at.selectbox(key="rcp_layout" + key).set_value("NHWC").run()
    assert not at.exception, at.exception
    assert any("Unsaved changes" in c.value for c in at.caption)
    assert api.dataset(pid, row.id).recipe.preset == "imagenet"         # not saved yet
    at.button(key="rcp_save" + key).click().run()
    assert not at.exception, at.exception
    saved = api.dataset(pid, row.id)
    assert (saved.recipe.color, saved.recipe.scale, saved.recipe.mean, saved.recipe.std, saved.recipe.layout) == (
        "BGR", 1.0, (103.939, 116.779, 123.68), (1.0, 1.0, 1.0), "NHWC")
    assert saved.recipe_reason == "set on the Data page"
    table = _preview(at)                      # now about -123..151, channels named in the order fed
    assert list(table["channel"][:3]) == ["B", "G", "R"]
    for i, expected in enumerate(_caffe_ranges(saved)):
        rows = table[table["sample"] == saved.samples[i].index]
        for ch, (lo, hi) in expected.items():
            r = rows[rows["channel"] == ch].iloc[0]
            assert (r["min"], r["max"]) == (pytest.approx(lo, abs=1e-3), pytest.approx(hi, abs=1e-3))
    assert table["min"].min() < -100 and table["max"].max() > 100


def test_data_page_uses_the_models_suggestion(app):
    at, pid, row = _caffe_photos_on_the_data_page(app)
    at.button(key=f"rcp_suggest_{row.id}").click().run()
    assert at.selectbox(key=f"rcp_color_{row.id}").value == "BGR"
    at.button(key=f"rcp_save_{row.id}").click().run()
    assert not at.exception, at.exception
    suggested, _reason = api.suggest_preprocessing(api.load("sample_models/caffe_classifier.onnx"))
    saved = api.dataset(pid, row.id).recipe
    assert {k: v for k, v in saved.to_dict().items() if k != "preset"} == \
        {k: v for k, v in suggested.to_dict().items() if k != "preset"}
