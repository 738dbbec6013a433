"""Export page through AppTest: export the CNN sample, see per-target verdicts, the
artifacts table, download buttons and the equivalent CLI command; failures first."""

from __future__ import annotations

from tests.conftest import SAMPLES, current_model, table_with


def test_export_all_from_the_page(app):
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/export.py").run()
    assert not at.exception
    assert at.multiselect(key="exp_targets").value == ["onnxruntime", "openvino", "tensorrt", "triton"]
    assert any("onnx-studio export cnn_unfused.onnx --target all" in c.value for c in at.code)
    at.text_input(key="exp_shape_0").set_value("1x3x32x32:2x3x32x32:4x3x32x32").run()
    at.button(key="exp_run").click().run()
    assert not at.exception, at.exception
    assert not at.error
    assert any("verified" in s.value for s in at.success)
    targets = table_with(at, "target")
    assert list(targets["target"]) == ["onnxruntime", "openvino", "tensorrt", "triton"]
    assert "not verified" in targets[targets["target"] == "tensorrt"].iloc[0]["status"]
    arts = table_with(at, "file")
    assert "onnxruntime/model.onnx" in set(arts["file"]) and "openvino/model.xml" in set(arts["file"])
    labels = [b.label for b in at.get("download_button")]
    assert any(label.startswith("Download the bundle") for label in labels)
    assert "Download the report (HTML)" in labels and "onnxruntime/model.onnx" in labels
    assert any("--shapes input=1x3x32x32:2x3x32x32:4x3x32x32" in c.value for c in at.code)
    result = at.session_state["onnx_studio_results"]["onnx_studio_export_result"][1]["result"]
    assert result.manifest["verification"]["input_shapes"] == {"input": [2, 3, 32, 32]}
    # The bundle lives in this session's workspace.
    ws = current_model(at)
    assert str(result.bundle).startswith(str(ws.root))


def test_failures_are_shown_first(app):
    at = app(str(SAMPLES / "gridsample_5d.onnx")).run()
    at.switch_page("views/export.py").run()
    at.multiselect(key="exp_targets").set_value(["onnxruntime", "openvino"]).run()
    at.button(key="exp_run").click().run()
    assert not at.exception
    assert at.error and "openvino" in at.error[0].value and "GridSample" in at.error[0].value
    assert not at.success


def test_bad_shape_text_is_a_one_line_error(app):
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/export.py").run()
    at.text_input(key="exp_shape_0").set_value("1x3x32x32:big:4x3x32x32").run()
    assert not at.exception
    assert any("not a shape" in e.value for e in at.error)


def test_both_openvino_irs_from_the_page(app):
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/export.py").run()
    at.multiselect(key="exp_targets").set_value(["openvino"]).run()
    at.multiselect(key="exp_ov_irs_fp32").set_value(["fp32", "fp16"]).run()
    assert any("--ov-precisions fp32,fp16" in c.value for c in at.code)
    at.button(key="exp_run").click().run()
    assert not at.exception, at.exception
    arts = table_with(at, "file")
    assert {"openvino/model.xml", "openvino/model_fp16.xml"} <= set(arts["file"])
