"""RELIABILITY R18 (shape-inference/arithmetic traps) and R19 (unknown / custom ops):
clean one-line findings from the check, the caller survives, the file is unchanged."""

from __future__ import annotations

import pytest

from studio import api
from tests.conftest import assert_user_message, sha256_file
from tests.diag import trap_models as hm

THREE = ("onnxruntime", "openvino", "tensorrt")     # what these traps are about (MNN/LiteRT: their own tests)


@pytest.mark.parametrize("name", sorted(hm.R18))
def test_r18_traps_give_clean_findings(model_file, name):
    path = model_file(hm.R18[name](), f"{name}.onnx")
    before = sha256_file(path)
    report = api.check(api.load(path), THREE)
    assert report.verdict("onnxruntime").verdict == "fails"        # the engine really refuses each trap
    errors = [f for f in report.findings if f.is_error]
    assert errors
    for f in report.findings:
        assert_user_message(f.message)
    assert sha256_file(path) == before
    # The studio process is fine: a second, normal check still works.
    assert api.check(api.load(path), ("tensorrt",)).verdicts


@pytest.mark.parametrize("build,op,domain", [(hm.unknown_default_op, "FancyMagic", "ai.onnx"),
                                             (hm.custom_domain_op, "MyOp", "acme.ops")])
def test_r19_unknown_ops_name_op_domain_and_engine(model_file, build, op, domain):
    report = api.check(api.load(model_file(build())), THREE)
    for engine, label in (("onnxruntime", "ONNX Runtime"), ("openvino", "OpenVINO"), ("tensorrt", "TensorRT")):
        assert report.verdict(engine).verdict == "fails"
        msgs = [f.message for f in report.findings if f.engine == engine and f.op_type == op and f.is_error]
        assert msgs, engine
        assert_user_message(msgs[0], f"operator {op} (domain {domain}) not supported by {label}", "provide a custom op")
    assert any(f.code == "CUSTOM-OP" for f in report.findings)
