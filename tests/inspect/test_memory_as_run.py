"""The memory plan of ONNX Runtime as users run it (issue 32 item 4, R62): default session options
(ORT_ENABLE_ALL), planned over the graph ORT itself optimized, against ORT's block at those options, on
REAL corpus models; the optimizations-off plan kept as a second, labelled view; and where the plan misses,
the report names the ops ORT changed and the tensors at the plan's peak.

Oracle: ORT's own memory-pattern block, read by the allocation shim in a child process
(``measure_ort_activations(optimized=True)``: plain onnxruntime with default options, arena off so the
block is one allocation). Before this change the studio had no plan of ORT's optimized graph: its only
ORT figure was the optimizations-off run (nudenet at 640: 25.0 MiB planned vs 22.3 MiB at default options).
"""

from __future__ import annotations

import functools
import json

import pytest

from studio import api
from studio.cli import main
from studio.inspect import memory_plan as mp
from studio.inspect.memory_measure import measure_ort_activations
from studio.inspect.memory_report import ORT_OFF_ENGINE, ort_engine_plan
from studio.inspect.ort_optimized import optimized_plan
from tests.corpus import corpus_feeds, corpus_memory_report, corpus_model

# Real corpus models the plan was developed on (the kept-aside ones are in bench_memory_plan's table).
AS_RUN = ["nudenet_320n", "minilm_l6_v2_int8", "rapidocr_ppocrv4_det", "magika_standard_v3_3", "ddddocr_common_det",
          "onnx_light_resnet50", "onnx_light_densenet121", "silero_vad_16k_sequence"]


@functools.cache
def orts_block(name: str) -> int:
    """The oracle: ORT's memory-pattern block at default options on the corpus model's inputs (a child process).
    The sweep and the resnet50 test below read the same figure: measured once per worker."""
    return measure_ort_activations(corpus_model(name), feeds=corpus_feeds(name), optimized=True).pattern_bytes


@pytest.mark.slow
@pytest.mark.parametrize("name", AS_RUN)
def test_plan_over_orts_graph_is_within_15_percent_of_orts_block_at_default_options(name):
    path, feeds = corpus_model(name), corpus_feeds(name)
    plan, og, unknown = optimized_plan(api.load(path), feeds)
    measured = orts_block(name)
    assert unknown == 0 and measured > 0
    assert abs(plan.arena_bytes - measured) <= 0.15 * measured, (name, plan.arena_bytes, measured)
    assert og.nodes <= og.source_nodes + 60          # ORT's graph, not the file's (fused, maybe reordered)


def test_orts_graph_is_the_one_it_runs_and_the_off_view_stays_labelled():
    """resnet50 (real, the onnx wheel's light zoo model): ORT fuses Conv+BatchNorm+Add+Relu into NCHWc Convs
    whose Sum input is computed in place; the plan over that graph equals ORT's block at default options,
    and the optimizations-off plan equals the off run, each labelled apart."""
    name = "onnx_light_resnet50"
    h, feeds = api.load(corpus_model(name)), corpus_feeds(name)
    e = ort_engine_plan(h, feeds)
    assert e.error is None and e.plan is not None
    changed = {op: (a, b) for op, a, b in e.op_changes}
    assert changed["com.microsoft.nchwc::Conv"][0] == 0 and changed["com.microsoft.nchwc::Conv"][1] > 40
    assert changed["BatchNormalization"][1] == 0 and changed["Conv"][1] == 0
    measured = orts_block(name)
    assert e.plan.arena_bytes == measured
    r = corpus_memory_report(name)          # api.memory_plan(h, measure=True), shared with test_memory_ov_compiled
    assert [m.engine for m in r.measured] == ["onnxruntime", "openvino", ORT_OFF_ENGINE]
    default, _, off = r.measured
    assert "ORT_ENABLE_ALL" in default.what and "optimizations off" in off.what
    assert default.predicted_bytes == r.engine_plans[0].plan.arena_bytes
    assert off.error is None and off.measured_bytes == off.predicted_bytes   # the off plan: exact here too
    assert default.predicted_bytes != off.predicted_bytes       # two views, two graphs


def test_a_miss_names_the_ops_orts_graph_changed_and_the_tensors_at_the_peak(monkeypatch):
    """With the fused Conv's in-place rule taken away, the plan over resnet50's optimized graph is far off
    ORT's block: the report's note says by how much, which ops ORT changed and what sits at the peak."""
    monkeypatch.setattr(mp, "INPLACE_INPUT", {})
    h = api.load(corpus_model("onnx_light_resnet50"))
    r = api.memory_plan(h, measure=True)
    default = r.measured[0]
    assert default.relative_error is not None and default.relative_error > 0.15
    note = next(n for n in r.notes if "off ORT's block" in n)
    assert "com.microsoft.nchwc::Conv 0->" in note and "at the plan's peak" in note
    peak = r.engine_plans[0].plan.peak_tensors[0][0]
    assert peak in note


def test_memory_json_and_text_carry_the_as_run_view(capsys):
    path = corpus_model("magika_standard_v3_3")
    assert main(["memory", str(path), "--json", "--no-measure"]) == 0
    d = json.loads(capsys.readouterr().out)
    e = next(e for e in d["engine_plans"] if e["engine"] == "onnxruntime")
    assert [x["engine"] for x in d["engine_plans"]] == ["onnxruntime", "openvino"]
    assert e["engine"] == "onnxruntime" and e["error"] is None and e["arena_bytes"] > 0
    assert e["nodes"] > 0 and e["source_nodes"] == 95
    assert main(["memory", str(path), "--no-measure"]) == 0
    out = capsys.readouterr().out
    assert "as run     onnxruntime (ORT_ENABLE_ALL, its optimized graph of" in out
    assert "compiled   as compiled by OpenVINO " in out                  # the plan of OpenVINO's own graph
    assert main(["memory", str(path), "--no-measure", "--no-engine-graph"]) == 0
    assert "as run" not in capsys.readouterr().out
