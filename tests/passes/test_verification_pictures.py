"""Where seeded random inputs leave an image model's outputs at zero, verification also runs a synthetic
picture (studio.core.pictures): a candidate that differs only where the model answers is caught. The model
here: y = Relu(mean(x) - 0.5) * w, exactly 0 on Gaussian noise (mean ~0), positive on a light printed page.
A candidate with w doubled passes on noise alone (0 == 0, the old verification) and must fail now. Oracles:
plain onnxruntime on the picture's feed, and the pictures' properties worked out by hand."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from studio.core.compare import QUANTIZED, REDUCED_PRECISION
from studio.core.pictures import picture_feeds, printed_page, shaded_scene
from studio.verification.verifier import Verifier
from tests.conftest import save
from tests.quiet_image import quiet_image_model


def test_a_candidate_that_differs_only_on_pictures_fails(tmp_path):
    src = save(quiet_image_model([1.0]), tmp_path / "a" / "m.onnx")
    broken = save(quiet_image_model([2.0]), tmp_path / "b" / "m.onnx")
    v = Verifier(src)
    result = v.verify(broken)
    assert not result.ok, result.message                        # on noise alone both give 0: it had passed
    assert len(v.feed_sets) == 2 and v.picture_note and "synthetic" in v.picture_note, v.picture_note
    picture = v.feed_sets[-1]["x"]
    want = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"x": picture})[0]
    np.testing.assert_array_equal(v.reference().outputs[-1]["y"], want)
    assert float(want[0]) > 1e-3 and v.quiet_note is None
    assert Verifier(src).verify(save(quiet_image_model([1.0]), tmp_path / "c" / "m.onnx")).ok     # the same model passes


def test_an_output_a_picture_lifts_far_above_its_value_on_noise_is_judged_there(tmp_path):
    """The second rule (pictures.LIFT_RATIO): y = Relu(mean(x) - 0.5) * w + [1e-3, 1e-3] is 1e-3 on noise, above
    float32's noise floor (the first rule does not see it), and ~0.3 on a page. A candidate with other weights
    equals the original on noise and passed there; the picture catches it. An INT8 result (QUANTIZED tolerance) is
    judged on that output on the picture alone: a candidate whose value on noise is the opposite sign, within
    cosine on the page, passes as INT8 and fails as fp16 (by relative error) and as fp32 (value by value), where
    the seeded sets still count."""
    floor = [1e-3, 1e-3]
    src = save(quiet_image_model([1.0, 2.0], floor), tmp_path / "a" / "m.onnx")
    noise = {"x": np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    on_noise = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, noise)[0]
    np.testing.assert_allclose(on_noise, floor)                  # plain ORT: 1e-3 > the 1e-5 floor, not "quiet"
    v = Verifier(src)
    result = v.verify(save(quiet_image_model([2.0, 1.0], floor), tmp_path / "b" / "m.onnx"))
    assert not result.ok, result.message                         # equal on noise: the old verification passed it
    assert len(v.feed_sets) == 2 and "'y' RMS 0.001 ->" in v.picture_note, v.picture_note
    picture = v.feed_sets[-1]["x"]
    want = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"x": picture})[0]
    assert float(np.sqrt(np.mean(want.astype(np.float64) ** 2))) >= 20 * 1e-3       # the lift, by plain ORT
    opposite = save(quiet_image_model([1.0, 2.0], [-1e-3, -1e-3]), tmp_path / "c" / "m.onnx")
    assert v.verify(opposite, quantized=True, tolerance=QUANTIZED).ok        # cosine on the page ~0.99999
    assert not v.verify(opposite, quantized=True, tolerance=REDUCED_PRECISION).ok
    assert not Verifier(src).verify(opposite).ok                 # value by value on noise: -1e-3 vs 1e-3
    # an output noise already moves (0.2 there, ~0.5-0.8 on a page: a few times, not LIFT_RATIO): no picture
    answers = Verifier(save(quiet_image_model([1.0, 2.0], [0.2, 0.2]), tmp_path / "d" / "m.onnx"))
    answers.reference()
    assert len(answers.feed_sets) == 1 and answers.picture_note is None


def test_pictures_keep_the_inputs_shape_dtype_and_layout():
    page = printed_page(64, 96)
    assert page.shape == (64, 96) and page.min() < 0.1 and page.max() > 0.9
    assert 0.05 < float((page < 0.5).mean()) < 0.5               # strokes cover part of the page, not all of it
    np.testing.assert_array_equal(page, printed_page(64, 96))   # deterministic
    assert 0.0 <= shaded_scene(40, 40).min() and shaded_scene(40, 40).max() <= 1.0
    nchw = picture_feeds({"x": np.zeros((2, 3, 16, 24), np.float32), "k": np.int64(3)}, "x")
    assert len(nchw) == 4 and all(f["x"].shape == (2, 3, 16, 24) and f["x"].dtype == np.float32 for _, f in nchw)
    assert all(f["k"] == 3 for _, f in nchw)                     # other inputs kept
    first = nchw[0][1]["x"]
    np.testing.assert_allclose(first[0, 1], printed_page(16, 24), atol=1e-6)      # values in [0, 1], per channel
    imagenet = dict(nchw)["a synthetic printed page, ImageNet mean/std"]["x"]
    np.testing.assert_allclose(imagenet[0, 2], (printed_page(16, 24) - 0.406) / 0.225, atol=1e-5)
    nhwc = picture_feeds({"x": np.zeros((1, 20, 20, 3), np.uint8)}, "x")
    assert len(nhwc) == 2 and all(f["x"].dtype == np.uint8 and f["x"].shape == (1, 20, 20, 3) for _, f in nhwc)
    assert picture_feeds({"x": np.zeros((1, 8, 5, 5), np.float32)}, "x") == []   # 8 channels: not a picture
