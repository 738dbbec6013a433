"""Task metrics judge outputs the way the task does (studio.data.metrics)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from studio.core.errors import StudioError
from studio.data.metrics import (METRICS, DetectionMAP, OutputSpec, decode_yolo, metrics_for, parse_target,
                                 task_of)

rng = np.random.default_rng(0)


def _rows(n=20):
    xy = rng.uniform(0, 200, (n, 2))
    wh = rng.uniform(10, 60, (n, 2))
    scores = np.round(rng.uniform(0.5, 0.9, n), 2)      # near-tied scores
    return np.concatenate([xy, xy + wh, scores[:, None], rng.integers(0, 3, (n, 1))], axis=1)


def test_topk_rows_in_another_order_are_equal_by_matching_but_not_elementwise():
    golden = _rows()
    permuted = golden[rng.permutation(len(golden))]
    spec = OutputSpec("dets", "float32", (20, 6), producer="TopK")
    r = METRICS["map50"].score("dets", [golden], [permuted])
    assert r.value == pytest.approx(1.0)
    assert float(np.abs(golden - permuted).max()) > 10          # element-wise they "differ"
    assert task_of(spec) == "detection"
    moved = golden.copy()
    moved[:10, :4] += 100                                       # half the boxes are elsewhere
    assert METRICS["map50"].score("dets", [golden], [moved]).value < 0.7


def test_raw_yolo_head_is_decoded_and_matched():
    n, nc = 400, 3
    head = np.zeros((1, 4 + nc, n), np.float32)
    head[0, :2] = rng.uniform(20, 300, (2, n))
    head[0, 2:4] = rng.uniform(8, 40, (2, n))
    head[0, 4:] = rng.uniform(0, 0.2, (nc, n))
    hot = rng.choice(n, 12, replace=False)
    head[0, 4, hot] = 0.9
    dets = decode_yolo(head)
    assert 1 <= len(dets.scores) <= 12
    spec = OutputSpec("output0", "float32", (1, 4 + nc, n))
    assert task_of(spec) == "detection"
    noisy = head + rng.normal(0, 1e-3, head.shape).astype(np.float32)
    assert DetectionMAP().score("output0", [head], [noisy]).value == pytest.approx(1.0)
    lost = head.copy()
    lost[0, 4, hot[:6]] = 0.0
    assert DetectionMAP().score("output0", [head], [lost]).value < 0.8


def test_classification_topk_and_accuracy():
    g = rng.normal(size=(8, 10))
    c = g + rng.normal(0, 1e-4, g.shape)
    spec = OutputSpec("logits", "float32", (8, 10))
    assert task_of(spec) == "classification"
    names = [m.name for m in metrics_for(spec)]
    assert names[:2] == ["top1-agreement", "top5-agreement"]
    assert METRICS["top1-agreement"].score("logits", [g], [c]).value == 1.0
    flipped = g.copy()
    flipped[0] = -flipped[0]
    r = METRICS["top1-agreement"].score("logits", [g[:1], g[1:2]], [flipped[:1], g[1:2]])
    assert r.value == 0.5 and r.worst[0] == 0
    labels = [int(np.argmax(g[0])), 3]
    acc = METRICS["top1-accuracy"].score("logits", [g[:1], g[1:2]], [g[:1], g[1:2]], labels)
    assert acc.value == pytest.approx((1.0 + float(np.argmax(g[1]) == 3)) / 2)


def test_accuracy_is_na_when_the_labels_name_no_class_of_the_output():
    """R52: 4 photo folders against a 2-class head give no accuracy, with the reason (not 0.33 or 0.5)."""
    two = np.array([[0.3, 0.7]])
    rows = [two, two, two, two]
    acc = METRICS["top1-accuracy"].score("prob", rows, rows, [0, 1, 2, 3])
    assert acc.value is None and "not class ids of this 2-class output" in acc.detail
    ok = METRICS["top1-accuracy"].score("prob", rows[:2], rows[:2], [1, 0])
    assert ok.value == 0.5                                     # by hand: argmax is 1 for both rows


def test_nan_by_design_must_sit_at_the_same_positions():
    g = np.array([1.0, np.nan, 3.0, np.inf], np.float32)
    same = g.copy()
    other = np.array([1.0, 2.0, 3.0, np.inf], np.float32)
    assert METRICS["max-abs"].score("y", [g], [same]).value == 0.0
    assert METRICS["cosine"].score("y", [g], [same]).value == 1.0
    assert math.isinf(METRICS["max-abs"].score("y", [g], [other]).value)
    assert METRICS["cosine"].score("y", [g], [other]).value == 0.0


def test_integer_outputs_count_mismatches():
    g = np.array([[1, 2, 3, 4]], np.int64)
    c = np.array([[1, 2, 0, 4]], np.int64)
    spec = OutputSpec("class_ids", "int64", (1, 4))
    assert task_of(spec) == "integer"
    r = metrics_for(spec)[0].score("class_ids", [g], [c])
    assert r.metric == "mismatch-rate" and r.value == 0.25 and "1 of 4" in r.detail


def test_segmentation_mask_iou():
    g = np.zeros((1, 3, 16, 16), np.float32)
    g[0, 1, :8] = 5
    g[0, 2, 8:] = 5
    assert task_of(OutputSpec("out", "float32", (1, 3, 16, 16))) == "segmentation"
    assert METRICS["mask-iou"].score("out", [g], [g.copy()]).value == 1.0
    c = g.copy()
    c[0, 1, :4] = 0
    c[0, 0, :4] = 9
    assert 0.3 < METRICS["mask-iou"].score("out", [g], [c]).value < 0.9


def test_embedding_recall_and_cosine():
    g = [rng.normal(size=(1, 64)) for _ in range(10)]
    c = [x + rng.normal(0, 1e-3, x.shape) for x in g]
    spec = OutputSpec("sentence_embedding", "float32", (1, 64))
    assert task_of(spec) == "embedding"
    assert METRICS["recall@1"].score("e", g, c).value == 1.0
    shuffled = c[1:] + c[:1]
    assert METRICS["recall@1"].score("e", g, shuffled).value == 0.0


def test_ctc_strings_and_cer():
    t, classes = 12, 6
    g = np.full((1, t, classes), -5.0)
    path = [1, 1, 0, 2, 2, 0, 3, 0, 0, 4, 4, 5]
    g[0, np.arange(t), path] = 5.0
    spec = OutputSpec("ctc_logits", "float32", (1, t, classes))
    assert task_of(spec) == "sequence"
    assert METRICS["cer"].score("ctc_logits", [g], [g.copy()]).value == 0.0
    c = g.copy()
    c[0, 6] = -5.0
    c[0, 6, 0] = 5.0             # drops the '3'
    r = METRICS["cer"].score("ctc_logits", [g], [c])
    assert r.value == pytest.approx(1 / 5) and "0 of 1" in r.detail


def test_targets_parse_and_judge():
    t = parse_target("top1-agreement>=0.99")
    r = METRICS["top1-agreement"].score("y", [np.eye(4)], [np.eye(4)])
    assert t.met(r) and t.text() == "top1-agreement>=0.99"
    drop = parse_target("map-drop<=0.01")
    assert drop.base_metric == "map50"
    with pytest.raises(StudioError, match="unknown"):
        parse_target("accuracy-ish>=1")
    with pytest.raises(StudioError, match="METRIC>=VALUE"):
        parse_target("top1 about 0.9")


def test_to_dict_is_strict_json():
    import json

    r = METRICS["max-abs"].score("y", [np.array([np.nan])], [np.array([1.0])])
    json.loads(json.dumps(r.to_dict(), allow_nan=False))
