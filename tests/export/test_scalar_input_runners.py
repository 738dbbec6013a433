"""A scalar (rank-0) input reaches every engine's bound run as a scalar: ``np.ascontiguousarray`` returns at
least 1-D, so a 0-d feed became shape (1,) in OpenVINO's bind().

Found exporting the held-out corpus model silero_vad_v4_legacy (sr int64[]) to OpenVINO: the IR FAILED with
"Can't set the input tensor with index: 1, because the model input (shape=[]) and the tensor (shape=(1)) are
incompatible", while plain OpenVINO runs that IR on a 0-d sr. Reproduced on a code-built scalar-input model;
the oracle is plain onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h

from studio import api


def _scalar_input_model() -> onnx.ModelProto:
    nodes = [h.make_node("Cast", ["rate"], ["r"], to=T.FLOAT), h.make_node("Mul", ["x", "r"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 8]),
                                  h.make_tensor_value_info("rate", T.INT64, [])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 8])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def test_openvino_export_of_a_scalar_input_model_verifies(tmp_path):
    path = tmp_path / "scalar.onnx"
    onnx.save(_scalar_input_model(), str(path))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert sess.run(None, {"x": np.ones((1, 8), np.float32), "rate": np.array(3, np.int64)})[0][0, 0] == 3.0
    bundle = api.export(api.load(path), "openvino", tmp_path / "out", zip=False)
    assert bundle.ok, bundle.failures
    assert bundle.manifest["verification"]["input_shapes"]["rate"] == []


def test_no_runner_binds_through_ascontiguousarray():
    """The mechanism: OpenVINO's and TensorRT's bound runs keep a feed's rank (np.asarray(..., order='C'), not
    ascontiguousarray, which makes a 0-d array 1-D)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "studio" / "core" / "engines"
    offenders = [f"{p.name}:{i}" for p in (root / "openvino.py", root / "tensorrt.py")
                 for i, line in enumerate(p.read_text().splitlines(), 1)
                 if "np.ascontiguousarray(" in line and not line.strip().startswith("#")]
    assert offenders == [], offenders
