"""Export fixtures: one real export of the CNN sample shared by the tests that only
read a bundle, and small models built in code (a QDQ INT8 model through
onnxruntime's own quantizer, a model with awkward names)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import SAMPLES


@pytest.fixture(scope="session")
def cnn_export(tmp_path_factory):
    """``export all`` of the CNN sample (the bundle is only read by the tests using it)."""
    from studio import api

    out = tmp_path_factory.mktemp("cnn-export")
    handle = api.load(SAMPLES / "cnn_unfused.onnx")
    return api.export(handle, "all", out, pool_key="export-tests")


def conv_model(path: Path, *, batch: str | int = "N", seed: int = 0, channels: int = 8) -> Path:
    """Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm, dynamic batch, weights inline."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((channels, 3, 3, 3)) * 0.3).astype(np.float32), "w")
    b = numpy_helper.from_array(np.zeros(channels, np.float32), "b")
    fw = numpy_helper.from_array((rng.standard_normal((4, channels)) * 0.3).astype(np.float32), "fw")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fw"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])], [w, b, fw])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return path


@pytest.fixture
def qdq_model(tmp_path) -> Path:
    """A QDQ INT8 model made by onnxruntime.quantization.quantize_static (explicit quantization)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    fp32 = conv_model(tmp_path / "fp32" / "convnet.onnx", batch=1)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(1)
            self.items = iter([{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.items, None)

    out = tmp_path / "qdq" / "convnet_int8.onnx"
    out.parent.mkdir()
    quantize_static(str(fp32), str(out), Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8)
    return out
