"""The Overview page's Memory plan section (AppTest): the plan of a two-branch model by hand, the
chart with its peak, the tensors at the peak, ORT's measurement, the overlay handed to the Graph page,
the reorder what-if; and a decoder's KV cache at the past length set in the dims."""

from __future__ import annotations

import onnx
import pytest

from sample_models.catalog import path_of
from tests.conftest import metrics
from tests.memory_models import BIG, two_branch


def _texts(items) -> list[str]:
    return [x.value.replace("\\", "") for x in items]


@pytest.mark.slow
def test_memory_plan_section(app, tmp_path):
    path = tmp_path / "branches.onnx"
    onnx.save(two_branch(), str(path))
    at = app(str(path)).run(timeout=120)
    assert not at.exception
    assert "Predicted peak" not in metrics(at)                 # nothing is planned before the click
    at.button(key="memory_plan_run").click().run(timeout=120)
    assert not at.exception, at.exception
    m = metrics(at)
    assert m["Predicted peak"] == "384.0 KiB" and m["Arena (best fit)"] == "400.0 KiB" and m["Peak at step"] == "6 / 8"
    peak = next(d.value for d in at.dataframe if "tensor" in d.value.columns)
    assert list(peak["tensor"]) == ["p3", "q1", "q2"] and list(peak["bytes"]) == [BIG] * 3
    measured = next(d.value for d in at.dataframe if "measured" in d.value.columns)
    # one row per engine: ORT as users run it (its optimized graph: NCHWc Convs here, whose block varies
    # between ORT sessions on this code-built model), OpenVINO CPU's workspace and ORT with its optimizations
    # off, the last two the 400 KiB arena on this model
    assert list(measured["engine"]) == ["onnxruntime", "openvino", "onnxruntime (optimizations off)"]
    assert list(measured["measured"])[1:] == ["400.0 KiB"] * 2 and list(measured["error %"])[1:] == [0.0, 0.0]
    charts = [c for c in at.get("plotly_chart")]
    assert any("Live memory over the schedule" in c.proto.spec for c in charts)
    sha = next(iter(at.session_state["onnx_studio_overlay_data"]))
    assert at.session_state["onnx_studio_overlay_data"][sha]["node_memory"]["q2"] == 3 * BIG
    at.button(key="memory_reorder_run").click().run(timeout=180)
    assert not at.exception, at.exception
    assert any("predicted peak 384.0 KiB → 288.0 KiB" in s for s in _texts(at.success))


@pytest.mark.slow
def test_decoder_kv_cache_at_the_past_length_of_the_dims(app):
    at = app(str(path_of("llama_optimum"))).run(timeout=120)
    assert not at.exception
    box = next(n for n in at.number_input if n.label == "past_sequence_length")
    box.set_value(64).run(timeout=120)
    at.checkbox(key="memory_measure").uncheck().run(timeout=120)
    at.button(key="memory_plan_run").click().run(timeout=120)
    assert not at.exception, at.exception
    # 3 layers x (key, value) x [1, 2 heads, 64, 8] float32, by hand
    assert metrics(at)["KV cache (past)"] == "24.0 KiB"
    assert any("6 past inputs at past_sequence_length=64" in c for c in _texts(at.caption))
