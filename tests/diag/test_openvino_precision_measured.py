"""OV-PRECISION says how much OpenVINO's default (bf16 on CPUs with avx512_bf16/AMX) moves the outputs,
measured on the inputs the check ran, not a fixed figure: the check said "about 1e-2 here" for every model,
where plain OpenVINO gives 1.0e-5 on corpus owwjs_hello_deepa and 0.35 on oww_wasm_embedding_model.
The oracle is plain OpenVINO: the model compiled at its default and at INFERENCE_PRECISION_HINT=f32 on
the same inputs."""

from __future__ import annotations

import numpy as np
import onnx
import openvino as ov
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from studio import api
from studio.core.feeds import input_specs, random_feeds
from tests.engine_facts import openvino_reduces_precision_by_default

pytestmark = pytest.mark.skipif(not openvino_reduces_precision_by_default(),
                                reason="OpenVINO computes in f32 by default on this CPU: no OV-PRECISION")


def _matmul_model() -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    w = nh.from_array((rng.standard_normal((64, 32)) * 10).astype(np.float32), "w")
    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 64])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 32])], [w])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def test_ov_precision_reports_the_measured_difference(tmp_path):
    path = tmp_path / "matmul.onnx"
    onnx.save(_matmul_model(), path)
    feeds = random_feeds(input_specs(onnx.load(path)), seed=0)
    core = ov.Core()
    f32 = core.compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})(feeds)
    low = core.compile_model(str(path), "CPU")(feeds)
    want = float(np.abs(np.asarray(low[0], np.float64) - np.asarray(f32[0], np.float64)).max())
    scale = float(np.abs(np.asarray(f32[0])).max())
    assert want > 1e-3          # bf16 really moves this MatMul

    report = api.check(api.load(path), ["openvino"])
    found = [f for f in report.findings if f.code == "OV-PRECISION"]
    assert len(found) == 1 and found[0].severity == "warning"
    assert f"max abs {want:.3g} on output 'y', whose values reach {scale:.3g}" in found[0].message
    assert "1e-2" not in found[0].message


def test_ov_precision_with_integer_outputs_only_says_why_not_measured(tmp_path):
    """An ArgMax-only model: nothing float to compare, so no figure is claimed."""
    rng = np.random.default_rng(7)
    w = nh.from_array((rng.standard_normal((64, 32)) * 10).astype(np.float32), "w")
    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("ArgMax", ["m"], ["k"], axis=1)], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [1, 64])], [h.make_tensor_value_info("k", T.INT64, [1, 1])],
                     [w])
    path = tmp_path / "argmax.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), path)
    report = api.check(api.load(path), ["openvino"])
    (found,) = [f for f in report.findings if f.code == "OV-PRECISION"]
    assert "not measured: no float output to compare" in found.message and "max abs" not in found.message
