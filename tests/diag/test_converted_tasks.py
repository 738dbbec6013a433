"""The converted engines (MNN, LiteRT) are compared with ONNX Runtime by each output's task: a TopK
detection head by the order-invariant detection comparison (R42, AP50 against ONNX Runtime's
boxes), integer outputs exactly, never a cosine nobody measured (R52)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper, numpy_helper as nh

from diagnostics.converted_check import judge_output
from studio import api
from studio.cli import main
from studio.core.order_free import OrderFree
from studio.data.tasks import OutputTask
from tests.requirements import require_engine


def topk_detector(path, *, side: int = 16, nc: int = 3, k: int = 100, tied: int = 30):
    """A TopK head like an NMS-free detector export: per anchor 4 box values and ``nc`` class scores,
    the ``k`` best anchors as rows [x1, y1, x2, y2, score, class]. ``tied`` anchors get exactly the same
    score (0.999, well inside the top ``k``, none at its cut-off): engines list them in their own order."""
    rng = np.random.default_rng(3)
    c, stride, a = 4 + nc, 64 // side, side * side
    tie = np.zeros((1, a), np.float32)
    tie[0, rng.choice(a, tied, replace=False)] = 0.999
    i64 = lambda name, *v: nh.from_array(np.array(v, np.int64), name)  # noqa: E731
    f32 = lambda name, v: nh.from_array(np.array(v, np.float32), name)  # noqa: E731
    node = helper.make_node
    nodes = [node("Conv", ["images", "w"], ["h"], strides=[stride, stride], name="/head/Conv"),
             node("Reshape", ["h", "shape"], ["flat"], name="/head/Reshape"),
             node("Transpose", ["flat"], ["per_anchor"], perm=[0, 2, 1], name="/head/Transpose"),
             node("Slice", ["per_anchor", "s0", "s4", "ax2"], ["box_raw"], name="/head/box"),
             node("Slice", ["per_anchor", "s4", "sc", "ax2"], ["cls_raw"], name="/head/cls"),
             node("Mul", ["box_raw", "scale"], ["box_s"], name="/head/box_scale"),
             node("Abs", ["box_s"], ["box_p"], name="/head/box_abs"),
             node("Slice", ["box_p", "s0", "s2", "ax2"], ["xy"], name="/head/xy"),
             node("Slice", ["box_p", "s2", "s4", "ax2"], ["wh0"], name="/head/wh"),
             node("Add", ["wh0", "two"], ["wh"], name="/head/wh_min"),
             node("Add", ["xy", "wh"], ["xy2"], name="/head/xy2"),
             node("Concat", ["xy", "xy2"], ["box"], axis=2, name="/head/xyxy"),
             node("Mul", ["cls_raw", "gain"], ["cls_g"], name="/head/gain"),
             node("Sigmoid", ["cls_g"], ["cls"], name="/head/Sigmoid"),
             node("ReduceMax", ["cls"], ["best0"], axes=[2], keepdims=0, name="/post/ReduceMax"),
             node("Min", ["best0", "cap"], ["best1"], name="/post/Cap"),
             node("Max", ["best1", "tie"], ["best"], name="/post/Ties"),
             node("ArgMax", ["cls"], ["cid"], axis=2, keepdims=1, name="/post/ArgMax"),
             node("TopK", ["best", "k"], ["score", "idx"], axis=1, name="/post/TopK"),
             node("Unsqueeze", ["idx", "ax2"], ["idx3"], name="/post/Unsqueeze"),
             node("Tile", ["idx3", "rep4"], ["idx4"], name="/post/Tile"),
             node("GatherElements", ["box", "idx4"], ["boxes_k"], axis=1, name="/post/GatherBoxes"),
             node("GatherElements", ["cid", "idx3"], ["cid_k"], axis=1, name="/post/GatherCls"),
             node("Cast", ["cid_k"], ["cid_f"], to=T.FLOAT, name="/post/Cast"),
             node("Unsqueeze", ["score", "ax2"], ["score3"], name="/post/Unsqueeze2"),
             node("Concat", ["boxes_k", "score3", "cid_f"], ["output0"], axis=2, name="/post/Concat")]
    inits = [nh.from_array(rng.normal(0, 0.5, (c, 3, stride, stride)).astype(np.float32), "w"),
             i64("shape", 1, c, a), i64("s0", 0), i64("s2", 2), i64("s4", 4), i64("sc", c), i64("ax2", 2),
             i64("k", k), i64("rep4", 1, 1, 4), f32("scale", 20.0), f32("two", 2.0), f32("gain", 0.3),
             f32("cap", 0.98), nh.from_array(tie, "tie")]
    g = helper.make_graph(nodes, "topk_detector", [helper.make_tensor_value_info("images", T.FLOAT, [1, 3, 64, 64])],
                          [helper.make_tensor_value_info("output0", T.FLOAT, [1, k, 6])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, path)
    return path


def _rows(rng, n=40):
    xy = rng.uniform(0, 200, (n, 2))
    return np.concatenate([xy, xy + rng.uniform(10, 60, (n, 2)), rng.uniform(0.5, 0.9, (n, 1)),
                           rng.integers(0, 3, (n, 1))], axis=1).astype(np.float32)[None]


DET = OutputTask("output0", "detection", "rows picked by TopK", head="rows")
TOPK = OrderFree("TopK", "/post/TopK")


def test_same_detections_in_another_order_are_no_mismatch_and_moved_boxes_are():
    rng = np.random.default_rng(0)
    ref = _rows(rng)
    permuted = ref[:, rng.permutation(ref.shape[1])]
    ok = judge_output("output0", ref, permuted, DET, TOPK)
    assert ok["problem"] is None and ok["map50"] == pytest.approx(1.0) and ok["mode"].startswith("rows in any order")
    moved = ref.copy()
    moved[0, :12, :4] += 150.0                                     # 12 of 40 boxes elsewhere
    bad = judge_output("output0", ref, moved, DET, TOPK)
    assert bad["problem"] is not None and "AP50" in bad["problem"] and bad["map50"] < 0.8


def test_integer_outputs_are_compared_exactly_without_a_cosine():
    ids = OutputTask("ids", "integer", "int64")
    same = judge_output("ids", np.array([[1, 2, 3]]), np.array([[1, 2, 3]]), ids)
    assert same["problem"] is None and same["cosine"] is None and same["mismatches"] == 0
    off = judge_output("ids", np.array([[1, 2, 3]]), np.array([[1, 2, 4]]), ids)
    assert off["problem"] == "1 of 3 values differ (compared exactly)" and "cosine" not in off["problem"]


@pytest.mark.slow
def test_topk_detector_on_mnn_is_judged_by_the_detection_comparison(tmp_path):
    require_engine("mnn")
    model = topk_detector(tmp_path / "topk_detector.onnx")
    report = api.check(api.load(model), ["mnn"])
    verdict = report.verdict("mnn")
    assert verdict.verdict == "runs", (verdict.summary, [f.message for f in report.findings])
    assert not [f for f in report.findings if f.code == "MNN-MISMATCH"]
    note = next(n for n in report.notes if "judged as" in n)
    assert "output0" in note and "detection, rows in any order, AP50 1.000" in note
    # the mechanism: MNN lists the tied rows in another order than ONNX Runtime (element-wise they differ),
    # and they are the same rows (the oracle: plain onnxruntime, rows compared as sets)
    from studio.accuracy.runs import run_feed_sets
    from studio.core.feeds import make_feeds

    feeds = make_feeds(onnx.load(model), count=1)
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feeds.sets[0])[0][0]
    got = run_feed_sets(model, "mnn", feeds.sets).outputs[0]["output0"][0]
    assert float(np.abs(want - got).max()) > 10.0                    # another order
    from scipy.optimize import linear_sum_assignment

    cost = np.abs(want[:, None, :] - got[None, :, :]).max(axis=2)
    rows, cols = linear_sum_assignment(cost)                          # the best pairing of the rows
    assert float(cost[rows, cols].max()) < 1e-2                       # the same rows


@pytest.mark.slow
def test_check_cli_takes_the_task_and_refuses_an_unknown_output(tmp_path, capsys):
    require_engine("mnn")
    model = topk_detector(tmp_path / "topk_detector.onnx")
    assert main(["check", str(model), "--engines", "mnn", "--task", "boxes=detection"]) == 2
    err = capsys.readouterr().err
    assert "no output 'boxes'; its outputs: output0" in err and err.count("\n") == 1
    assert main(["check", str(model), "--engines", "mnn", "--task", "output0=detection", "--json"]) == 0
    out = capsys.readouterr().out
    assert "judged as detection, rows in any order, AP50 1.000" in out
