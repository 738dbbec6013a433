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
