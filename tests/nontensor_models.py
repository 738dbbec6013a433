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


def topk_detector(n: int = 16, k: int = 6, nudge: dict[int, float] | None = None) -> onnx.ModelProto:
    """A detection head: TopK over per-box scores, boxes gathered by the picked indices and
    concatenated with the scores ([k, 5] detections), plus the raw indices and scores.
    ``nudge`` adds tiny amounts to some scores (a second engine's rounding, made certain)."""
    rng = np.random.default_rng(3)
    boxes = (rng.random((n, 4)) * 100).astype(np.float32)
    delta = np.zeros((1, n), np.float32)
    for i, v in (nudge or {}).items():
        delta[0, i] = v
    nodes = [
        helper.make_node("Add", ["scores", "delta"], ["s"], name="rescore"),
        helper.make_node("TopK", ["s", "k"], ["top_scores", "top_idx"], name="topk", axis=-1),
        helper.make_node("Squeeze", ["top_idx", "axis0"], ["idx"], name="squeeze_idx"),
        helper.make_node("Gather", ["boxes", "idx"], ["picked"], name="gather_boxes", axis=0),
        helper.make_node("Transpose", ["top_scores"], ["score_col"], name="to_column", perm=[1, 0]),
        helper.make_node("Concat", ["picked", "score_col"], ["detections"], name="concat", axis=1),
    ]
    inits = [helper.make_tensor("k", TensorProto.INT64, [1], [k]),
             helper.make_tensor("axis0", TensorProto.INT64, [1], [0]),
             onnx.numpy_helper.from_array(boxes, "boxes"), onnx.numpy_helper.from_array(delta, "delta")]
    g = helper.make_graph(nodes, "topk_detector",
                          [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, n])],
                          [helper.make_tensor_value_info("detections", TensorProto.FLOAT, [k, 5]),
                           helper.make_tensor_value_info("top_idx", TensorProto.INT64, [1, k]),
                           helper.make_tensor_value_info("top_scores", TensorProto.FLOAT, [1, k])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def near_tied_scores(n: int = 16) -> np.ndarray:
    """Scores where boxes 3 and 5 are 2e-7 apart (5 first), both in the top 6."""
    s = np.linspace(0.1, 0.5, n).astype(np.float32)
    s[3], s[5] = np.float32(0.9), np.float32(0.9) + np.float32(2e-7)
    return s.reshape(1, n)


def sentence_encoder(vocab: int = 64, hidden: int = 32, seq: str = "sequence") -> onnx.ModelProto:
    """A small fp32 BERT-style encoder (embedding Gather, one attention block with Softmax,
    LayerNormalization, mean pooling) whose extra outputs are int64/bool copies of its inputs:
    ``input_ids`` through Identity, ``attention_mask`` through Cast (as some exporters write)."""
    rng = np.random.default_rng(7)

    def w(name: str, *shape: int) -> onnx.TensorProto:
        return onnx.numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    nodes = [
        helper.make_node("Gather", ["emb", "input_ids"], ["x"], name="embed"),
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="q"),
        helper.make_node("MatMul", ["x", "wk"], ["k"], name="k"),
        helper.make_node("MatMul", ["x", "wv"], ["v"], name="v"),
        helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"], name="qk"),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"], name="scale"),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], name="mask_float", to=TensorProto.FLOAT),
        helper.make_node("Sub", ["one", "mask_f"], ["inv"], name="inv_mask"),
        helper.make_node("Mul", ["inv", "neg"], ["bias"], name="mask_bias"),
        helper.make_node("Unsqueeze", ["bias", "axis1"], ["bias3"], name="bias3"),
        helper.make_node("Add", ["scaled", "bias3"], ["masked"], name="apply_mask"),
        helper.make_node("Softmax", ["masked"], ["probs"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["ctx"], name="context"),
        helper.make_node("MatMul", ["ctx", "wo"], ["proj"], name="out_proj"),
        helper.make_node("Add", ["proj", "bo"], ["proj_b"], name="out_bias"),
        helper.make_node("Add", ["proj_b", "x"], ["res"], name="residual"),
        helper.make_node("LayerNormalization", ["res", "ln_g", "ln_b"], ["hidden"], name="ln", axis=-1),
        helper.make_node("ReduceMean", ["hidden"], ["sentence_embedding"], name="pool", axes=[1], keepdims=0),
        helper.make_node("Identity", ["input_ids"], ["input_ids_out"], name="ids_copy"),
        helper.make_node("Cast", ["attention_mask"], ["mask_out"], name="mask_copy", to=TensorProto.BOOL),
    ]
    inits = [w("emb", vocab, hidden), w("wq", hidden, hidden), w("wk", hidden, hidden), w("wv", hidden, hidden),
             w("wo", hidden, hidden), w("bo", hidden),
             onnx.numpy_helper.from_array(np.ones(hidden, np.float32), "ln_g"),
             onnx.numpy_helper.from_array(np.zeros(hidden, np.float32), "ln_b"),
             helper.make_tensor("scale", TensorProto.FLOAT, [], [hidden ** -0.5]),
             helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
             helper.make_tensor("neg", TensorProto.FLOAT, [], [-1e4]),
             helper.make_tensor("axis1", TensorProto.INT64, [1], [1])]
    g = helper.make_graph(nodes, "sentence_encoder",
                          [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", seq]),
                           helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", seq])],
                          [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hidden]),
                           helper.make_tensor_value_info("input_ids_out", TensorProto.INT64, ["batch", seq]),
                           helper.make_tensor_value_info("mask_out", TensorProto.BOOL, ["batch", seq])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
