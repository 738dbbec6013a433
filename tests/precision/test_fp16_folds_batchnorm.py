"""precision's fp16 variant folds BatchNormalization into its Conv in float32 before converting: a BN whose
running variance is beyond float16's range (corpus rapidocr_ppocrv3_det: 4.8e7 after a ConvTranspose; fp16's
largest value is 65504) becomes inf in float16 and the layer's output collapses to its bias. Oracles: ORT's own
float16 converter on the raw model (broken, by plain ORT), and plain ORT on the variant the flow kept."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper
from onnx import numpy_helper as nh
from onnxruntime.transformers.float16 import convert_float_to_float16

from studio import api
from tests.conftest import save


def _conv_bn() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [nh.from_array((rng.standard_normal((4, 3, 3, 3)) * 1000).astype(np.float32), "W"),
             nh.from_array(np.array([0.5, 1, 1.2, 0.8], np.float32), "g"),
             nh.from_array(np.array([0.1, -0.2, 0.3, 0], np.float32), "b"),
             nh.from_array(np.array([-700, 50, 0, 10], np.float32), "mean"),
             nh.from_array(np.array([4.8e7, 1.4e6, 2e7, 9e6], np.float32), "var")]
    g = helper.make_graph([helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
                           helper.make_node("BatchNormalization", ["c", "g", "b", "mean", "var"], ["y"], epsilon=1e-5)],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_fp16_of_a_batchnorm_beyond_fp16_range_is_folded_first(tmp_path):
    src = save(_conv_bn(), tmp_path / "m.onnx")
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
