"""Export verifies its artifacts on a synthetic picture where ORT's outputs are numerically zero on the seeded
inputs (the rule of optimize, precision and check): the manifest's reference says which picture, and the
artifacts are compared with the original's outputs there, which plain onnxruntime reproduces."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort

from studio import api
from studio.core.pictures import picture_feeds
from tests.conftest import save
from tests.quiet_image import quiet_image_model


def test_the_reference_is_a_picture_when_seeded_outputs_are_zero(tmp_path):
    src = save(quiet_image_model([1.0, 2.0]), tmp_path / "m.onnx")
    r = api.export(api.load(src), "ort", tmp_path / "out", zip=False, pool_key="export-picture")
    assert r.ok, [t.status for t in r.targets]
    reference = json.loads((r.bundle / "manifest.json").read_text())["verification"]["reference"]
    assert "on a synthetic" in reference and "'y' RMS 0 -> " in reference, reference
    label = reference.split(", on ", 1)[1].split(" (outputs near zero", 1)[0]
    x = dict(picture_feeds({"x": np.zeros((1, 3, 32, 32), np.float32)}, "x"))[label]["x"]
    want = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert float(np.abs(want).min()) > 1e-3                     # the model answers on that picture
    verified = [a.verification for t in r.targets for a in t.artifacts if a.verification is not None]
    assert verified and all(v.status == "passed" for v in verified), [v.message for v in verified]
    assert not any("noise level" in v.message for v in verified), [v.message for v in verified]   # real values
