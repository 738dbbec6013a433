"""MNN and LiteRT adapters: real conversions and runs in the sandbox worker, checked against
ONNX Runtime; the user's model file is never written (onnx2tf writes into its input file,
so it only ever sees a private copy)."""

from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest

from studio.core.engines import ENGINE_NAMES, get_engine, resolve_engine_name
from studio.core.engines.layout import channels_last, match_names
from studio.core.errors import StudioError
from studio.core.feeds import input_specs, random_feeds
from tests.conftest import SAMPLES, sha256_file
from tests.requirements import require_engine

CONVERTED = ("mnn", "litert")


def _needs(engine: str):
    require_engine(engine)


def _cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_registered_with_aliases():
    assert {"mnn", "litert"} <= set(ENGINE_NAMES)
    assert resolve_engine_name("tflite") == "litert"
    assert resolve_engine_name("MNN") == "mnn"
    from diagnostics.compatibility import normalize_engines

    assert normalize_engines("all") == ENGINE_NAMES
    assert normalize_engines("ort,mnn,litert") == ("onnxruntime", "mnn", "litert")


@pytest.mark.parametrize("engine", CONVERTED)
def test_runs_match_onnxruntime_and_leave_the_input_untouched(engine, tmp_path):
    _needs(engine)
    path = tmp_path / "cnn.onnx"
    shutil.copy(SAMPLES / "cnn_unfused.onnx", path)
    before = sha256_file(path)
    feeds = random_feeds(input_specs(onnx.load(str(path))), seed=0)
    ref = get_engine("ort").run(path, feeds)
    got = get_engine(engine).run(path, feeds)
    assert sha256_file(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cnn.onnx"]      # nothing written beside it
    assert list(got.outputs) == list(ref.outputs)
    for name, want in ref.outputs.items():
        assert got.outputs[name].shape == want.shape
        assert _cosine(got.outputs[name], want) > 0.9999
    assert got.engine_version
    assert got.details["convert_ms"] >= 0 and got.details["load_ms"] >= 0
    if engine == "litert":   # NCHW image input fed NHWC, and said so
        assert "N..C" in got.details["layout"]["input"]


@pytest.mark.parametrize("engine", CONVERTED)
def test_conversion_failure_is_one_clear_error(engine):
    _needs(engine)
    model = onnx.load(str(SAMPLES / "mmdeploy_grid_sampler.onnx"))
    feeds = random_feeds(input_specs(model), seed=0)
    with pytest.raises(StudioError) as info:
        get_engine(engine).run(SAMPLES / "mmdeploy_grid_sampler.onnx", feeds)
    text = str(info.value)
    assert "grid_sampler" in text and "\n" not in text.strip() and "/work/" not in text


def test_layout_and_name_helpers():
    assert channels_last((1, 3, 224, 200)) == (1, 224, 200, 3)
    assert channels_last((2, 5)) == (2, 5)
    mapping, how = match_names(["input.1"], ["input_1"])
    assert mapping == {"input.1": "input_1"} and how == "by sanitized name"
    assert match_names(["a", "b"], ["x"]) == ({}, "unmatched")


def test_onnx2tf_never_downloads_its_sample_images():
    """onnx2tf fetches calibration images over HTTPS for 3-channel image models; the studio
    gives it seeded ones (loopback-only rule)."""
    _needs("litert")
    import onnx2tf
    import onnx2tf.utils.common_functions as common

    from studio.core.engines.litert import _offline, _offline_sample_images

    _offline(onnx2tf)
    assert common.download_test_image_data is _offline_sample_images
    assert onnx2tf.onnx2tf.download_test_image_data is _offline_sample_images
    images = _offline_sample_images()
    assert images.shape == (20, 128, 128, 3) and images.dtype == np.float32


def test_hostile_conv_without_weight_is_a_finding_not_a_crash(tmp_path):
    _needs("mnn")
    from diagnostics.compatibility import check_model
    from studio import api
    from tests.hostile_models import conv_without_weight

    path = tmp_path / "cw.onnx"
    onnx.save(conv_without_weight(), str(path))
    report = check_model(api.load(path), "mnn")
    v = report.verdict("mnn")
    assert v.verdict == "fails" and "Conv" in v.summary and "\n" not in v.summary
