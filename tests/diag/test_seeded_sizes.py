"""Compatibility runs judge a model at a size it is made for: a free image height/width is
tried at 224 first, then at 48 (text recognizers), and the finding says which size ran."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from studio import api
from studio.core.feeds import check_feeds, choose_dims, input_specs


def _needs_48(path):
    """x [?, 3, ?, ?] + a [1, 3, 48, 48] constant: runs only when height and width are 48."""
    bias = nh.from_array(np.ones((1, 3, 48, 48), np.float32), "bias")
    g = h.make_graph([h.make_node("Add", ["x", "bias"], ["y"], name="add")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, None, None])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["N", 3, None, None])], [bias])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def test_image_inputs_get_224_then_48(tmp_path):
    model = onnx.load(_needs_48(tmp_path / "m.onnx"))
    specs = input_specs(model)
    assert choose_dims(specs) == {"N": 1}
    shapes = [feeds["x"].shape for feeds, _ in check_feeds(model)]
    assert shapes == [(1, 3, 224, 224), (1, 3, 48, 48)]
    assert [f["x"].shape for f, _ in check_feeds(model, {"x[2]": 48, "x[3]": 48})] == [(1, 3, 48, 48)]


def test_check_runs_at_the_second_size_and_says_so(tmp_path):
    report = api.check(api.load(_needs_48(tmp_path / "m.onnx")), ["onnxruntime", "openvino"])
    verdicts = {v.engine: v.verdict for v in report.verdicts}
    assert verdicts["onnxruntime"] == "runs" and verdicts["openvino"] in ("runs", "runs with warnings")
    seeded = [f for f in report.findings if f.code == "SEEDED-SIZE"]
    assert {f.engine for f in seeded} == {"onnxruntime", "openvino"}
    assert all("[1, 3, 48, 48]" in f.message for f in seeded)
    assert not any("Exception from" in f.message for f in report.findings)
