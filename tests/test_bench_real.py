"""make bench-real's harness: a failing or hanging cell is a row with its one-line reason, kept-aside models
are totalled apart, and the inspect oracle reads real tensor shapes from plain ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from benchmarks import bench_real
from tests.corpus import corpus_names


def test_a_failing_cell_is_one_line_not_a_crash():
    r = bench_real.run_cell("tasks", "no_such_model", timeout_s=300)
    assert "error" in r and "\n" not in r["error"] and "no_such_model" in r["error"]


def test_a_cell_over_its_limit_is_stopped_and_named():
    r = bench_real.run_cell("inspect", corpus_names(kept_aside=None)[0], timeout_s=0.01)
    assert r["error"] == "over the 0 s limit"


def test_kept_aside_models_have_their_own_totals_line(capsys):
    rows = [("a", False, {"outputs": [{"output": "y", "fact": "ctc", "inferred": "sequence", "right": True}]}),
            ("b", False, {"error": "exit 1: boom"}),
            ("c", True, {"outputs": [{"output": "y", "fact": "logits", "inferred": "regression", "right": False}]})]
    totals = bench_real.report_tasks(rows)["totals"]
    assert totals == [["tuned on", 2, 1, "1/1"], ["kept aside", 1, 1, "0/1"]]
    out = capsys.readouterr().out
    assert "c (kept aside)" in out and "exit 1: boom" in out


def test_the_strength_table_can_run_the_kept_aside_part_alone():
    """``bench_optimizer_strength --kept-aside``: the held-out figure after rule changes, exactly the models
    the manifest (written by hand) marks kept aside."""
    from benchmarks.bench_optimizer_strength import _corpus_models

    aside = {name for name, _, kept, _ in _corpus_models("", big=True, aside_only=True)}
    assert aside and aside == set(corpus_names(kept_aside=True))
    assert {name for name, _, _, _ in _corpus_models("", big=True)} >= aside | set(corpus_names(kept_aside=False))


def test_the_inspect_oracle_is_plain_onnx_runtime(tmp_path):
    """Every node output's real shape, worked out by hand for a Conv (3x3, stride 2, pad 1) and a Flatten."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], np.zeros(108, np.float32))
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
         helper.make_node("Flatten", ["c"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    shapes = bench_real.ort_value_shapes(path, {"x": np.zeros((2, 3, 9, 7), np.float32)})
    assert shapes == {"y": (2, 4 * 5 * 4), "c": (2, 4, 5, 4)}
    assert bench_real.manifest_dims(path, {"x": np.zeros((2, 3, 9, 7), np.float32)}) == {"n": 2, "h": 9, "w": 7}


def _opt_row(**kw):
    from benchmarks.bench_optimizer_strength import CorpusRow

    row = CorpusRow("m", False)
    row.nodes = {"raw": 242, "onnxsim": 227, "onnxslim": 241, "studio": 241}
    row.correct = {"raw": True, "onnxsim": True, "onnxslim": True, "studio": True}
    row.bytes = {"raw": 1000, "onnxsim": 1000, "onnxslim": 1000, "studio": 1000}
    row.ort_nodes = (218, 217)
    row.ort_nodes_peer = {"onnxsim": 281, "onnxslim": 217}
    for k, v in kw.items():
        setattr(row, k, v)
    return row


def test_the_optimizer_is_judged_by_what_the_engine_runs():
    """PP-OCRv6 small det's measured figures (real corpus): onnxsim's file has 14 fewer nodes than the studio's,
    but folding GELU's *0.5 into the Convs costs ORT its 13 Gelu fusions, so ORT runs 281 nodes for it vs 217
    for the studio's. By nodes the studio is above; by what the engine runs it is at onnxslim's level."""
    from benchmarks.bench_optimizer_strength import best_peer, engine_verdict

    row = _opt_row()
    assert best_peer(row) == 227                                   # the raw count alone says "above"
    assert engine_verdict(row) == ("at", "onnxslim")               # ORT runs (217, 241) vs (217, 241)
    assert engine_verdict(_opt_row(ort_nodes=(218, 216))) == ("below", "onnxslim")
    # A file with fewer nodes that makes ORT run more (a fusion lost) is above.
    fewer = _opt_row(nodes={"raw": 242, "onnxsim": 227, "onnxslim": 241, "studio": 200}, ort_nodes=(218, 230))
    assert engine_verdict(fewer) == ("above", "onnxslim")
    # A measured slowdown against the judged peer (both interleaved runs' CI above 1) is above whatever the counts.
    assert engine_verdict(_opt_row(ort_nodes=(218, 200), slower_than_peer={"onnxslim": True}))[0] == "above"
    # A wrong studio result is never at or below.
    assert engine_verdict(_opt_row(correct={"raw": True, "onnxsim": True, "onnxslim": True, "studio": False})) \
        == ("above", None)


def test_the_optimizer_table_prints_both_verdicts_and_the_rule(capsys):
    rows = [("m", False, {"nodes": {"raw": 242, "onnxsim": 227, "onnxslim": 241, "studio": 241},
                          "correct": {"raw": True, "onnxsim": True, "onnxslim": True, "studio": True},
                          "best_peer": 227, "ort_nodes": [218, 217], "ort_nodes_peer": {"onnxsim": 281, "onnxslim": 217},
                          "latency_vs_peer": {"onnxslim": [1.0, 0.9, 1.1]}, "slower_than_peer": {"onnxslim": False},
                          "verdict": "at", "verdict_peer": "onnxslim", "latency_ratio": 1.0})]
    summary = bench_real.report_optimizer(rows)
    assert summary["totals"][0][4:8] == ["0/1", "0/1", "1/1", "0/1"]     # by nodes: above; by engine: at
    out = capsys.readouterr().out
    assert "217 / 217 (onnxslim)" in out and "rule: judged by what the engine runs" in out


def test_slower_needs_both_runs_past_the_a_a_control():
    """oww_alexa (real corpus, 7 nodes): the studio's result is byte-identical to the raw file, yet studio/raw
    measured 1.03 [1.01-1.02+] in both interleaved runs -- two ORT sessions of one file differ by that much.
    The raw file's second session (the A/A control) sets the bar; a real slowdown clears it in both runs."""
    from benchmarks.bench_optimizer_strength import measured_slower

    identical = [(1.03, 1.01, 1.04), (1.02, 1.01, 1.03)]
    aa = [(1.02, 1.00, 1.04), (1.01, 0.99, 1.03)]
    assert not measured_slower(identical, aa)                 # within what one file's two sessions differ by
    assert measured_slower(identical, [(None, None, None)] * 2)   # no control measured: the old bar (1.0)
    real = [(1.20, 1.12, 1.30), (1.18, 1.10, 1.25)]
    assert measured_slower(real, aa)
    assert not measured_slower([real[0], (1.02, 0.98, 1.06)], aa)  # one run only: drift
