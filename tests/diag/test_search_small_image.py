"""The input search of optimize's verification, export's reference and compare (``search_runs``) tries the
small image size check tries (48, ``check_feeds``' second set) before the large ones.

Found on the held-out corpus model paddleocr_en_ppocrv4_rec (x [N, 3, ?, W], a text recogniser whose height
the net fixes): check ran it at 48x48, but optimize verified "structure only: ONNX Runtime cannot run the
original on the verification inputs (x [1, 3, 224, 224])" and compare with its optimized version said FAIL,
because their search tried only 320 and 640. Reproduced on a code-built CRNN-style head: the height is
pooled by 48 and squeezed, so it runs only for 48 <= H < 96."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from studio import api


def _crnn_head() -> onnx.ModelProto:
    nodes = [h.make_node("Identity", ["x"], ["x_copy"], name="copy"),      # something for eliminate-identity
             h.make_node("MaxPool", ["x_copy"], ["p"], name="pool", kernel_shape=[48, 1], strides=[48, 1]),
             h.make_node("Constant", [], ["ax"], value=onnx.numpy_helper.from_array(np.array([2], np.int64))),
             h.make_node("Squeeze", ["p", "ax"], ["y"], name="squeeze")]
    g = h.make_graph(nodes, "crnn", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, None, "W"])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["N", 3, "W"])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


@pytest.fixture()
def crnn(tmp_path):
    path = tmp_path / "crnn.onnx"
    onnx.save(_crnn_head(), str(path))
    # the oracle: plain ORT refuses the seeded and searched heights, runs at 48
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for height in (224, 320, 640):
        with pytest.raises(Exception):
            sess.run(None, {"x": np.zeros((1, 3, height, 224), np.float32)})
    assert sess.run(None, {"x": np.zeros((1, 3, 48, 48), np.float32)})[0].shape == (1, 3, 48)
    return path


def test_optimize_verifies_on_the_small_image_size(crnn, tmp_path):
    result = api.optimize(api.load(crnn), passes=["eliminate-identity"], out_path=tmp_path / "o" / "crnn.onnx")
    record = next(r for r in result.records if r.name == "eliminate-identity")
    assert record.modified and record.verification.numeric_status == "passed", record.verification


def test_compare_runs_on_the_small_image_size(crnn):
    r = api.compare(crnn, crnn)
    assert r.ok, r.summary()
    assert "48" in r.feeds["source"], r.feeds
