"""Precision plugs in by pass name: INT8 needs `quantize-int8-static`, FP16 ONNX needs
`convert-fp16`; without them, clear messages (INT8) or notes (FP16)."""

from __future__ import annotations

import onnx_ir as ir
import pytest

from passes import registry
from passes.base import PassResult, StudioPass
from studio import api
from studio.core.errors import StudioError
from tests.conftest import assert_user_message
from tests.export.conftest import conv_model

SEEN: list[dict] = []


class StandInQuantizer(StudioPass):
    """Stand-in registered under the precision feature's pass name: it records its options and
    changes nothing. It checks the export's plumbing (the pass is found by name, run through the
    verifying pipeline with the calibration folder, and its result labelled INT8); the real
    quantization comes with that feature."""

    name = "quantize-int8-static"
    needs_weights = False

    def call(self, model: ir.Model) -> PassResult:
        SEEN.append(dict(self.options))
        return PassResult(model, modified=False)


def test_int8_without_the_pass_is_a_clear_error(tmp_path):
    if "quantize-int8-static" in registry.known_passes():
        pytest.skip("the precision feature's pass is registered in this build")
    with pytest.raises(StudioError) as info:
        api.export(api.load(conv_model(tmp_path / "m" / "c.onnx")), "all", tmp_path / "out", precision="int8")
    assert str(info.value) == "INT8 export needs the quantize-int8-static pass (not available in this build)"
    assert_user_message(str(info.value))
    assert not any((tmp_path / "out").iterdir())          # nothing half-written left behind


def test_int8_runs_the_registered_pass_through_the_pipeline(tmp_path, monkeypatch):
    monkeypatch.setitem(registry._REGISTRY, "quantize-int8-static", StandInQuantizer)
    SEEN.clear()
    calib = tmp_path / "calib"
    calib.mkdir()
    r = api.export(api.load(conv_model(tmp_path / "m" / "c.onnx")), "ort", tmp_path / "out", precision="int8",
                   calibration=calib, ort_format=False)
    assert SEEN == [{"calibration": str(calib)}]
    assert [rec["name"] for rec in r.manifest["deploy"]["pipeline"]] == ["quantize-int8-static"]
    assert r.manifest["deploy"]["precision"] == "int8"
    assert r.manifest["verification"]["criteria"].startswith("int8")
    assert r.target("onnxruntime").artifacts[0].precision == "int8"


def test_fp16_without_convert_fp16_keeps_onnx_fp32_and_says_so(tmp_path):
    if "convert-fp16" in registry.known_passes():
        pytest.skip("the precision feature's pass is registered in this build")
    r = api.export(api.load(conv_model(tmp_path / "m" / "c.onnx")), ["ort", "openvino"], tmp_path / "out",
                   precision="fp16", ort_format=False)
    assert r.ok, r.failures
    assert r.target("onnxruntime").artifacts[0].precision == "fp32"
    assert r.target("openvino").artifacts[0].precision == "fp16"
    assert any("convert-fp16" in n and "not available" in n for n in r.manifest["deploy"]["notes"])


def test_preset_runs_first_and_is_recorded(tmp_path):
    from tests.conftest import SAMPLES

    r = api.export(api.load(SAMPLES / "cnn_unfused.onnx"), "openvino", tmp_path / "out", preset="safe")
    assert r.ok, r.failures
    names = [rec["name"] for rec in r.manifest["deploy"]["pipeline"]]
    assert "fuse-conv-bn" in names and r.manifest["deploy"]["same_as_source"] is False
    fused = next(rec for rec in r.manifest["deploy"]["pipeline"] if rec["name"] == "fuse-conv-bn")
    assert fused["modified"] and fused["verification"]["ok"]
