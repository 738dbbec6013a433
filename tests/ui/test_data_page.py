"""The Data page (AppTest): add the sample photos to the project, preview them as the model
gets them, evaluate on OpenVINO against a top-1 target, delete after confirmation."""

from __future__ import annotations

from studio import api


def test_data_page_add_preview_evaluate_delete(app):
    at = app().run()
    at.selectbox(key="sample_pick").set_value("image_classifier").run()
    at.button(key="open_sample").click().run()
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
    at.text_input(key="data_target").set_value("top1-agreement>=0.99").run()
    at.button(key="data_eval").click().run()
    assert not at.exception, at.exception
    assert any("met" in s.value for s in at.success)
    metrics = at.dataframe[1].value
    assert "top1-agreement" in set(metrics["metric"])
    at.button(key="data_delete").click().run()
    at.button(key="data_delete_yes").click().run()
    assert api.project_datasets(pid) == []


def test_verify_and_precision_pick_a_dataset(app):
    at = app().run()
    at.selectbox(key="sample_pick").set_value("image_classifier").run()
    at.button(key="open_sample").click().run()
    pid = at.session_state["onnx_studio_project"]
    api.add_dataset(pid, api.sample_photos_folder(), name="photos", model=None)
    at.switch_page("views/verify.py").run()
    assert not at.exception, at.exception
    at.radio(key="verify_inputs_kind").set_value("Dataset").run()
    at.text_input(key="verify_target").set_value("top1-agreement>=0.99").run()
    at.button(key="verify_run").click().run()
    assert not at.exception, at.exception
    assert any("top1-agreement>=0.99: met" in s.value.replace("\\", "") for s in at.success), [s.value for s in at.success]
    at.switch_page("views/precision.py").run()
    at.radio(key="precision_calib_kind").set_value("Dataset").run()
    assert at.text_input(key="precision_task_target").value == "top1-agreement>=0.99"
