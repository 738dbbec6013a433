"""The viewer's data: what a node box says (key attributes, weight shapes), shape-labelled
edges, real sub-scopes of the YOLO detector (no synthetic depth bands), skip connections
at the opening level, an opening level of at most ~150 items, aggregation of huge models,
and the page's safety (model text only in the JSON block)."""

from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper

from benchmarks.graph_models import chain, resnet_like
from studio import api
from studio.graphview.boxes import key_attributes, node_box
from studio.graphview.hierarchy import build_hierarchy
from studio.graphview.model import graph_from_proto
from studio.graphview.scene import OPEN_BUDGET, build_scene, opening_view
from studio.graphview.viewer import graph_page
from tests.conftest import SAMPLES, save

DETECTOR = SAMPLES / "yolo_detector.onnx"


@pytest.fixture(scope="module")
def detector():
    h = api.load(DETECTOR)
    summary = api.inspect(h, {"height": 320, "width": 320})
    return api.graph_index(h, summary)


def _node(op: str, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, ["x"], ["y"], **attrs)


def test_key_attributes_per_op():
    assert key_attributes(_node("Conv", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], group=8,
                                dilations=[1, 1])) == ("kernel 3×3", "stride 2", "group 8")
    assert key_attributes(_node("Conv", kernel_shape=[1, 1], strides=[1, 1], pads=[0, 0, 0, 0], group=1)) \
        == ("kernel 1×1", "stride 1")
    assert key_attributes(_node("Transpose", perm=[0, 2, 1, 3])) == ("perm 0,2,1,3",)
    assert key_attributes(_node("Concat", axis=1)) == ("axis 1",)
    assert key_attributes(_node("Softmax", axis=-1)) == ("axis -1",)
    assert key_attributes(_node("Gather", axis=0)) == ("axis 0",)
    assert key_attributes(_node("Resize", mode="nearest")) == ("mode nearest",)
    assert key_attributes(_node("Cast", to=TensorProto.FLOAT16)) == ("to float16",)
    assert key_attributes(_node("Relu")) == ()
    assert key_attributes(_node("MyCustomOp", alpha=0.5, beta=2)) == ("alpha 0.5", "beta 2")


def test_detector_boxes_have_attributes_and_weight_shapes(detector):
    g = detector.graph
    conv = next(n for n in g.nodes if n.name == "/model.0/conv/Conv")
    box = node_box(g, conv.index)
    assert box.title == "Conv" and box.attrs == ("kernel 3×3", "stride 2", "pads 1")
    assert box.weights == ("W ⟨4×3×3×3⟩", "B ⟨4⟩")
    split = next(n for n in g.nodes if n.op_type == "Split")
    assert node_box(g, split.index).attrs[0] == "axis 1"
    resize = next(n for n in g.nodes if n.op_type == "Resize")
    assert node_box(g, resize.index).attrs[0] == "mode nearest"


def test_detector_edges_are_numeric_with_dims(detector):
    scene, _ = build_scene(detector.graph, detector.hierarchy)
    labels = [e[3] for e in scene["edges"] if e[2]]
    assert labels and all(lab and "height" not in lab and "floor" not in lab for lab in labels if lab != "scalar")
    assert "1×3×320×320" in labels and "1×4×160×160" in labels


def test_detector_scopes_are_its_real_sub_scopes(detector):
    hier = detector.hierarchy
    assert not [g for g in hier.groups if g.kind == "band"]
    by_label = {g.label: g for g in hier.groups if g.depth == 1}
    assert {f"model.{i}" for i in (0, 2, 9, 12, 22)} <= set(by_label)
    head = by_label["model.22"]
    subs = {hier.groups[c].label for c in head.groups}
    assert {"cv2.0", "cv3.0", "cv2.1", "dfl"} <= subs


