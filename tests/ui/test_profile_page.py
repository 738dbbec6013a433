"""The Profile page through streamlit.testing.v1.AppTest."""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLES, current_model
from tests.engine_facts import gpu_stack_here


def _profile_page(at):
    at.switch_page("views/profile.py").run()
    assert not at.exception
    at.number_input(key="profile_iterations").set_value(10)
    at.number_input(key="profile_warmup").set_value(1)
    at.number_input(key="profile_rounds").set_value(3)
    return at.run()


def _two_versions_per_op(app, engine: str):
    """The CNN and a second version (mobilenet_like) profiled per op on ``engine`` from the page."""
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    ws = current_model(at)
    ws.add_file(SAMPLES / "mobilenet_like.onnx", label="second")
    at = _profile_page(at)
    at.multiselect(key="profile_versions").set_value(["m1:v0", "m1:v1"])
    at.multiselect(key="profile_engines").set_value([engine])
    at.checkbox(key="profile_per_op").check()
    at.run()
    at.button(key="profile_run").click().run()
    assert not at.exception
    return at


def _charts(at) -> str:
    return " ".join(str(c.proto.spec) for c in at.get("plotly_chart"))


def test_page_without_a_model_says_what_to_do(app):
    at = app().run()
    at.switch_page("views/profile.py").run()
    assert not at.exception
    assert any("Overview page" in i.value for i in at.info)


def test_two_engines_one_version(app):
    at = _profile_page(app(str(SAMPLES / "cnn_unfused.onnx")))
    assert at.multiselect(key="profile_versions").value == ["m1:v0"]
    assert at.multiselect(key="profile_engines").value == ["ort", "ov"]
    at.button(key="profile_run").click().run()
    assert not at.exception
    stats = at.dataframe[0].value
    assert list(stats["variant"]) == ["t0-ort", "t0-ov"] and (stats["p50 ms"] > 0).all()
    ratios = at.dataframe[1].value
    assert list(ratios["variant"]) == ["t0-ov"] and ratios["95% CI low"].iloc[0] <= ratios["ratio (p50)"].iloc[0]
    charts = _charts(at)
    assert "Latency per inference" in charts and "Cold start" in charts and "p50 t0-ort" in charts
    hint = " ".join(c.value for c in at.code)
    assert "onnx-studio profile cnn_unfused.onnx --engine ort,ov --iterations 10" in hint
    assert len(at.dataframe) == 3              # latency, ratios, cold start
    assert list(at.dataframe[2].value["variant"]) == ["t0-ort", "t0-ov"]


def test_two_versions_per_op_and_trace_download(app):
    at = _two_versions_per_op(app, "ort")
    stats = at.dataframe[0].value
    assert list(stats["variant"]) == ["t0-ort", "t1-ort"]
    assert list(at.dataframe[1].value["variant"]) == ["t1-ort"]
    charts = _charts(at)
    assert "Top" in charts and "Time by op type" in charts
    assert any(m.label == "mapped to ONNX nodes" for m in at.metric)
    labels = [b.proto.label for b in at.get("download_button")]
    assert any("trace" in label for label in labels) and any("JSON" in label for label in labels)


def test_unavailable_engine_is_an_error_not_a_number(app):
    at = _profile_page(app(str(SAMPLES / "cnn_unfused.onnx")))
    at.multiselect(key="profile_engines").set_value(["ort", "trt"])
    at.run()
    at.button(key="profile_run").click().run()
    assert not at.exception
    stats = at.dataframe[0].value
    trt = stats[stats["variant"] == "t0-trt"].iloc[0]
    if gpu_stack_here():  # pragma: no cover - a GPU machine
        pytest.skip(f"{gpu_stack_here()} is installed here: this test is of a CPU-only machine")
    assert "not available here" in trt["status"] and trt["p50 ms"] != trt["p50 ms"]   # NaN: no number
    assert any("not available here" in e.value for e in at.error)


def test_bad_sweep_values_are_reported(app):
    at = _profile_page(app(str(SAMPLES / "cnn_unfused.onnx")))
    at.text_input(key="profile_threads").input("1,x").run()
    assert not at.exception
    assert any("integers like 1,2,4" in e.value for e in at.error)


def test_per_op_time_feeds_the_graph_overlay(app):
    at = _two_versions_per_op(app, "ov")
    at.selectbox(key="profile_ops_variant").set_value("t0-ov").run()
    at.button(key="profile_to_graph").click().run()
    assert not at.exception
    v0_sha = current_model(at).version("v0").sha256
    times = at.session_state["onnx_studio_overlay_data"][v0_sha]["node_times"]
    assert "/conv1/Conv" in times and all(v >= 0 for v in times.values())
    assert at.session_state["onnx_studio_version"] == "v0"     # the profiled version is the one shown
    at.switch_page("views/graph.py").run()
    assert not at.exception
    assert "time share" in at.selectbox(key="graph_overlay").options


def test_inputs_picker_random_npz_images(app):
    """The Profile page picks its inputs like the Verify/Precision pages: random, an .npz or images;
    a chosen file kind waits for its upload."""
    at = _profile_page(app(str(SAMPLES / "cnn_unfused.onnx")))
    kind = at.radio(key="profile_inputs_kind")
    assert kind.options == ["Random (seeded)", "Input values (.npz)", "Images (the first one is used)"]
    assert not at.button(key="profile_run").disabled
    kind.set_value("Input values (.npz)").run()
    assert not at.exception and at.button(key="profile_run").disabled
    at.radio(key="profile_inputs_kind").set_value("Images (the first one is used)").run()
    assert not at.exception and at.button(key="profile_run").disabled
