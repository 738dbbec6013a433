"""An Ultralytics-style NMS-free detection head (opset 20) whose exporter wrote a wrong dim formula.

Two levels (strides 2 and 4) flattened into one anchor axis, a class-max score, a
TopK whose k is ``Min(300, anchors)`` read from a Shape (ONNX shape inference cannot
follow ``Min``), the kept anchors gathered, and a second TopK with the same k over the
kept scores (a re-sort, as the NMS-free postprocess does). The ``value_info`` formulas
before the TopK are right; the one written for every value after it brackets the second
level wrong: ``floor(width - 4)/4 + 1`` for ``(floor((width - 4)/4) + 1)``. At 12x16 it says
58 where the model makes 6*8 + 3*4 = 60. A static model written from it declares the
kept scores as 58 long while ONNX Runtime folds k to 60: loading fails with
"TopK ... Axis has less than the requested k elements".
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

HEIGHT, WIDTH = 12, 16
REAL_K = 60                 # 6*8 + 3*4 anchors (all kept: fewer than 300)
FORMULA_K = 58              # what the exporter's formula says at 12x16
CHANNELS = 80

_L1 = "(floor((height - 2)/2) + 1)*(floor((width - 2)/2) + 1)"
_L2 = "(floor((height - 4)/4) + 1)*(floor((width - 4)/4) + 1)"
_L2_WRONG = "floor((height - 4)/4 + 1)*floor(width - 4)/4 + 1"
ANCHORS = f"{_L1} + {_L2}"
WRONG_K = f"Min(300, {_L1} + {_L2_WRONG})"


def build() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    c = CHANNELS
    inits = [nh.from_array(rng.standard_normal((c, 3, 2, 2)).astype(np.float32), "w1"),
             nh.from_array((rng.standard_normal((c, c, 2, 2)) * 0.1).astype(np.float32), "w2"),
             nh.from_array(np.array([0, c, -1], np.int64), "flat"),
             nh.from_array(np.array([300], np.int64), "max_det"),
             nh.from_array(np.array([1], np.int64), "one"),
             nh.from_array(np.array([0], np.int64), "zero"),
             nh.from_array(np.array([2], np.int64), "class_axis")]
    nodes = [
        h.make_node("Conv", ["images", "w1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="stem"),
        h.make_node("Conv", ["p1", "w2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2], name="down"),
        h.make_node("Reshape", ["p1", "flat"], ["f1"], name="flat1"),
        h.make_node("Reshape", ["p2", "flat"], ["f2"], name="flat2"),
        h.make_node("Concat", ["f1", "f2"], ["cat"], axis=2, name="levels"),
        h.make_node("Transpose", ["cat"], ["anchors"], perm=[0, 2, 1], name="to_anchors"),
        h.make_node("ReduceMax", ["anchors", "class_axis"], ["scores"], keepdims=0, name="class_max"),
        h.make_node("Shape", ["scores"], ["scores_shape"], name="shape"),
        h.make_node("Gather", ["scores_shape", "one"], ["n_anchors"], axis=0, name="n_anchors"),
        h.make_node("Min", ["n_anchors", "max_det"], ["k"], name="k"),
        h.make_node("TopK", ["scores", "k"], ["top_scores", "top_index"], axis=1, name="topk"),
        h.make_node("Squeeze", ["anchors", "zero"], ["anchors0"], name="squeeze_anchors"),
        h.make_node("Squeeze", ["top_index", "zero"], ["index0"], name="squeeze_index"),
        h.make_node("Gather", ["anchors0", "index0"], ["dets"], axis=0, name="gather_dets"),
        h.make_node("TopK", ["top_scores", "k"], ["scores_sorted", "order"], axis=1, name="resort"),
    ]
    h1, w1 = "floor((height - 2)/2) + 1", "floor((width - 2)/2) + 1"
    vi = [h.make_tensor_value_info("p1", T.FLOAT, ["batch", c, h1, w1]),
          h.make_tensor_value_info("cat", T.FLOAT, ["batch", c, ANCHORS]),
          h.make_tensor_value_info("anchors", T.FLOAT, ["batch", ANCHORS, c]),
          h.make_tensor_value_info("scores", T.FLOAT, ["batch", ANCHORS]),
          h.make_tensor_value_info("top_scores", T.FLOAT, ["batch", WRONG_K]),
          h.make_tensor_value_info("top_index", T.INT64, ["batch", WRONG_K]),
          h.make_tensor_value_info("index0", T.INT64, [WRONG_K])]
    outputs = [h.make_tensor_value_info("dets", T.FLOAT, [WRONG_K, c]),
               h.make_tensor_value_info("scores_sorted", T.FLOAT, ["batch", WRONG_K])]
    g = h.make_graph(nodes, "nmsfree_head",
                     [h.make_tensor_value_info("images", T.FLOAT, ["batch", 3, "height", "width"])],
                     outputs, inits, value_info=vi)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 20)], ir_version=10, producer_name="pytorch")
    m.metadata_props.add(key="imgsz", value=f"[{HEIGHT}, {WIDTH}]")
    m.metadata_props.add(key="task", value="detect")
    onnx.checker.check_model(m)
    return m
