"""A model float16 breaks unless BatchNormalization is folded in float32 first: Conv + BN whose running variances
(1.4e6-4.8e7, as corpus rapidocr_ppocrv3_det's BN after a ConvTranspose) are beyond float16's 65504. Shared by the
precision and export tests of that fold."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx import numpy_helper as nh


def conv_bn_beyond_fp16() -> onnx.ModelProto:
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


def offset_beyond_fp16_precision() -> onnx.ModelProto:
    """y = x + 1000 - 1000 with the sum stored in float16 between a Slice and a Reshape (ONNX Runtime's CPU provider
    runs those two in float16): float16 spaces values near 1000 by 0.5, so x ~ N(0, 1) comes back in steps of
    0.5 (cosine ~0.95) though every value is in range: a loss of precision, which no node kept float32 for its
    range mends. For what must stay float32 when convert-fp16 does not verify."""
    inits = [nh.from_array(np.array(1000, np.float32), "k"), nh.from_array(np.array([0], np.int64), "s0"),
             nh.from_array(np.array([64], np.int64), "s1"), nh.from_array(np.array([1], np.int64), "ax"),
             nh.from_array(np.array([1, 64], np.int64), "shape")]
    g = helper.make_graph([helper.make_node("Add", ["x", "k"], ["a"]),
                           helper.make_node("Slice", ["a", "s0", "s1", "ax"], ["s"]),
                           helper.make_node("Reshape", ["s", "shape"], ["r"]),
                           helper.make_node("Sub", ["r", "k"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m