def _scoped_model(n_scopes: int, path) -> onnx.ModelProto:
    """A chain of ``n_scopes`` named blocks (``/blk/sub{i}/...``, two nodes each)."""
    nodes, prev = [], "x"
    for i in range(n_scopes):
        for op in ("Relu", "Neg"):
            out = f"t{i}_{op}"
            nodes.append(helper.make_node(op, [prev], [out], name=f"/blk/sub{i}/{op}"))
            prev = out
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="/blk/out/Identity"))
    g = helper.make_graph(nodes, "scoped", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    return save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_wide_group_with_sub_scopes_keeps_them_and_flat_names_get_bands(tmp_path):
    h = api.load(_scoped_model(60, tmp_path / "scoped.onnx"))       # 60 sub-scopes > fanout 40
    hier = api.graph_index(h).hierarchy
    assert not [g for g in hier.groups if g.kind == "band"]
    assert sum(1 for g in hier.groups if g.label.startswith("sub")) == 60
    flat = api.graph_index(api.load(chain(300, tmp_path / "chain.onnx"))).hierarchy
    assert any(g.kind == "band" for g in flat.groups)              # no names: bands keep levels drawable


# The detector's FPN/PAN skip connections: (tensor from the backbone, the Concat taking it).
SKIPS = (("/model.6/cv2/act/Mul_output_0", "/model.11/Concat"), ("/model.4/cv2/act/Mul_output_0", "/model.14/Concat"),
         ("/model.12/cv2/act/Mul_output_0", "/model.17/Concat"), ("/model.9/cv2/act/Mul_output_0", "/model.20/Concat"))


def _skip_edges(scene: dict, edges: set, open_groups=None) -> list[tuple[str, str]]:
    from studio.graphview.scene import opening_view

    items, _ = opening_view(scene, open_groups)
    key_of = {lf["key"]: i for i, lf in enumerate(scene["leaves"])}
    found = []
    for tensor, concat in SKIPS:
        e = next(e for e in scene["edges"] if e[2] == tensor and e[1] == key_of[concat])
        reps = opening_view({**scene, "edges": [e]}, open_groups)[1]
        assert len(reps) == 1, f"{tensor} is folded inside one box"
        (pair,) = reps
        assert pair in edges
        # A skip, not the chain: the Concat has another drawn input too.
        assert len({a for a, b in edges if b == pair[1]}) >= 2
        found.append(pair)
    return found


def test_detector_opens_under_150_items_with_skip_connections(detector):
    scene, stats = build_scene(detector.graph, detector.hierarchy)
    items, edges = opening_view(scene)
    assert stats.visible == len(items) <= OPEN_BUDGET
    assert stats.open_level >= 2                        # more than the top-level blocks
    assert len(_skip_edges(scene, edges)) == len(SKIPS)
    # Level 1 alone already shows them (not a straight chain).
    top = {i for i, g in enumerate(scene["groups"]) if g["depth"] == 0}
    items1, edges1 = opening_view(scene, top)
    assert len(items1) < len(items)
    assert len(_skip_edges(scene, edges1, top)) == len(SKIPS)


def test_big_models_open_aggregated(tmp_path):
    g = graph_from_proto(onnx.load(str(resnet_like(1000, tmp_path / "r.onnx"))), "r10k")
    scene, stats = build_scene(g, build_hierarchy(g))
    assert len(g.nodes) > 10_000 and stats.visible <= OPEN_BUDGET and stats.leaves == len(g.nodes)
    c = graph_from_proto(onnx.load(str(chain(20_000, tmp_path / "c.onnx"))), "chain")
    scene, stats = build_scene(c, build_hierarchy(c), budget=2_000)
    assert stats.leaves <= 2_000 and stats.sealed > 0 and stats.visible <= OPEN_BUDGET
    assert scene["note"] and "closed" in scene["note"]


def test_viewer_page_is_offline_and_keeps_model_text_in_json(tmp_path):
    h = api.load(_scoped_model(3, tmp_path / "s.onnx"))
    m = onnx.load(str(h.path))
    m.graph.node[0].name = '/blk/</script><img src=x onerror=alert(1)>/Relu'
    h = api.load(save(m, tmp_path / "evil.onnx"))
    html, _ = graph_page(api.graph_index(h).graph)
    assert "Content-Security-Policy" in html and "connect-src 'none'" in html and "worker-src blob:" in html
    assert "<img src=x" not in html and html.count("</script>") == 4    # elk, its worker starter, data, renderer
    data = json.loads(html.split('id="gv-data">', 1)[1].split("</script>", 1)[0])
    assert any("<img src=x" in lf["full"] for lf in data["scene"]["leaves"])   # text kept, as data
    assert "http://" not in html.split("<script", 1)[0] and "src=\"http" not in html


def test_focus_names_the_leaf_to_reveal(detector):
    scene, _ = build_scene(detector.graph, detector.hierarchy, focus="/model.22/dfl/Softmax")
    assert scene["leaves"][scene["focus"]]["key"] == "/model.22/dfl/Softmax"
    assert build_scene(detector.graph, detector.hierarchy, focus="nope")[0]["focus"] is None


def test_diff_scene_marks_groups_that_hide_changes(tmp_path):
    from studio.graphview.viewer import diff_page

    from tests.graphview.optimized import fold_conv_bn

    before = api.load(SAMPLES / "cnn_unfused.onnx")
    opt, records = fold_conv_bn(before.proto)
    d = api.diff(before, api.load(save(opt, tmp_path / "opt.onnx")), lineage=records)
    html, _ = diff_page(d)
    data = json.loads(html.split('id="gv-data">', 1)[1].split("</script>", 1)[0])
    scene = data["scene"]
    marked = {g["label"] for g in scene["groups"] if g.get("mark")}
    assert "layer1/layer1.0" in marked                          # its BatchNormalizations were folded
    sides = {e[5] for e in scene["edges"] if len(e) > 5}
    assert sides == {"a", "b", "ab"}                            # before-only, after-only and shared edges
