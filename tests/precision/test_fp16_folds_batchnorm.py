"""precision's fp16 variant folds BatchNormalization into its Conv in float32 before converting: a BN whose
running variance is beyond float16's range (corpus rapidocr_ppocrv3_det: 4.8e7 after a ConvTranspose; fp16's
largest value is 65504) becomes inf in float16 and the layer's output collapses to its bias. Oracles: ORT's own
float16 converter on the raw model (broken, by plain ORT), and plain ORT on the variant the flow kept."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.transformers.float16 import convert_float_to_float16

from studio import api
from tests.conftest import save
from tests.fp16_models import conv_bn_beyond_fp16


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_fp16_of_a_batchnorm_beyond_fp16_range_is_folded_first(tmp_path):
    src = save(conv_bn_beyond_fp16(), tmp_path / "m.onnx")
    x = {"x": np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    want = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, x)[0]
    raw = save(convert_float_to_float16(onnx.load(str(src)), keep_io_types=True), tmp_path / "raw16.onnx")
    broken = ort.InferenceSession(str(raw), providers=["CPUExecutionProvider"]).run(None, x)[0]
    assert _cosine(want, broken) < 0.95                        # the plain conversion: variance inf in float16
    report = api.precision(api.load(src), variants=["fp32", "fp16"], samples=2, latency_budget_s=1,
                           out_dir=tmp_path / "variants")
    fp16 = report.variant("fp16")
    assert fp16.status == "ok" and fp16.cosine > 0.999, (fp16.status, fp16.error, fp16.cosine)
    kept = onnx.load(fp16.path)
    assert "BatchNormalization" not in {n.op_type for n in kept.graph.node}
    got = ort.InferenceSession(fp16.path, providers=["CPUExecutionProvider"]).run(None, x)[0]
    assert _cosine(want, got) > 0.999
