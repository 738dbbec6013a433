"""Models whose values are not all tensors (RELIABILITY R40), built in code.

skl2onnx is not installed here; its most common output is reproduced by hand:
a LinearClassifier whose probabilities pass through ZipMap into ``seq(map(int64, float))``."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

_OPSET = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]


def zipmap_classifier(n_features: int = 4, classes: tuple[int, ...] = (0, 1, 2)) -> onnx.ModelProto:
    """What skl2onnx writes for a LogisticRegression: label + ZipMap'd probabilities.

    An Identity before the classifier gives the passes something they would remove."""
    rng = np.random.default_rng(0)
    coefs = rng.standard_normal((len(classes), n_features)).astype(np.float32)
    nodes = [
        helper.make_node("Identity", ["X"], ["x_copy"], name="copy_input"),
        helper.make_node("LinearClassifier", ["x_copy"], ["label", "probability_tensor"], domain="ai.onnx.ml",
                         name="linear_classifier", classlabels_ints=list(classes),
                         coefficients=coefs.ravel().tolist(), intercepts=[0.1] * len(classes),
                         multi_class=1, post_transform="SOFTMAX"),
        helper.make_node("Identity", ["label"], ["output_label"], name="label_out"),
        helper.make_node("ZipMap", ["probability_tensor"], ["output_probability"], domain="ai.onnx.ml",
                         name="zipmap", classlabels_int64s=list(classes)),
    ]
    seq_map = helper.make_sequence_type_proto(helper.make_map_type_proto(
        TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])))
    g = helper.make_graph(nodes, "zipmap_classifier",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", n_features])],
                          [helper.make_tensor_value_info("output_label", TensorProto.INT64, ["N"]),
                           helper.make_value_info("output_probability", seq_map)])
    return helper.make_model(g, opset_imports=_OPSET, ir_version=8, producer_name="skl2onnx-like")


def sequence_model() -> onnx.ModelProto:
    """SequenceConstruct / SequenceAt / SequenceInsert: a sequence output and a tensor read from it."""
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    idx = helper.make_tensor("idx", TensorProto.INT64, [], [1])
    nodes = [
        helper.make_node("Add", ["X", "one"], ["x1"], name="add_one"),
        helper.make_node("Identity", ["x1"], ["x1_copy"], name="copy"),
        helper.make_node("SequenceConstruct", ["X", "x1_copy"], ["seq"], name="construct"),
        helper.make_node("SequenceAt", ["seq", "idx"], ["picked"], name="at"),
        helper.make_node("Mul", ["picked", "picked"], ["Y"], name="square"),
    ]
    seq_t = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2, 3]))
    g = helper.make_graph(nodes, "sequence_model",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3]),
                           helper.make_value_info("seq", seq_t)], [one, idx])
    return helper.make_model(g, opset_imports=_OPSET[:1], ir_version=8)


def sequence_input_model() -> onnx.ModelProto:
    """A graph input that is a sequence of tensors (SequenceAt reads its first element)."""
    idx = helper.make_tensor("idx", TensorProto.INT64, [], [0])
    nodes = [helper.make_node("SequenceAt", ["S", "idx"], ["first"], name="at"),
             helper.make_node("Relu", ["first"], ["Y"], name="relu")]
    seq_t = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2, 3]))
    g = helper.make_graph(nodes, "sequence_input",
                          [helper.make_value_info("S", seq_t)],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])], [idx])
    return helper.make_model(g, opset_imports=_OPSET[:1], ir_version=8)


def optional_model() -> onnx.ModelProto:
    """Optional / OptionalHasElement / OptionalGetElement, with an optional-typed output."""
    nodes = [
        helper.make_node("Relu", ["X"], ["r"], name="relu"),
        helper.make_node("Optional", ["r"], ["opt"], name="wrap"),
        helper.make_node("OptionalHasElement", ["opt"], ["has"], name="has"),
        helper.make_node("OptionalGetElement", ["opt"], ["got"], name="get"),
        helper.make_node("Identity", ["got"], ["Y"], name="copy"),
    ]
    opt_t = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2, 3]))
    g = helper.make_graph(nodes, "optional_model",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3]),
                           helper.make_tensor_value_info("has", TensorProto.BOOL, []),
                           helper.make_value_info("opt", opt_t)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
