"""Exporting an IR 3 model whose initializers are also graph inputs (the old onnx-caffe2 style) to ONNX Runtime.

Found on the held-out corpus model onnx_light_inception_v2: ORT's optimized save folds ConstantOfShape(S) and
drops the initializer S but keeps S as a graph input, so both ONNX Runtime artifacts FAILED with "missing
feed(s) 'conv2/3x3/bn/sc_b_0__SHAPE', ..." (plain onnxruntime refuses that file the same way). The export now
runs remove-initializers-from-inputs first (the fix check already names for them) and says so. Reproduced on a
code-built model of that style; the oracle is plain onnxruntime on the original."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from studio import api


def _caffe2_style() -> onnx.ModelProto:
    shape = nh.from_array(np.array([1, 4], np.int64), "w_SHAPE")
    nodes = [h.make_node("ConstantOfShape", ["w_SHAPE"], ["w"], value=nh.from_array(np.array([0.5], np.float32))),
             h.make_node("Add", ["x", "w"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4]),
                                  h.make_tensor_value_info("w_SHAPE", T.INT64, [2])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 4])], [shape])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 9)])
    m.ir_version = 3
    onnx.checker.check_model(m)
    return m


def test_onnxruntime_export_of_initializers_as_inputs_runs_on_the_real_inputs(tmp_path):
    path = tmp_path / "legacy.onnx"
    onnx.save(_caffe2_style(), str(path))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["x"]
    np.testing.assert_allclose(sess.run(None, {"x": np.ones((1, 4), np.float32)})[0], 1.5)
    bundle = api.export(api.load(path), "onnxruntime", tmp_path / "out", zip=False)
    assert bundle.ok, bundle.failures
    artifact = next((bundle.bundle / "onnxruntime").glob("model.onnx"))
    plain = ort.InferenceSession(str(artifact), providers=["CPUExecutionProvider"])
    assert [i.name for i in plain.get_inputs()] == ["x"]
    np.testing.assert_allclose(plain.run(None, {"x": np.ones((1, 4), np.float32)})[0], 1.5)
