"""A dim named ``?`` (paddle2onnx on OCR inputs: ``[-1, 3, '?', '?']``) means "any size" on each axis, not one
symbol tying height to width: the studio pins each axis on its own, as ONNX Runtime runs it (oracle: a
plain ORT run's real output shapes)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from studio import api
from studio.core.feeds import input_specs, unnamed_dim_key
from studio.core.types import is_placeholder_dim
from tests.corpus import corpus_model


def _pool_model(tmp_path, placeholder: str):
    """Code-built: x[N, 3, ?, ?] -> MaxPool 2x2 -> y (labelled: not a real export)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, placeholder, placeholder])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("placeholder", ["?", "-1", "unknown", "None"])
def test_each_placeholder_axis_is_its_own_dim(tmp_path, placeholder):
    path = _pool_model(tmp_path, placeholder)
    handle = api.load(path)
    spec = next(s for s in input_specs(handle.proto) if s.name == "x")
    assert spec.shape[2] is None and spec.shape[3] is None, spec.shape          # not the symbol '?'
    dims = {unnamed_dim_key("x", 0): 1, unnamed_dim_key("x", 2): 48, unnamed_dim_key("x", 3): 192}
    edges = {e.name: e.shape for e in api.inspect(handle, dims).edges}
    real = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.zeros((1, 3, 48, 192), np.float32)})[0].shape
    assert tuple(edges["y"]) == real == (1, 3, 24, 96)


def test_a_real_name_is_still_one_symbol():
    assert not is_placeholder_dim("height") and not is_placeholder_dim("unk__35") and is_placeholder_dim(" ? ")


def test_paddle_ocr_recognizer_height_and_width_apart():
    """Real: rapidocr's PP-OCRv3 recognizer (x: [-1, 3, '?', '?']) at 1x3x48x320, against plain ORT."""
    path = corpus_model("rapidocr_ppocrv3_rec")
    handle = api.load(path)
    dims = {unnamed_dim_key("x", 0): 1, unnamed_dim_key("x", 2): 48, unnamed_dim_key("x", 3): 320}
    edges = {e.name: e.shape for e in api.inspect(handle, dims).edges}
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out = sess.get_outputs()[0].name
    real = sess.run([out], {"x": np.zeros((1, 3, 48, 320), np.float32)})[0].shape
    assert tuple(edges[out]) == real
