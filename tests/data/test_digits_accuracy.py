"""Top-1 accuracy against TRUE labels on a real labelled golden set (issue 35 item 4): the digits sample
(sample_models/digits.py) and its 500 held-out digits, the top1-accuracy / accuracy-drop metrics with
their bootstrap intervals, and the labels reaching the INT8 searches that judge by them.

Oracles: scikit-learn's ``load_digits`` itself for the sample's labels and pixels; a plain onnxruntime
session + numpy argmax for the accuracy; ``scipy.stats.bootstrap`` for the intervals."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from scipy.stats import bootstrap
from sklearn.datasets import load_digits

from passes.quant_tools import task_judge
from sample_models.catalog import SAMPLE_DIR, get, path_of
from studio.data.datasets import import_dataset
from studio.data.evaluate import evaluate, golden_outputs, output_specs
from studio.data.metrics import METRICS, check_target, parse_target

NAME = "digits_classifier"
GOLDEN = SAMPLE_DIR / "digits_classifier.golden.jsonl"


def _rows() -> list[dict]:
    return [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines()]


def _plain_ort_top1(model, rows: list[dict]) -> np.ndarray:
    """The oracle: one onnxruntime session, the digits as one batch, numpy's argmax."""
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    x = np.asarray([r["input"] for r in rows], np.float32)           # [N, 1, 8, 8]
    return np.argmax(sess.run(None, {"input": x})[0], axis=1)


def _scipy_ci(values: np.ndarray) -> tuple[float, float]:
    ci = bootstrap((np.asarray(values, np.float64),), np.mean, n_resamples=2000, confidence_level=0.95,
                   method="percentile", rng=np.random.default_rng(0)).confidence_interval
    return float(ci.low), float(ci.high)


def test_golden_digits_are_load_digits_with_their_true_labels():
    rows = _rows()
    digits = load_digits()
    evaluation = [r for r in rows if r["part"] == "evaluation"]
    calibration = [r for r in rows if r["part"] == "calibration"]
    assert len(evaluation) == 500 and len(calibration) == 300 and len(rows) == 800
    held = {r["digit"] for r in evaluation}
    assert len(held) == 500 and not held & {r["digit"] for r in calibration}   # never calibrated on
    for r in rows:
        i = r["digit"]
        assert int(r["label"]) == int(digits.target[i])                         # the TRUE label
        np.testing.assert_array_equal(np.asarray(r["input"][0]), digits.images[i])   # the real pixels
    assert sorted({int(r["label"]) for r in evaluation}) == list(range(10))
    assert "trained" in get(NAME).tags and GOLDEN.name in get(NAME).files


def test_the_trained_model_is_a_real_classifier_on_held_out_digits():
    rows = [r for r in _rows() if r["part"] == "evaluation"]
    top1 = _plain_ort_top1(path_of(NAME), rows)
    accuracy = float(np.mean(top1 == np.asarray([int(r["label"]) for r in rows])))
    assert accuracy >= 0.95, accuracy                   # held out: never seen in training


def test_data_add_keeps_the_golden_split(tmp_path):
    ds = import_dataset(GOLDEN, tmp_path / "data", calibration_fraction=0.5, seed=3)
    rows = _rows()
    assert len(ds.evaluation) == 500 and len(ds.calibration) == 300
    assert [rows[i]["part"] for i in ds.evaluation] == ["evaluation"] * 500
    assert [ds.label_index(ds.samples[i].label) for i in ds.evaluation] == \
        [int(rows[i]["label"]) for i in ds.evaluation]


@pytest.fixture(scope="module")
def digits_ds(tmp_path_factory):
    return import_dataset(GOLDEN, tmp_path_factory.mktemp("digits"))


