"""Verify and Precision pages through AppTest: real engines, real results, the
CLI equivalent shown, errors as one line, results kept across reruns."""

from __future__ import annotations

import numpy as np

from tests.conftest import SAMPLES, current_model


def _cli_code(at) -> str:
    return " ".join(c.value for c in at.code)


def test_verify_two_engines_with_layerwise(app):
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/verify.py").run()
    assert not at.exception
    assert at.selectbox(key="verify_engine").value == "onnxruntime"
    assert at.selectbox(key="verify_engine_b").value == "openvino"
    at.checkbox(key="verify_layerwise").check().run()
    at.button(key="verify_run").click().run()
    assert not at.exception
    assert any(s.value.startswith("PASS") for s in at.success), [e.value for e in at.error]
    outputs = at.dataframe[0].value
    assert list(outputs["output"]) == ["logits"] and outputs["verdict"][0] == "ok"
    assert any("openvino" in c.value.lower() and "f32" in c.value for c in at.caption)
    assert len(at.get("plotly_chart")) == 1                      # the per-layer error chart
    assert "onnx-studio compare" in _cli_code(at) and "--engine-b openvino" in _cli_code(at)
    assert "--layerwise" in _cli_code(at)
    at.run()                                                     # the result survives a rerun
    assert any(s.value.startswith("PASS") for s in at.success)


def test_verify_two_versions_reports_a_difference(app, tmp_path):
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    ws = current_model(at)
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(SAMPLES / "cnn_unfused.onnx"))
    t = next(t for t in m.graph.initializer if len(t.dims) == 4)
    t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * 1.5, t.name))
    v1 = ws.add_model(m, "changed", parent="v0")
    at.session_state["onnx_studio_version"] = v1.id
    at.switch_page("views/verify.py").run()
    at.radio(key="verify_mode").set_value("Two versions").run()
    assert at.selectbox(key="verify_a").value == "v0" and at.selectbox(key="verify_b").value == "v1"
    at.button(key="verify_run").click().run()
    assert not at.exception
    assert any(e.value.startswith("FAIL") for e in at.error)


def test_verify_waits_for_the_chosen_input_file(app):
    """Choosing an .npz and not uploading it must not silently compare on random inputs."""
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/verify.py").run()
    at.radio(key="verify_inputs_kind").set_value("Input values (.npz)").run()
    assert not at.exception
    assert at.button(key="verify_run").disabled
    at.radio(key="verify_inputs_kind").set_value("Random (seeded)").run()
    assert not at.button(key="verify_run").disabled


def test_precision_page_builds_measures_and_saves(app):
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/precision.py").run()
    assert not at.exception
    assert "int8" in at.multiselect(key="precision_variants").value
    at.multiselect(key="precision_variants").set_value(["fp32", "bf16-ov", "int8", "int8-mnn"]).run()
    at.number_input(key="precision_calib_count").set_value(4).run()
    at.number_input(key="precision_budget").set_value(5).run()
    at.button(key="precision_run").click().run()
    assert not at.exception, at.exception
    table = at.dataframe[0].value
    assert list(table["variant"]) == ["fp32", "bf16-ov", "int8", "int8-mnn"]
    # a .mnn is an engine artifact, not a model version: no save button for it
    keys = [b.key for b in at.button]
    assert "precision_save_int8-mnn" not in keys and "precision_save_int8" in keys
    assert (table[""] == "★ recommended").sum() == 1
    assert len(at.get("plotly_chart")) == 1                      # the trade-off chart
    assert "onnx-studio precision" in _cli_code(at) and "--samples 4" in _cli_code(at)
    ws = current_model(at)
    n = len(ws.versions)
    at.button(key="precision_save_int8").click().run()
    assert not at.exception
    assert len(ws.versions) == n + 1
    v = ws.versions[-1]
    assert v.label == "int8" and v.parent == "v0" and v.provenance["source"] == "precision"
    assert v.provenance["pipeline"][0]["name"] == "quantize-int8-static"
    assert np.isfinite(v.provenance["measured"]["cosine"])
