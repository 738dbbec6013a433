"""``check`` on a converted engine compares an output that ORT leaves at zero on the seeded inputs (a text
detector's mask on noise) on the synthetic picture that lifts it, the rule optimize and precision use.
Oracles: plain onnxruntime on the picture, and a real engine run of a different model standing for a wrong
conversion (its answers are real, not made up)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

from diagnostics.converted_check import _on_a_picture, judge_output
from studio.core.engines import sessions
from studio.core.feeds import input_specs, random_feeds
from studio.core.jobs import JobContext
from tests.conftest import save
from tests.quiet_image import quiet_image_model
from tests.requirements import require_engine


def test_a_wrong_result_only_on_the_picture_is_found(tmp_path):
    good, wrong = save(quiet_image_model([1.0, 2.0]), tmp_path / "a" / "m.onnx"), save(quiet_image_model([2.0, 1.0]), tmp_path / "b" / "m.onnx")
    ctx = JobContext(scratch=tmp_path, out_dir=tmp_path)
    reference = sessions.open_runner("onnxruntime", good, {"graph_optimization_level": "disable"}, ctx)
    engine = sessions.open_runner("onnxruntime", wrong, {}, ctx)       # a conversion that swapped the weights
    feeds = random_feeds(input_specs(onnx.load(str(good))), {}, seed=0)
    ran = {"feeds": feeds, "expected": reference.infer(feeds), "values": engine.infer(feeds)}
    assert float(np.abs(ran["expected"]["y"]).max()) == 0.0 == float(np.abs(ran["values"]["y"]).max())   # noise: equal
    data: dict = {}
    expected, values = _on_a_picture(onnx.load(str(good)), ran, reference, engine, data)
    assert "synthetic" in data["picture_note"] and "'y' RMS" in data["picture_note"], data
    plain = ort.InferenceSession(str(good), providers=["CPUExecutionProvider"])
    want = plain.run(None, {"x": _picture_of(data, feeds, reference)})[0]
    np.testing.assert_array_equal(expected["y"], want)                  # ORT's own answer on that picture
    assert judge_output("y", expected["y"], values["y"]).get("problem")   # cosine 0.8 there: caught
    assert not judge_output("y", ran["expected"]["y"], ran["values"]["y"]).get("problem")   # on noise it passed


def _picture_of(data, feeds, reference):
    """The picture the note names, drawn again by its label (the drawing is deterministic)."""
    from studio.core.pictures import picture_feeds

    label = data["picture_note"].split(" compared on ", 1)[1].split(" ('", 1)[0]
    return dict(picture_feeds(feeds, "x"))[label]["x"]


def test_check_on_mnn_says_the_picture_and_runs(tmp_path):
    require_engine("mnn")
    from studio import api

    src = save(quiet_image_model([1.0, 2.0]), tmp_path / "m.onnx")
    report = api.check(api.load(src), ["mnn"])
    assert report.verdict("mnn").verdict == "runs"
    assert any(n.startswith("MNN: outputs near zero on seeded inputs compared on a synthetic") for n in report.notes), \
        report.notes
