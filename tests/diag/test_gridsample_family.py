"""The GridSample family: the right verdict per engine, the right fix offered, and the
fix applied through the verifying pipeline runs on ORT (and OpenVINO for 4-D) and
matches the NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest

from diagnostics.reference_ops import grid_sample
from studio import api
from studio.core.engines import get_engine
from studio.core.workspace import Workspace
from tests.conftest import SAMPLES, sha256_file
from tests.engine_facts import openvino_reduces_precision_by_default

# OpenVINO's verdict on a model it runs: "with warnings" only where it computes in bf16/f16 by
# default (OV-PRECISION), as OpenVINO itself reports for this CPU (R45: AVX2-only CPUs say f32).
OV_RUNS = "runs with warnings" if openvino_reduces_precision_by_default() else "runs"

# The engines these expectations are about (the default set adds MNN and LiteRT where installed).
THREE = ("onnxruntime", "openvino", "tensorrt")

# sample -> ({engine target label: verdict}, fix offered)
EXPECTED = {
    "gridsample_4d": ({"onnxruntime": "runs", "openvino": OV_RUNS, "tensorrt": "runs"}, None),
    "gridsample_5d": ({"onnxruntime": "runs", "openvino": "fails", "tensorrt": "fails"}, None),
    "mmdeploy_grid_sampler": ({"onnxruntime": "fails", "openvino": "fails", "tensorrt": "runs with warnings"},
                              "legalize-grid-sampler"),
    "com_microsoft_gridsample": ({"onnxruntime": "runs", "openvino": "fails", "tensorrt": "fails"},
                                 "gridsample-to-standard"),
}


@pytest.mark.parametrize("sample", sorted(EXPECTED))
def test_verdicts_and_fix(sample):
    report = api.check(api.load(SAMPLES / f"{sample}.onnx"), THREE, eps=("cpu", "cuda"))
    verdicts, fix = EXPECTED[sample]
    for engine, expected in verdicts.items():
        assert report.verdict(engine).verdict == expected, (engine, report.verdict(engine))
    assert report.verdict("onnxruntime", "CPUExecutionProvider").decided_by == "real session"
    assert report.verdict("tensorrt").decided_by == "table only"
    assert (report.fixes()[0] if report.fixes() else None) == fix
    if sample == "gridsample_5d":   # the CUDA EP's GridSample is 4-D: falls back to CPU
        assert report.verdict("onnxruntime", "CUDAExecutionProvider").verdict == "runs with warnings"
        assert any(f.code == "ORT-CPU-FALLBACK" and f.node == "/GridSample" for f in report.findings)
        assert any(f.code == "OV-CONVERT-ERROR" and "4D" in f.message for f in report.findings)


def _feeds(shape_x, shape_g, seed=3):
    rng = np.random.default_rng(seed)
    return {"input": rng.standard_normal(shape_x).astype(np.float32),
            "grid": rng.uniform(-1.1, 1.1, shape_g).astype(np.float32)}


@pytest.mark.parametrize("sample,fix", [("mmdeploy_grid_sampler", "legalize-grid-sampler"),
                                        ("com_microsoft_gridsample", "gridsample-to-standard")])
def test_fix_runs_everywhere_and_matches_reference(tmp_path, sample, fix):
    source = SAMPLES / f"{sample}.onnx"
    before = sha256_file(source)
    ws = Workspace.create(tmp_path)
    v0 = ws.add_file(source)
    v1 = api.apply_fix(ws, v0.id, fix)
    assert v1.parent == v0.id and v1.provenance["fix"] == fix
    record = v1.provenance["pipeline"][0]
    assert record["status"] == "changed" and record["verification"]["ok"]
    if sample == "mmdeploy_grid_sampler":   # ORT cannot run the original: the reference evaluator was the oracle
        assert "reference evaluator" in v1.provenance["reference"]
    report = api.check(ws.handle(v1.id), THREE)
    assert {v.engine: v.verdict for v in report.verdicts} == {"onnxruntime": "runs", "openvino": OV_RUNS,
                                                              "tensorrt": "runs"}
    fixed = ws.handle(v1.id).path
    feeds = _feeds((1, 3, 16, 16), (1, 8, 8, 2))
    # Reference: the conv+relu part from ORT on the standard sample, then the NumPy GridSample.
    ort_out = get_engine("ort").run(fixed, feeds).outputs["output"]
    ov_out = get_engine("ov").run(fixed, feeds).outputs["output"]
    std = get_engine("ort").run(SAMPLES / "gridsample_4d.onnx", feeds, ).outputs["output"]
    np.testing.assert_allclose(ort_out, std, atol=1e-5)
    np.testing.assert_allclose(ov_out, ort_out, atol=1e-4)
    assert sha256_file(source) == before


def test_reference_matches_5d_sample_on_ort():
    import onnx
    from onnx import helper

    m = onnx.load(str(SAMPLES / "gridsample_5d.onnx"))
    feeds = _feeds((1, 2, 4, 8, 8), (1, 4, 4, 4, 3))
    relu_out = "/relu/Relu_output_0" if any("/relu/Relu_output_0" in n.output for n in m.graph.node) else \
        next(n.output[0] for n in m.graph.node if n.op_type == "Relu")
    m.graph.output.append(helper.make_tensor_value_info(relu_out, onnx.TensorProto.FLOAT, None))
    import onnxruntime as ort

    y, r = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        ["output", relu_out], feeds)
    np.testing.assert_allclose(grid_sample(r, feeds["grid"], "linear", "zeros", 0), y, atol=1e-5)
