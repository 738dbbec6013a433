"""Edge and weight shape labels (``1×64×56×56``) are written once per distinct shape (issue 35 item 2: the
viewer's scene of a 10k-node model labels ~15k edges and weights with a few dozen shapes). Oracle: the rule
written out here (``×`` between dims, ``?`` for unknown, names kept, long ones cut to 12 characters + ``…``,
``scalar`` for rank 0)."""

from __future__ import annotations

import onnx

from studio.graphview import boxes
from studio.graphview.hierarchy import build_hierarchy
from studio.graphview.model import graph_from_proto
from studio.graphview.scene import build_scene
from tests.conftest import SAMPLES


def _oracle(shape) -> str:
    if not shape:
        return "scalar"
    return "×".join("?" if d is None else (str(d) if len(str(d)) <= 14 else str(d)[:12] + "…") for d in shape)


def test_shape_labels_follow_the_rule_for_tuples_and_lists():
    for shape in [(), (1, 64, 56, 56), ("batch", None, 3), ("a_very_long_symbolic_dim_name", 7), [2, 3], [None]]:
        assert boxes._dims_text(shape) == _oracle(shape), shape


def test_a_scene_labels_each_distinct_shape_once():
    graph = graph_from_proto(onnx.load(str(SAMPLES / "yolo_detector.onnx")))
    labelled = [t.shape for t in graph.tensors.values() if t.shape is not None]
    assert len(labelled) > len(set(labelled))                 # shapes repeat across the edges
    boxes._shape_text.cache_clear()
    scene, _ = build_scene(graph, build_hierarchy(graph))
    info = boxes._shape_text.cache_info()
    assert info.hits > 0 and info.misses <= len(set(labelled)) + len(graph.weights)
    shown = {row[3] for row in scene["edges"] if row[3]}
    assert shown <= {_oracle(s) for s in labelled}
