"""`export all` on every sample model: every ONNX Runtime and OpenVINO artifact that the
engine accepts is verified, Triton configs parse with Triton's schema, and what an
engine refuses (a custom op, 5-D GridSample, a contrib op) is a clear target error."""

from __future__ import annotations

import json

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from sample_models.catalog import CATALOG
from studio import api
from tests.conftest import assert_user_message, sha256_file

# What the engines here refuse, by sample (checked: the message names the op).
REFUSED = {
    "mmdeploy_grid_sampler": {"onnxruntime": "grid_sampler", "openvino": "grid_sampler"},
    "gridsample_5d": {"openvino": "GridSample"},
    "com_microsoft_gridsample": {"openvino": "GridSample"},
}


@pytest.mark.parametrize("sample", CATALOG, ids=lambda s: s.name)
def test_export_all_sample(sample, tmp_path):
    before = sha256_file(sample.path)
    r = api.export(api.load(sample.path), "all", tmp_path / "out", pool_key="samples")
    refused = REFUSED.get(sample.name, {})
    for t in r.targets:
        if t.target in refused:
            assert t.status == "error" and refused[t.target] in t.message, (t.target, t.message)
            assert_user_message(t.message)
            continue
        if t.target in ("onnxruntime", "openvino"):
            assert t.status == "passed", (t.target, t.message)
            assert all(a.verification.ok for a in t.artifacts if a.verification), t.message
        if t.target == "tensorrt":
            assert t.status in ("not verified", "passed") and "TensorRT" in t.message
    assert r.ok == (not refused) and r.exit_code == (1 if refused else 0)
    # Triton: every config parses with Triton's own schema; models that could be exported run.
    for cfg in (r.bundle / "triton" / "model_repository").glob("*/config.pbtxt"):
        parsed = text_format.Parse(cfg.read_text(), pb.ModelConfig())
        assert parsed.name == cfg.parent.name and parsed.input and parsed.output
    for a in r.target("triton").artifacts:
        backend = a.path.split("/")[2].rsplit("_", 1)[-1]
        if a.kind == "triton-model" and backend not in refused:
            assert a.verification.ok, (a.path, a.verification.message)
    manifest = json.loads((r.bundle / "manifest.json").read_text())
    assert manifest["ok"] == r.ok and manifest["source"]["sha256"] == r.manifest["source"]["sha256"]
    assert sha256_file(sample.path) == before                   # the sample is only read
