"""Export's deploy model runs a preset with its pass options, read as optimize reads them
(passes.pipeline.preset_pass_options): the ort preset's fuse-hardswish.below_opset_14=hardsigmoid, the openvino
preset's best-of-peers.engine=openvino. Before, export took a preset's pass names only."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from studio import api
from tests.passes.test_fuse_hardswish import _conv_hardswish_conv


def _record(result, name: str) -> dict:
    return next(r for r in result.manifest["deploy"]["pipeline"] if r["name"] == name)


@pytest.fixture
def hardswish_model(tmp_path):
    """Conv -> x*Clip(x+3,0,6)/6 at opset 12, the hard-swish the model's output (a Conv after it would take
    the /6 into its weights, fuse-conv-scale, before fuse-hardswish sees the pattern)."""
    m = _conv_hardswish_conv(12)
    del m.graph.node[-1]
    del m.graph.value_info[:]
    m.graph.output[0].name = "hs"
    path = tmp_path / "in" / "hs.onnx"
    path.parent.mkdir()
    onnx.save(onnx.shape_inference.infer_shapes(m), str(path))
    return path


def test_an_ort_export_with_the_ort_preset_fuses_hardswish_as_its_option_says(hardswish_model, tmp_path):
    r = api.export(api.load(hardswish_model), "onnxruntime", tmp_path / "out", preset="ort")
    assert r.ok, r.failures
    rec = _record(r, "fuse-hardswish")
    # the option's HardSigmoid*x (old code: 'unchanged', the four nodes left as for OpenVINO)
    assert rec["modified"] and rec["verification"]["ok"], rec
    assert not any("are chosen for" in n for n in r.manifest["deploy"]["notes"])
    model = next(p for p in r.bundle.rglob("*.onnx") if "HardSigmoid" in {n.op_type for n in onnx.load(str(p)).graph.node})
    x = np.random.default_rng(3).random((1, 3, 16, 16), dtype=np.float32)
    plain = [ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
             for p in (hardswish_model, model)]
    np.testing.assert_allclose(plain[1], plain[0], rtol=1e-5, atol=1e-5)


def test_an_openvino_export_with_the_openvino_preset_judges_peers_by_openvino(hardswish_model, tmp_path):
    r = api.export(api.load(hardswish_model), "openvino", tmp_path / "out", preset="openvino")
    assert r.ok, r.failures
    assert not _record(r, "fuse-hardswish")["modified"]          # what OpenVINO fuses into the Conv stays
    peers = _record(r, "best-of-peers")
    assert peers["details"]["criterion"] == "openvino", peers          # old code: 'onnxruntime'


def test_a_preset_for_one_engine_says_so_when_another_engine_is_exported_too(hardswish_model, tmp_path):
    r = api.export(api.load(hardswish_model), ["onnxruntime", "openvino"], tmp_path / "out", preset="ort")
    notes = " ".join(r.manifest["deploy"]["notes"])
    assert "fuse-hardswish.below_opset_14=hardsigmoid" in notes and "--preset openvino" in notes, notes