@pytest.mark.slow          # the golden outputs and a candidate over 500 digits in workers
def test_accuracy_and_its_interval_against_plain_ort_and_scipy(digits_ds):
    golden = golden_outputs(digits_ds, path_of(NAME), part="evaluation")
    report = evaluate(digits_ds, golden, path_of(NAME), target=parse_target("accuracy-drop<=0.01"))
    every = _rows()                                    # read once, not once per sample
    rows = [every[i] for i in golden.sample_indices]
    truth = np.asarray([int(r["label"]) for r in rows])
    right = (_plain_ort_top1(path_of(NAME), rows) == truth).astype(np.float64)
    acc = report.metric("top1-accuracy")
    assert acc.value == pytest.approx(right.mean(), abs=1e-12) and len(acc.per_sample) == 500
    np.testing.assert_array_equal(np.asarray(acc.per_sample), right)          # sample by sample
    assert acc.ci == pytest.approx(_scipy_ci(right), abs=1e-12)
    assert acc.ci[0] < acc.value < acc.ci[1] and acc.to_dict()["ci"] == list(acc.ci)
    drop = report.metric("accuracy-drop")           # fp32 against its own golden outputs: nothing lost
    assert drop.value == 0.0 and drop.ci == (0.0, 0.0) and report.target_met is True
    assert golden.labelled == truth.tolist()
    assert report.accuracy_text() == (f"top-1 accuracy {right.mean():.3f} (95 % CI {acc.ci[0]:.3f}–{acc.ci[1]:.3f}) "
                                      "on 500 labelled samples; drop from fp32 +0.000 (95 % CI +0.000–+0.000)")


@pytest.mark.slow
def test_accuracy_drop_of_a_damaged_candidate_against_the_oracle(digits_ds, tmp_path):
    model = onnx.load(str(path_of(NAME)))
    w = next(t for t in model.graph.initializer if t.name == "onnx::MatMul_fc2")
    arr = onnx.numpy_helper.to_array(w).copy()
    arr[:, 3] *= 0.3                                   # class 3 loses some of its digits
    w.CopyFrom(onnx.numpy_helper.from_array(arr, w.name))
    bad = tmp_path / "damaged.onnx"
    onnx.save(model, str(bad))
    golden = golden_outputs(digits_ds, path_of(NAME), part="evaluation")
    report = evaluate(digits_ds, golden, bad, target=parse_target("accuracy-drop<=0.01"))
    every = _rows()                                    # read once, not once per sample
    rows = [every[i] for i in golden.sample_indices]
    truth = np.asarray([int(r["label"]) for r in rows])
    ref = (_plain_ort_top1(path_of(NAME), rows) == truth).astype(np.float64)
    got = (_plain_ort_top1(bad, rows) == truth).astype(np.float64)
    assert ref.mean() - got.mean() > 0.01                               # the oracle sees a real drop
    drop = report.metric("accuracy-drop")
    assert drop.value == pytest.approx(ref.mean() - got.mean(), abs=1e-12)
    assert drop.ci == pytest.approx(_scipy_ci(ref - got), abs=1e-12)     # paired: per-sample differences
    assert drop.worst and all(drop.per_sample[i] == 1.0 for i in drop.worst[:1])   # a digit only fp32 gets
    assert report.target_met is False and report.metric("top1-accuracy").value == pytest.approx(got.mean())


def test_int8_searches_judge_by_true_labels():
    """The float-fallback search (task_judge) and NNCF's validation score top1-accuracy with the labels
    the precision flow hands them; without them there is no accuracy to judge."""
    gold = [{"y": np.eye(3)[[k]]} for k in (0, 1, 2, 2)]
    got = [{"y": np.eye(3)[[k]]} for k in (0, 1, 1, 2)]
    judge = task_judge({"metric": "top1-accuracy", "output": "y", "labels": [0, 1, 2, 0]})
    assert judge(gold, got)[0] == pytest.approx(0.5)            # samples 0 and 1 right, 2 and 3 wrong
    drop = task_judge({"metric": "accuracy-drop", "output": "y", "labels": [0, 1, 2, 0]})
    assert drop(gold, got)[0] == pytest.approx(1 - 0.25)        # fp32 3/4, candidate 2/4
    from studio.precision.nncf_int8 import _score

    value, per = _score(METRICS["accuracy-drop"], "y", [g["y"] for g in gold], [c["y"] for c in got], [0, 1, 2, 0])
    assert value == pytest.approx(-0.25) and per == [0.0, 0.0, -1.0, 0.0]


def test_a_labelled_target_needs_labels():
    specs = output_specs(onnx.load(str(path_of(NAME))))
    assert check_target(parse_target("accuracy-drop<=0.01"), specs, has_labels=True) == "logits"
    with pytest.raises(Exception, match="needs labelled samples"):
        check_target(parse_target("accuracy-drop<=0.01"), specs, has_labels=False)
