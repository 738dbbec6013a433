"""INT8 at the field's standard (issue 35 item 4): precision on the digits sample's golden set reports each
variant's top-1 ACCURACY against the true labels with its 95 % bootstrap interval, and accuracy-aware INT8
(NNCF, validated by the accuracy drop against those labels) keeps the drop within 1 %. Oracles: the variant
files run by plain onnxruntime / openvino on the 500 held-out digits, numpy's argmax against load_digits'
labels."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest

from sample_models.catalog import SAMPLE_DIR, path_of
from studio import api
from tests.requirements import require_module

require_module("nncf")

NAME = "digits_classifier"
GOLDEN = SAMPLE_DIR / "digits_classifier.golden.jsonl"


def _golden_digits() -> tuple[np.ndarray, np.ndarray]:
    rows = [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines()]
    rows = [r for r in rows if r["part"] == "evaluation"]
    return np.asarray([r["input"] for r in rows], np.float32), np.asarray([int(r["label"]) for r in rows])


def _metric(v, name: str) -> dict:
    return next(m for o in v.task["outputs"] for m in o["metrics"] if m["metric"] == name)


@pytest.mark.slow
def test_precision_reports_true_accuracy_and_accuracy_aware_int8_keeps_the_drop(tmp_path):
    project = api.create_project("digits")
    ds = api.add_dataset(project, GOLDEN, name="digits", model=api.load(path_of(NAME)))
    assert (len(ds.calibration), len(ds.evaluation)) == (300, 500)
    report = api.precision(path_of(NAME), variants=["fp32", "int8", "int8-nncf-aa"], dataset=ds,
                           target="accuracy-drop<=0.01", latency_budget_s=0.5, out_dir=tmp_path / "v")
    by = {v.name: v for v in report.variants}
    x, truth = _golden_digits()
    assert "500 evaluation samples" in report.basis

    fp32 = by["fp32"]
    sess = ort.InferenceSession(str(path_of(NAME)), providers=["CPUExecutionProvider"])
    ref = np.argmax(sess.run(None, {"input": x})[0], axis=1) == truth
    acc = _metric(fp32, "top1-accuracy")
    assert acc["value"] == pytest.approx(ref.mean(), abs=1e-9) and len(acc["per_sample"]) == 500
    assert acc["ci"][0] < acc["value"] < acc["ci"][1]
    # the row says it in words too (the CLI and the page print a variant's notes)
    assert any(n.startswith(f"top-1 accuracy {ref.mean():.3f} (95 % CI {acc['ci'][0]:.3f}–") for n in fp32.notes)

    int8 = by["int8"]                     # ORT QDQ/QOperator: its own file, run by plain onnxruntime
    if int8.status == "ok":
        q = ort.InferenceSession(str(int8.path), providers=["CPUExecutionProvider"])
        got = np.argmax(q.run(None, {"input": x})[0], axis=1) == truth
        assert _metric(int8, "top1-accuracy")["value"] == pytest.approx(got.mean(), abs=1e-9)
        assert _metric(int8, "accuracy-drop")["value"] == pytest.approx(ref.mean() - got.mean(), abs=1e-9)

    aa = by["int8-nncf-aa"]               # the NNCF IR, run by plain openvino
    assert aa.status == "ok" and aa.meets_target, (aa.error, aa.notes)
    import openvino as ov

    compiled = ov.Core().compile_model(str(aa.path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    got = np.argmax(np.concatenate([compiled({0: x[i:i + 1]})[0] for i in range(len(x))]), axis=1) == truth
    drop = _metric(aa, "accuracy-drop")
    assert _metric(aa, "top1-accuracy")["value"] == pytest.approx(got.mean(), abs=1e-9)
    assert drop["value"] == pytest.approx(ref.mean() - got.mean(), abs=1e-9) and drop["value"] <= 0.01
    assert aa.task["target"] == "accuracy-drop<=0.01" and aa.task["target_met"] is True
    assert aa.details.get("nncf_metric") == "accuracy-drop"      # NNCF validated by the labelled drop
