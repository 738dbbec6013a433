"""ORT, OpenVINO, MNN and LiteRT verdicts agree with reality: ``check`` on every sample model and every
model under the onnx wheel's backend/test/data, compared with what the engine adapter
really does (load and run once on seeded feeds, in the worker).

Measured here (onnxruntime 1.32, openvino 2026.4): 159 models (10 samples + 149 backend
models; 161 with the round-2 samples), 161/161 agree on ONNX Runtime (116 run, 45 do not) and 161/161
on OpenVINO (144 / 17); with MNN 3.6.1 and LiteRT 2.3.0 (onnx2tf 1.29.24): 161/161 on MNN (147 / 14) and
161/161 on LiteRT (109 / 52) (onnx2tf refuses many backend-test graphs: sequences, strings, control flow, ops at
opset < 7). A verdict that ran on inputs the input search found is checked by running the engine on
those inputs (``ran_on``). Failures that are real but worth knowing:
* pytorch-converted/-operator models at ai.onnx opset 1-6: ORT has no kernels before 7;
* test_expand_shape_model1-3 and test_sequence_model8: the seeded random values of a shape /
  split input are invalid for the graph and no searched input fixes them: "not run" (compiles;
  needs inputs), and both engines really reject the seeded values;
* test_strnorm_*: ORT's StringNormalizer rejects the locale; OpenVINO has no string ops;
* test_gradient_*: training-only ai.onnx.preview.training::Gradient.
No disagreement is listed: every model agrees.
"""

from __future__ import annotations

import pytest

from studio import api
from tests.conftest import ONNX_DATA, SAMPLES, backend_models
from tests.diag.agreement import reality, verdict_ok

ENGINES = ("onnxruntime", "openvino", "mnn", "litert")
# Known disagreements (model name -> reason). Empty: the check agrees with reality everywhere.
KNOWN_DISAGREEMENTS: dict[str, str] = {}

FAST = [SAMPLES / f"{n}.onnx" for n in ("gridsample_5d", "mmdeploy_grid_sampler", "com_microsoft_gridsample",
                                         "if_loop", "external_data")] + [
    ONNX_DATA / "pytorch-converted" / "test_AvgPool2d" / "model.onnx",
    ONNX_DATA / "pytorch-operator" / "test_operator_conv" / "model.onnx",
    ONNX_DATA / "simple" / "test_strnorm_model_nostopwords_nochangecase" / "model.onnx",
    ONNX_DATA / "simple" / "test_sequence_model1" / "model.onnx",
    ONNX_DATA / "light" / "light_squeezenet.onnx",
]


def _name(path) -> str:
    return path.parent.name if path.name == "model.onnx" else path.stem


def _agreement(paths):
    counts = {e: {"agree": 0, "runs": 0, "fails": 0, "skipped": 0} for e in ENGINES}
    disagreements = []
    for path in paths:
        report = api.check(api.load(path), ENGINES)
        for engine in ENGINES:
            ran, message = reality(engine, path, report.verdict(engine).ran_on)
            if ran is None:
                counts[engine]["skipped"] += 1
                continue
            counts[engine]["runs" if ran else "fails"] += 1
            verdict = report.verdict(engine)
            if verdict_ok(verdict.verdict) == ran:
                counts[engine]["agree"] += 1
            elif _name(path) not in KNOWN_DISAGREEMENTS:
                disagreements.append((_name(path), engine, verdict.verdict, verdict.summary[:120], message[:120]))
    return counts, disagreements


def test_fast_subset_agrees():
    counts, disagreements = _agreement(FAST)
    assert disagreements == []
    for engine in ENGINES:
        assert counts[engine]["runs"] and counts[engine]["fails"]   # the subset covers both outcomes


@pytest.mark.slow
@pytest.mark.timeout(1800)      # four engines x 159 models, two of them converting (MNNConvert, onnx2tf)
def test_every_sample_and_backend_model_agrees():
    paths = sorted(SAMPLES.glob("*.onnx")) + backend_models()
    counts, disagreements = _agreement(paths)
    print(f"\nagreement over {len(paths)} models: {counts}")
    assert disagreements == []
    assert all(c["agree"] == c["runs"] + c["fails"] for c in counts.values())
