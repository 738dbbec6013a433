"""Task metrics against independent oracles: mAP@0.5 against pycocotools' COCOeval, CER against
rapidfuzz's Levenshtein distance (R52: what cannot be computed is n/a with the reason)."""

from __future__ import annotations

import contextlib
import io
import itertools

import numpy as np
import pytest

from studio.data.metrics import METRICS, Detections, ctc_greedy, dataset_ap, edit_distance

# ---------------------------------------------------------------------------- mAP@0.5 vs pycocotools


def _coco_map50(truths: list[np.ndarray], preds: list[np.ndarray]) -> float:
    """mAP@0.5 by pycocotools: ``truths`` rows [x1, y1, x2, y2, class], ``preds`` rows
    [x1, y1, x2, y2, score, class], one array per image; no detection cap, all areas."""
    pytest.importorskip("pycocotools")
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    classes = sorted({int(c) for t in truths for c in t[:, 4]} | {int(c) for p in preds for c in p[:, 5]})
    images, anns, results = [], [], []
    for i, (t, p) in enumerate(zip(truths, preds), 1):
        images.append({"id": i, "width": 1000, "height": 1000})
        for x1, y1, x2, y2, c in t:
            anns.append({"id": len(anns) + 1, "image_id": i, "category_id": int(c) + 1, "iscrowd": 0,
                         "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1)})
        for x1, y1, x2, y2, s, c in p:
            results.append({"image_id": i, "category_id": int(c) + 1, "bbox": [x1, y1, x2 - x1, y2 - y1],
                            "score": float(s)})
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = {"images": images, "annotations": anns, "categories": [{"id": c + 1} for c in classes]}
        gt.createIndex()
        dt = gt.loadRes(results) if results else COCO()
        ev = COCOeval(gt, dt, "bbox")
        ev.params.iouThrs = np.array([0.5])
        ev.params.maxDets = [10_000]
        ev.params.areaRng, ev.params.areaRngLbl = [[0, 1e12]], ["all"]
        ev.evaluate()
        ev.accumulate()
    precision = ev.eval["precision"][0, :, :, 0, 0]          # [recall points, classes]
    per_class = [precision[:, k][precision[:, k] > -1] for k in range(precision.shape[1])]
    return float(np.mean([p.mean() for p in per_class if p.size]))


def _dets(truth_rows: np.ndarray) -> Detections:
    return Detections(truth_rows[:, :4], np.ones(len(truth_rows)), truth_rows[:, 4].astype(np.int64))


def _pred_dets(rows: np.ndarray) -> Detections:
    return Detections(rows[:, :4], rows[:, 4], rows[:, 5].astype(np.int64))


def _box(x, y, s=10.0):
    return [x, y, x + s, y + s]


def test_map50_is_dataset_level_as_pycocotools_computes_it():
    """Class 0: image A has two high-scoring false positives above its true positive (alone, AP
    about 1/3); image B a low-scoring hit (alone, AP 1). Ranked together (the VOC/COCO definition)
    B's hit comes after A's false positives. Class 1: a miss and a duplicate; class 2: no truth."""
    truths = [np.array([[*_box(0, 0), 0], [*_box(50, 50), 1]]),
              np.array([[*_box(100, 100), 0], [*_box(200, 200), 1]])]
    preds = [np.array([[*_box(300, 300), 0.95, 0], [*_box(320, 320), 0.92, 0], [*_box(0, 0), 0.90, 0],
                       [*_box(51, 51), 0.80, 1],
                       [*_box(50, 50), 0.70, 1]]),                           # the duplicate: a false positive
             np.array([[*_box(101, 101), 0.30, 0], [*_box(600, 600), 0.60, 2]])]   # class 2: no truth at all
    ours = dataset_ap([_dets(t) for t in truths], [_pred_dets(p) for p in preds])
    oracle = _coco_map50(truths, preds)
    assert ours == pytest.approx(oracle, abs=1e-12)
    per_image = np.mean([dataset_ap([_dets(t)], [_pred_dets(p)]) for t, p in zip(truths, preds)])
    assert per_image - oracle > 0.05                             # the two definitions differ on this set

    # The metric on rows [x1, y1, x2, y2, score, class] (golden rows are the truth).
    golden = [np.concatenate([t[:, :4], np.ones((len(t), 1)), t[:, 4:]], axis=1) for t in truths]
    r = METRICS["map50"].score("dets", golden, preds)
    assert r.value == pytest.approx(oracle, abs=1e-12) and "dataset level" in r.detail
    assert list(r.per_sample) == pytest.approx([_coco_map50([t], [p]) for t, p in zip(truths, preds)], abs=1e-12)
    assert r.worst[0] == 1                                       # image B misses its class-1 box


@pytest.mark.parametrize("seed", range(6))
def test_map50_matches_pycocotools_on_random_sets(seed):
    rng = np.random.default_rng(seed)
    truths, preds = [], []
    for _ in range(int(rng.integers(2, 6))):
        n = int(rng.integers(0, 6))
        xy = rng.uniform(0, 400, (n, 2))
        wh = rng.uniform(10, 80, (n, 2))
        t = np.concatenate([xy, xy + wh, rng.integers(0, 3, (n, 1))], axis=1)
        keep = t[rng.uniform(size=n) < 0.8]                              # some truths missed
        jitter = keep[:, :4] + rng.normal(0, 6, (len(keep), 4))          # some fall below IoU 0.5
        jitter = np.concatenate([np.minimum(jitter[:, :2], jitter[:, 2:] - 1), jitter[:, 2:]], axis=1)
        m = int(rng.integers(0, 4))
        fxy = rng.uniform(0, 400, (m, 2))
        fake = np.concatenate([fxy, fxy + rng.uniform(10, 80, (m, 2))], axis=1)
        boxes = np.concatenate([jitter, fake])
        classes = np.concatenate([keep[:, 4], rng.integers(0, 3, m)])
        scores = rng.uniform(0.05, 1.0, len(boxes))
        truths.append(t)
        preds.append(np.concatenate([boxes, scores[:, None], classes[:, None]], axis=1))
    if not any(len(t) for t in truths):
        truths[0] = np.array([[*_box(5, 5), 0]])
    ours = dataset_ap([_dets(t) for t in truths], [_pred_dets(p) for p in preds])
    assert ours == pytest.approx(_coco_map50(truths, preds), abs=1e-12)


def test_map50_without_golden_boxes_is_na_with_the_reason():
    empty = np.zeros((0, 6))
    r = METRICS["map50"].score("dets", [empty, empty], [empty, np.array([[*_box(0, 0), 0.9, 0]])])
    assert r.value is None and "no boxes" in r.detail


# ---------------------------------------------------------------------------- CER vs rapidfuzz


def _greedy_oracle(logits: np.ndarray) -> list[int]:
    """CTC greedy decoding written independently: argmax, collapse runs, drop blank 0."""
    return [k for k, _ in itertools.groupby(np.argmax(logits, axis=-1).tolist()) if k != 0]


def test_edit_distance_matches_rapidfuzz():
    pytest.importorskip("rapidfuzz")
    from rapidfuzz.distance import Levenshtein

    rng = np.random.default_rng(1)
    for _ in range(200):
        a = rng.integers(0, 5, int(rng.integers(0, 12))).tolist()
        b = rng.integers(0, 5, int(rng.integers(0, 12))).tolist()
        assert edit_distance(a, b) == Levenshtein.distance(a, b)


def test_cer_is_corpus_levenshtein_over_golden_length_as_rapidfuzz_counts_it():
    pytest.importorskip("rapidfuzz")
    from rapidfuzz.distance import Levenshtein

    rng = np.random.default_rng(2)
    golden, cand = [], []
    for n in range(8):
        g = rng.normal(0, 1, (1, 20 + n, 7))
        c = g + rng.normal(0, 0.8, g.shape)           # some characters change, appear, disappear
        golden.append(g)
        cand.append(c)
    gs = [_greedy_oracle(g[0]) for g in golden]
    cs = [_greedy_oracle(c[0]) for c in cand]
    assert [ctc_greedy(g)[0] for g in golden] == [tuple(s) for s in gs]
    distances = [Levenshtein.distance(a, b) for a, b in zip(gs, cs)]
    assert sum(distances) > 0
    r = METRICS["cer"].score("ctc_logits", golden, cand)
    assert r.value == pytest.approx(sum(distances) / sum(len(a) for a in gs), abs=1e-12)
    assert list(r.per_sample) == pytest.approx([d / len(a) for d, a in zip(distances, gs)], abs=1e-12)
    # the corpus rate, not the mean of per-sample rates (they differ here)
    assert abs(r.value - float(np.mean(r.per_sample))) > 1e-6


def test_cer_with_only_empty_golden_strings_is_na_with_the_reason():
    blank = np.zeros((1, 6, 4))
    blank[..., 0] = 5.0                                # every frame blank: the empty string
    chars = blank.copy()
    chars[0, 2] = [0, 9, 0, 0]
    r = METRICS["cer"].score("ctc_logits", [blank, blank], [blank, chars])
    assert r.value is None and "golden string is empty" in r.detail
    assert r.per_sample[0] == 0.0 and np.isnan(r.per_sample[1])
