"""NNCF INT8 for OpenVINO, judged by top-1 agreement on real photos: plain INT8 misses the
target on the outlier classifier, accuracy-controlled INT8 meets it."""

from __future__ import annotations

import onnx
import pytest

from sample_models.catalog import path_of
from studio.data.datasets import dataset_feeds, import_dataset
from studio.data.evaluate import evaluate, golden_outputs
from studio.data.metrics import parse_target
from studio.precision.nncf_int8 import quantize_openvino
from tests.conftest import sha256_file
from tests.photos import photo_folder
from tests.precision.quantized_layers import ov_quantized_layers
from tests.requirements import require_module

require_module("nncf")
require_module("skimage.data")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nncf")
    model = path_of("image_classifier")
    ds = import_dataset(photo_folder(tmp / "photos", n_per_class=4), tmp / "data", model=onnx.load(model),
                        calibration_fraction=0.5)
    return tmp, model, ds, golden_outputs(ds, model)


def test_plain_int8_misses_and_accuracy_control_meets_top1(setup):
    tmp, model, ds, golden = setup
    before = sha256_file(model)
    target = parse_target("top1-agreement>=0.99")
    header = onnx.load(model)
    calib = dataset_feeds(ds, header, part="calibration")
    plain = quantize_openvino(model, calib, tmp / "plain")
    plain_report = evaluate(ds, golden, plain.ir_path, engine="openvino", inputs_model=model, target=target)
    assert plain_report.target_met is False and plain_report.target_value < 0.99

    evaluation = dataset_feeds(ds, header, part="evaluation")
    guarded = quantize_openvino(model, calib, tmp / "aa", mode="accuracy-control", evaluation=evaluation,
                                golden=list(golden.outputs), metric="top1-agreement", output="logits", max_drop=0.0)
    report = evaluate(ds, golden, guarded.ir_path, engine="openvino", inputs_model=model, target=target)
    assert report.target_met is True and guarded.int8_metric == pytest.approx(guarded.fp32_metric)
    # ...by reverting the Conv that reads the outlier channel, not every quantizer (which meets it too)
    assert ov_quantized_layers(plain.ir_path) == {"/features.0/Conv": True, "/head/Conv": True}
    assert ov_quantized_layers(guarded.ir_path) == {"/features.0/Conv": True, "/head/Conv": False}
    assert guarded.nncf_version and guarded.ir_path.with_suffix(".bin").is_file()
    assert sha256_file(model) == before
