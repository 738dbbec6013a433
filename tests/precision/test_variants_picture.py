"""Without user data, precision judges every variant on seeded noise; where that noise leaves an image model's
outputs at zero (a DB text detector's mask), the synthetic picture that lifts them (studio.core.pictures, the
Verifier's rule) joins the evaluation feeds, so a variant wrong only where the model answers is not recommended.
The model: y = Relu(mean(x) - 0.5) * [1, 2], exactly 0 on Gaussian noise, positive on a light printed page; the
"fp16" variant is a hand-made broken one, y = Relu(mean(x) - 0.5) * [2, 1] (cosine 0.8 wherever the model
answers), injected in place of the build. On noise alone both give 0 (the old flow judged it within tolerance);
oracle: plain onnxruntime on the picture the report names, and numpy's cosine."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from studio.core.pictures import picture_feeds
from studio.precision import variants as V
from tests.conftest import save
from tests.quiet_image import quiet_image_model


def _run(path, feeds) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0].astype(np.float64)


def test_a_variant_wrong_only_on_the_picture_is_judged_there(tmp_path, monkeypatch):
    src = save(quiet_image_model([1.0, 2.0]), tmp_path / "a" / "m.onnx")
    broken = save(quiet_image_model([2.0, 1.0]), tmp_path / "b" / "m.onnx")
    build = V._build_one

    def inject(ctx, inp, spec, built, pass_extra):
        return (broken, (), {}, []) if spec.name == "fp16" else build(ctx, inp, spec, built, pass_extra)

    monkeypatch.setattr(V, "_build_one", inject)
    report = V.evaluate_variants(src, variants=["fp32", "fp16"], samples=2, latency_budget_s=1,
                                 out_dir=tmp_path / "out")
    row = report.variant("fp16")
    note = next((n for n in report.notes if "synthetic" in n), None)
    assert note is not None, report.notes                   # the old flow added no picture and said nothing
    label = next(lab for lab, _ in picture_feeds({"x": np.zeros((1, 3, 32, 32), np.float32)}, "x") if lab in note)
    picture = dict(picture_feeds({"x": np.zeros((1, 3, 32, 32), np.float32)}, "x"))[label]
    a, b = _run(src, picture), _run(broken, picture)
    assert float(np.sqrt(np.mean(a * a))) > 1e-3                 # the model answers on it
    want = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    assert abs(want - 0.8) < 1e-6                                # worked out by hand: (2 + 2) / 5
    assert row.cosine is not None and abs(row.cosine - want) < 1e-5, row
    assert not row.meets_target and not row.recommended, row     # on noise alone it met the target
    assert report.evaluation["count"] == 5 and label in report.evaluation["source"]
    assert report.variant("fp32").meets_target
    # static INT8 calibration also gets a page of the same kind, drawn anew: not the one the variants are judged on
    with np.load(tmp_path / "out" / "calibration.npz") as cal:
        sets = [cal[f"x/{i}"] for i in range(len(cal.files))]
    assert len(sets) == 3 and "drawn anew" in report.calibration and "drawn anew" in note
    page = sets[-1]
    assert page.shape == picture["x"].shape and not np.array_equal(page, picture["x"])
    assert float(_run(src, {"x": page})[1]) > 1e-3                # the model answers on it too


def test_a_model_that_answers_on_noise_gets_no_picture(tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])])
    src = save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "r.onnx")
    report = V.evaluate_variants(src, variants=["fp32"], samples=2, latency_budget_s=1, out_dir=tmp_path / "out")
    assert not any("synthetic" in n for n in report.notes) and report.evaluation["count"] == 4
