"""Precision plugs in by pass name: `--precision int8` runs `quantize-int8-static`
(with `--calibration` data), `--precision fp16` runs `convert-fp16`; both through the
verifying pipeline, and every artifact is verified with the precision's criterion."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from passes import registry
from studio import api
from studio.core.errors import StudioError
from tests.conftest import assert_user_message
from tests.export.conftest import conv_model


def _ops(path) -> set[str]:
    return {n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node}


def test_int8_export_quantizes_and_verifies(tmp_path):
    r = api.export(api.load(conv_model(tmp_path / "m" / "c.onnx", channels=16)), ["ort", "openvino"],
                   tmp_path / "out", precision="int8", ort_format=False, zip=False)
    assert r.ok, r.failures
    deploy = r.manifest["deploy"]
    assert deploy["precision"] == "int8"
    rec = next(x for x in deploy["pipeline"] if x["name"] == "quantize-int8-static")
    assert rec["modified"] and rec["verification"]["ok"]
    # Explicit quantization (QDQ) only: OpenVINO's frontend fails on QOperator models.
    assert {c["name"] for c in rec["details"]["candidates"]} <= {"qdq-u8s8", "qdq-u8s8-dedicated", "qdq-s8s8"}
    ort_art = r.target("onnxruntime").artifacts[0]
    assert ort_art.precision == "int8" and ort_art.verification.ok
    assert ort_art.verification.criteria.startswith("int8") and "cosine" in ort_art.verification.criteria
    assert _ops(r.bundle / ort_art.path) & {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "ConvInteger"}
    assert r.target("openvino").artifacts[0].verification.ok


def test_int8_uses_the_calibration_folder(tmp_path):
    from PIL import Image

    calib = tmp_path / "calib"
    calib.mkdir()
    rng = np.random.default_rng(0)
    for i in range(6):
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(calib / f"img{i}.png")
    r = api.export(api.load(conv_model(tmp_path / "m" / "c.onnx", channels=16)), "ort", tmp_path / "out",
                   precision="int8", calibration=calib, ort_format=False, zip=False)
    assert r.ok, r.failures
    rec = next(x for x in r.manifest["deploy"]["pipeline"] if x["name"] == "quantize-int8-static")
    assert "image" in str(rec.get("details", {}).get("calibration", "")).lower()


def test_fp16_export_converts_onnx_and_openvino(tmp_path):
    r = api.export(api.load(conv_model(tmp_path / "m" / "c.onnx", channels=16)), ["ort", "openvino"],
                   tmp_path / "out", precision="fp16", ort_format=False, zip=False)
    assert r.ok, r.failures
    assert r.manifest["deploy"]["precision"] == "fp16"
    assert [x["name"] for x in r.manifest["deploy"]["pipeline"]] == [
        "constants-to-initializers", "fuse-conv-bn", "fuse-conv-affine", "convert-fp16"]    # BN folded in fp32 first
    ort_art = r.target("onnxruntime").artifacts[0]
    assert ort_art.precision == "fp16" and ort_art.verification.ok
    weights = onnx.load(str(r.bundle / ort_art.path)).graph.initializer
    assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in weights)
    assert r.target("openvino").artifacts[0].precision == "fp16"


def test_int8_without_the_pass_is_a_clear_error(tmp_path, monkeypatch):
    """A build without the precision feature says what is missing (registry emptied of it)."""
    monkeypatch.delitem(registry.PASS_MODULES, "quantize-int8-static")
    monkeypatch.delitem(registry._REGISTRY, "quantize-int8-static", raising=False)
    monkeypatch.setattr(registry, "_load_all", lambda: None)
    with pytest.raises(StudioError) as info:
        api.export(api.load(conv_model(tmp_path / "m" / "c.onnx")), "all", tmp_path / "out", precision="int8")
    assert str(info.value) == "INT8 export needs the quantize-int8-static pass (not available in this build)"
    assert_user_message(str(info.value))
    assert not any((tmp_path / "out").iterdir())          # nothing half-written left behind


def test_preset_runs_first_and_is_recorded(tmp_path):
    from tests.conftest import SAMPLES

    r = api.export(api.load(SAMPLES / "cnn_unfused.onnx"), "openvino", tmp_path / "out", preset="safe")
    assert r.ok, r.failures
    names = [rec["name"] for rec in r.manifest["deploy"]["pipeline"]]
    assert "fuse-conv-bn" in names and r.manifest["deploy"]["same_as_source"] is False
    fused = next(rec for rec in r.manifest["deploy"]["pipeline"] if rec["name"] == "fuse-conv-bn")
    assert fused["modified"] and fused["verification"]["ok"]


def _calibration_images(folder, n=6):
    from PIL import Image

    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(folder / f"img{i}.png")
    return folder


def test_relative_calibration_path_works_from_the_cli(tmp_path, monkeypatch, capsys):
    """`export ... --calibration imgs` with a path relative to where the user is: the pass runs in a
    worker with its own cwd, so the path is made absolute at the boundary (it used to fail with
    "inputs file 'imgs' does not exist")."""
    from studio.cli import main

    model = conv_model(tmp_path / "m" / "c.onnx", channels=16)
    monkeypatch.chdir(tmp_path)
    _calibration_images(tmp_path / "imgs")
    code = main(["export", str(model), "--target", "ort", "--precision", "int8", "--calibration", "imgs",
                 "-o", "exp", "--no-zip", "--no-ort-format", "--json", "--calibration-method", "percentile"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    import json

    deploy = json.loads(captured.out)["manifest"]["deploy"]
    rec = next(x for x in deploy["pipeline"] if x["name"] == "quantize-int8-static")
    assert rec["modified"] and "image" in str(rec["details"]["calibration"]).lower()
    assert rec["details"]["calibration_method"] == "percentile"                # --calibration-method


def test_missing_calibration_path_is_an_up_front_error(tmp_path, monkeypatch, capsys):
    from studio.cli import main

    model = conv_model(tmp_path / "m" / "c.onnx", channels=16)
    monkeypatch.chdir(tmp_path)
    code = main(["export", str(model), "--target", "ort", "--precision", "int8", "--calibration", "nope",
                 "-o", "exp", "--no-zip"])
    err = capsys.readouterr().err
    assert code == 2 and "'nope' does not exist" in err and "did not verify" not in err
    assert not (tmp_path / "exp").exists()


def test_fp16_export_folds_a_batchnorm_beyond_fp16_range(tmp_path):
    """passes.presets.FP16_FOLDS: the BN's variance (4.8e7) would be inf in float16; folded first, the FP16 ONNX is
    verified and holds no BatchNormalization (the plain conversion's breakage: tests/precision/test_fp16_folds_batchnorm)."""
    from tests.conftest import save
    from tests.fp16_models import conv_bn_beyond_fp16

    src = save(conv_bn_beyond_fp16(), tmp_path / "m" / "bn.onnx")
    r = api.export(api.load(src), ["ort"], tmp_path / "out", precision="fp16", ort_format=False, zip=False)
    art = r.target("onnxruntime").artifacts[0]
    assert r.ok and art.precision == "fp16" and art.verification.ok, (r.failures, art.verification)
    kept = onnx.load(str(r.bundle / art.path))
    assert "BatchNormalization" not in {n.op_type for n in kept.graph.node}
    assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in kept.graph.initializer)   # really float16


def test_an_fp16_pass_that_did_not_verify_leaves_the_artifact_labelled_fp32(tmp_path):
    """Where convert-fp16 is undone (it did not verify), the ONNX artifact is float32 and must not be called FP16
    (it was: the old export labelled such a model fp16 with float32 weights). The model loses precision in float16
    with every value in range (convert-fp16 keeps out-of-range nodes float32, so a range overflow verifies now)."""
    from tests.conftest import save
    from tests.fp16_models import offset_beyond_fp16_precision

    src = save(offset_beyond_fp16_precision(), tmp_path / "m" / "offset.onnx")
    r = api.export(api.load(src), ["ort"], tmp_path / "out", precision="fp16", ort_format=False, zip=False)
    art = r.target("onnxruntime").artifacts[0]
    kept = onnx.load(str(r.bundle / art.path))
    assert not any(t.data_type == onnx.TensorProto.FLOAT16 for t in kept.graph.initializer)
    assert r.manifest["deploy"]["precision"] == "fp32" and art.precision == "fp32", (r.manifest["deploy"], art.precision)
    assert any("stay FP32" in n for n in r.manifest["deploy"]["notes"]), r.manifest["deploy"]["notes"]
