"""``compare A B`` on seeded inputs adds the synthetic picture where A's outputs are numerically zero on them
(the rule of optimize, precision, check and export): two models that differ only where the model answers are
told apart, and the figure on the picture is plain onnxruntime's."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from studio import api
from studio.core.pictures import picture_feeds
from tests.conftest import save
from tests.quiet_image import quiet_image_model


def test_models_equal_on_noise_are_compared_on_a_picture(tmp_path):
    a = save(quiet_image_model([1.0, 2.0]), tmp_path / "a.onnx")
    b = save(quiet_image_model([2.0, 1.0]), tmp_path / "b.onnx")
    r = api.compare(a, b)
    assert not r.comparison.ok, r.comparison.summary()          # equal (all zero) on the seeded sets alone
    assert "plus a synthetic" in r.feeds["source"] and any("compared on a synthetic" in n for n in r.shape_notes), r.shape_notes
    label = r.feeds["source"].split("; plus ", 1)[1]
    x = dict(picture_feeds({"x": np.zeros((1, 3, 32, 32), np.float32)}, "x"))[label]["x"]
    ya, yb = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0] for p in (a, b))
    cosine = float(ya @ yb / (np.linalg.norm(ya) * np.linalg.norm(yb)))
    assert abs(cosine - 0.8) < 1e-6                                # [1, 2] against [2, 1]: 4 / 5, by hand
    assert abs(r.comparison.outputs["y"].cosine - cosine) < 1e-5
    same = api.compare(a, save(quiet_image_model([1.0, 2.0]), tmp_path / "c.onnx"))
    assert same.comparison.ok
