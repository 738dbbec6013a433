"""The shapes run (inspect.run_shapes: ORT measures the shapes inference left open) reads a model's
external weights from their files instead of loading them into the proto it serializes (issue 35 item 3:
proto, its copy, the serialized bytes and the session held a 1.48 GiB decoder's weights 1.80x)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as oh
from onnx import numpy_helper

from studio.core.jobs import JobContext
from studio.inspect import edge_shapes


def test_the_shapes_run_reads_external_weights_from_their_file(tmp_path, monkeypatch):
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal([256, 512]).astype(np.float32), "w")
    g = oh.make_graph([oh.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                       oh.make_node("Relu", ["h"], ["y"], name="relu")], "ext",
                      [oh.make_tensor_value_info("x", T.FLOAT, ["n", 256])],
                      [oh.make_tensor_value_info("y", T.FLOAT, ["n", 512])], [w])
    path = tmp_path / "m" / "model.onnx"
    path.parent.mkdir()
    onnx.save(oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)]), str(path), save_as_external_data=True,
              location="model.onnx.data", size_threshold=0)

    def loaded(*a, **k):
        raise AssertionError("the weights were loaded into the proto")

    monkeypatch.setattr(onnx, "load_external_data_for_model", loaded)
    out = edge_shapes.run_shapes_job({"model_path": str(path), "names": ["h", "y"], "dims": {"n": 3},
                                      "keys": ["n"], "input_shapes": {"x": [3, 256]}, "external": True},
                                     {}, JobContext(tmp_path, tmp_path))
    # Oracle: plain ONNX Runtime on the file (its own external-data reader)
    x = np.ones([3, 256], np.float32)
    (y,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(["y"], {"x": x})
    assert out.data["shapes"] == {"h": [3, 512], "y": list(y.shape)}
    assert out.data["dtypes"] == {"h": "float32", "y": "float32"}
