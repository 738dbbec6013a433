"""R42: comparisons of detection heads (TopK/NMS with near-tied scores), integer and
NaN outputs: order-aware, mismatch-counted, NaN-aware, the mode said per output."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from studio import api
from studio.core.compare import compare_arrays, compare_outputs
from studio.core.feeds import FeedSet
from studio.core.order_free import OrderFree, order_free_outputs
from tests.nontensor_models import near_tied_scores, topk_detector

TOPK = OrderFree("TopK", "topk")


def test_integer_outputs_are_judged_by_mismatch_count_not_max_abs():
    d = compare_arrays("ids", np.array([1, 664, 3, 4]), np.array([1, 0, 3, 4]))
    assert not d.match and d.mode == "exact" and d.mismatches == 1 and d.mismatch_fraction == 0.25
    assert d.max_abs is None and "664" not in d.note and "1 of 4 values differ" in d.note
    b = compare_arrays("mask", np.array([True, False]), np.array([True, True]))
    assert not b.match and b.mode == "exact" and b.mismatches == 1


def test_integer_outputs_stay_exact_when_the_model_is_quantized():
    d = compare_arrays("ids", np.arange(100), np.arange(100), quantized=True)
    assert d.match and d.mode == "exact" and d.cosine is None
    assert not compare_arrays("ids", np.arange(100), np.arange(100)[::-1], quantized=True).match
    one_flip = np.arange(200)
    one_flip[7] = 0                                       # an ArgMax label flipped on a near-tie
    q = compare_arrays("label", np.arange(200), one_flip, quantized=True)
    assert q.match and q.mismatches == 1 and "1 of 200 values differ" in q.note
    assert not compare_arrays("label", np.arange(200), one_flip).match      # fp32 criteria: exact


def test_nan_at_the_same_positions_is_equal_and_elsewhere_is_not():
    ref = np.array([np.nan, 1.0, np.inf, 2.0], np.float32)
    assert compare_arrays("y", ref, ref.copy()).match
    moved = compare_arrays("y", ref, np.array([1.0, np.nan, np.inf, 2.0], np.float32))
    assert not moved.match and moved.mismatches == 2 and "NaN" in moved.note
    # NaN in rows that come back in another order: still matched row for row
    rows = np.array([[np.nan, 1, 2, 3, 0.9], [4, 5, 6, 7, 0.8]], np.float32)
    assert compare_arrays("det", rows, rows[::-1].copy(), order=TOPK).match


def test_rows_from_topk_in_another_order_are_equal_but_other_rows_are_not():
    rng = np.random.default_rng(0)
    det = rng.random((8, 6)).astype(np.float32) * 100
    swapped = det[[1, 0, 2, 3, 4, 5, 7, 6]]
    assert not compare_arrays("det", det, swapped).match          # elementwise: "differs by ~100"
    d = compare_arrays("det", det, swapped, order=TOPK)
    assert d.match and d.mode.startswith("rows in any order (box-like rows matched greedily")
    other = swapped.copy()
    other[3, :4] += 10.0                                          # a box the reference did not find
    assert not compare_arrays("det", det, other, order=TOPK).match
    idx = compare_arrays("idx", np.array([[5, 3, 9]]), np.array([[3, 5, 9]]), order=OrderFree("TopK", "t", -1))
    assert idx.match and idx.mode.startswith("rows in any order (sorted along axis -1")
    assert not compare_arrays("idx", np.array([[5, 3, 9]]), np.array([[3, 5, 8]]),
                              order=OrderFree("TopK", "t", -1)).match


def test_order_free_outputs_are_found_through_gather_and_concat():
    found = order_free_outputs(topk_detector())
    assert set(found) == {"detections", "top_idx", "top_scores"}
    assert found["top_idx"].axis == -1 and found["detections"].axis is None


def _save(tmp_path, name, model) -> str:
    path = tmp_path / name
    onnx.save(model, path)
    return str(path)


def test_two_models_finding_the_same_detections_in_another_order_compare_equal(tmp_path):
    """The candidate's scores differ by 4e-7 (another engine's rounding): boxes 3 and 5 swap places."""
    a = _save(tmp_path, "a.onnx", topk_detector())
    b = _save(tmp_path, "b.onnx", topk_detector(nudge={3: 4e-7}))
    feeds = FeedSet(({"scores": near_tied_scores()},), "near-tied scores")
    result = api.compare(a, b, engine="ort", feeds=feeds)
    assert result.ok, result.summary()
    modes = {k: v.mode for k, v in result.comparison.outputs.items()}
    assert all(m.startswith("rows in any order") and "TopK 'topk'" in m for m in modes.values()), modes
    assert result.to_dict()["comparison"]["outputs"]["top_idx"]["mode"] == modes["top_idx"]


def test_a_real_difference_in_picked_rows_still_fails(tmp_path):
    a = _save(tmp_path, "a.onnx", topk_detector())
    b = _save(tmp_path, "b.onnx", topk_detector(nudge={0: 0.95}))     # box 0 now beats every other
    feeds = FeedSet(({"scores": near_tied_scores()},), "near-tied scores")
    result = api.compare(a, b, engine="ort", feeds=feeds)
    assert not result.ok
    assert result.comparison.outputs["top_idx"].mismatches >= 1


@pytest.mark.parametrize("count", [1])
def test_ort_and_openvino_agree_on_the_detector(tmp_path, count):
    a = _save(tmp_path, "a.onnx", topk_detector())
    feeds = FeedSet(({"scores": near_tied_scores()},), "near-tied scores")
    result = api.compare(a, a, engine="ort", engine_b="openvino", feeds=feeds)
    assert result.ok, result.summary()
    assert "rows in any order" in result.comparison.outputs["detections"].mode


def test_outputs_of_other_models_are_compared_in_order():
    c = compare_outputs({"y": np.array([1.0, 2.0])}, {"y": np.array([2.0, 1.0])})
    assert not c and c.outputs["y"].mode == "tolerance"


def test_nms_outputs_and_rows_gathered_by_them_are_order_free():
    from onnx import TensorProto, helper

    nodes = [helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out"], ["sel"], name="nms"),
             helper.make_node("Gather", ["sel", "col"], ["box_idx"], name="pick_col", axis=1),
             helper.make_node("Gather", ["boxes2d", "box_idx"], ["kept"], name="gather_kept", axis=0),
             helper.make_node("Squeeze", ["boxes", "zero"], ["boxes2d"], name="squeeze"),
             helper.make_node("Relu", ["boxes2d"], ["plain"], name="not_picked")]
    g = helper.make_graph(nodes, "nms",
                          [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 8, 4]),
                           helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 8])],
                          [helper.make_tensor_value_info("sel", TensorProto.INT64, [None, 3]),
                           helper.make_tensor_value_info("kept", TensorProto.FLOAT, [None, 4]),
                           helper.make_tensor_value_info("plain", TensorProto.FLOAT, [8, 4])],
                          [helper.make_tensor("max_out", TensorProto.INT64, [1], [5]),
                           helper.make_tensor("col", TensorProto.INT64, [], [2]),
                           helper.make_tensor("zero", TensorProto.INT64, [1], [0])])
    found = order_free_outputs(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert set(found) == {"sel", "kept"} and found["sel"].source == "NonMaxSuppression"
    sel = np.array([[0, 0, 3], [0, 0, 5], [0, 0, 1]])
    d = compare_arrays("sel", sel, sel[[1, 0, 2]], order=found["sel"])
    assert d.match and d.mode.startswith("rows in any order (sorted multisets of rows")
