"""Tables and figures of a real (small) profile; hostile node names stay text (R28)."""

from __future__ import annotations

import json

import plotly.io as pio
from onnx import TensorProto, helper

from profilers.profile import ProfileOptions
from profilers.variants import EngineSpec
from studio import api
from studio.ui.profile_charts import (cold_rows, cold_start_chart, latency_histogram, memory_timeline, op_bar,
                                      op_treemap, ratio_rows, stats_rows, sweep_chart, sweep_rows)
from tests.conftest import save

EVIL = '<script>alert(1)</script><a href="javascript:alert(1)">x</a>'


def test_every_chart_and_table(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["a"], name=EVIL), helper.make_node("Sigmoid", ["a"], ["y"], name="s")]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 256])]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    handle = api.load(save(model, tmp_path / "evil.onnx"))
    options = ProfileOptions(warmup=1, iterations=10, rounds=2, per_op=True, per_op_runs=2, memory=True,
                             memory_iterations=20, thread_counts=(1,), concurrency=(1, 2), sweep_iterations=3)
    profile = api.profile([("a", handle), ("b", handle)], [EngineSpec("onnxruntime", opt_level="disable")], options,
                          out_dir=tmp_path / "job", pool_key="test-profile-charts")
    assert profile.ok
    assert [r["variant"] for r in stats_rows(profile)] == ["t0-ort", "t1-ort"]
    assert ratio_rows(profile)[0]["variant"] == "t1-ort" and len(cold_rows(profile)) == 2
    rows = sweep_rows(profile)
    assert {(r["variant"], r["sweep"]) for r in rows} >= {("t0-ort", "threads"), ("t1-ort", "concurrency")}
    ops = profile.variants[0].ops
    assert EVIL in ops.per_node_ms                      # the key is the real name, for the graph overlay
    figures = [latency_histogram(profile), cold_start_chart(profile), op_bar(ops), op_treemap(ops),
               memory_timeline(profile), sweep_chart(profile, "threads"), sweep_chart(profile, "concurrency")]
    for fig in figures:
        text = pio.to_json(fig)
        assert "<script>" not in text and "<a href" not in text
    bar = json.loads(pio.to_json(op_bar(ops)))
    assert any("&lt;script&gt;" in label for label in bar["data"][0]["y"])
    hist = json.loads(pio.to_json(latency_histogram(profile)))
    assert len(hist["data"]) == 2 and len(hist["layout"]["shapes"]) == 4    # p50 and p99 per variant
