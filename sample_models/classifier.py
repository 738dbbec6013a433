"""A small image classifier whose INT8 version loses top-1 unless one layer stays in float.

One channel after the first conv is scaled by 3000 (an activation outlier, as
in real CNNs after a bad BN fold), while the logits depend on the other small
channels: a per-tensor INT8 scale fit to the outlier leaves them a few levels,
so plain INT8 flips top-1; keeping that tensor in float (accuracy-aware INT8)
restores it. Input ``x[1, 3, 64, 64]`` (ImageNet-normalized RGB), ``logits[1, 5]``.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build_image_classifier() -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    w1 = rng.normal(0, 0.5, (8, 3, 3, 3)).astype(np.float32)
    scale = np.ones((1, 8, 1, 1), np.float32)
    scale[0, 0] = 3000.0
    w2 = rng.normal(0, 1, (5, 8, 1, 1)).astype(np.float32)
    w2[:, 0] = 1e-6
    nodes = [helper.make_node("Conv", ["x", "features.0.weight"], ["/features.0/Conv_output_0"], strides=[2, 2],
                              pads=[1, 1, 1, 1], kernel_shape=[3, 3], name="/features.0/Conv"),
             helper.make_node("Relu", ["/features.0/Conv_output_0"], ["/features.1/Relu_output_0"],
                              name="/features.1/Relu"),
             helper.make_node("Mul", ["/features.1/Relu_output_0", "features.2.scale"], ["/features.2/Mul_output_0"],
                              name="/features.2/Mul"),
             helper.make_node("Conv", ["/features.2/Mul_output_0", "head.weight"], ["/head/Conv_output_0"],
                              kernel_shape=[1, 1], name="/head/Conv"),
             helper.make_node("GlobalAveragePool", ["/head/Conv_output_0"], ["/pool/GlobalAveragePool_output_0"],
                              name="/pool/GlobalAveragePool"),
             helper.make_node("Flatten", ["/pool/GlobalAveragePool_output_0"], ["logits"], name="/Flatten")]
    g = helper.make_graph(nodes, "main_graph", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 64, 64])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 5])],
                          [numpy_helper.from_array(w1, "features.0.weight"),
                           numpy_helper.from_array(scale, "features.2.scale"),
                           numpy_helper.from_array(w2, "head.weight")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="onnx-studio-samples",
                              producer_version="1.0",
                              doc_string="Image classifier with an activation-outlier channel: plain INT8 loses "
                                         "top-1, accuracy-aware INT8 keeps it. x[1,3,64,64] -> logits[1,5].")
    model.ir_version = 8
    return model
