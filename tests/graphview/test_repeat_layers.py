"""Repeated decoder layers fold into one *repeat* group (``layers.0–2 ×3``), a layer
whose structure differs stays beside it and is named, and the diff of two decoders
that differ in one layer lines up layer by layer. The oracle is the model itself:
layer counts and memberships come from the node names, read here with ``onnx``."""

from __future__ import annotations

import re

import onnx
import pytest

from studio.graphview.diff import ADDED, REMOVED, UNCHANGED, diff_graphs
from studio.graphview.hierarchy import build_hierarchy
from studio.graphview.model import OP, graph_from_proto
from studio.graphview.scene import build_scene
from tests.conftest import SAMPLES

DECODERS = [("llama_optimum.onnx", "layers."), ("gpt2_decoder.onnx", "h.")]


def _layer_of(name: str, prefix: str) -> int | None:
    m = re.search(rf"/{re.escape(prefix)}(\d+)/", name)
    return int(m.group(1)) if m else None


def _layers(model: onnx.ModelProto, prefix: str) -> dict[int, set[str]]:
    """Layer index -> the names of its nodes, from the node names alone."""
    out: dict[int, set[str]] = {}
    for n in model.graph.node:
        i = _layer_of(n.name, prefix)
        if i is not None:
            out.setdefault(i, set()).add(n.name)
    return out


def _repeats(h):
    return [g for g in h.groups if g.kind == "repeat"]


def _node_names(graph, h, group) -> set[str]:
    return {graph.nodes[k].name for k in h.leaves(group.index)}


def _altered(model: onnx.ModelProto, layer: int, prefix: str) -> tuple[onnx.ModelProto, str]:
    """A copy whose layer ``layer`` has its SiLU's Sigmoid (first activation) replaced by Tanh."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    node = next(n for n in m.graph.node
                if _layer_of(n.name, prefix) == layer and n.op_type in ("Sigmoid", "Tanh"))
    node.op_type = "Tanh" if node.op_type == "Sigmoid" else "Sigmoid"
    onnx.checker.check_model(m)
    return m, node.name


@pytest.mark.parametrize(("file", "prefix"), DECODERS)
def test_sample_decoder_layers_fold_into_one_repeat_group(file, prefix):
    model = onnx.load(str(SAMPLES / file))
    layers = _layers(model, prefix)
    n = len(layers)
    assert n >= 2 and sorted(layers) == list(range(n))
    graph = graph_from_proto(model, file)
    h = build_hierarchy(graph)
    (rep,) = _repeats(h)
    assert rep.label == f"{prefix}0–{n - 1} ×{n}" and rep.note == ""
    # It holds the N layer scopes, in order, and exactly their nodes.
    members = [h.groups[c] for c in rep.groups]
    assert [g.label for g in members] == [f"{prefix}{i}" for i in range(n)] and not rep.nodes
    for i, g in enumerate(members):
        assert g.kind == "scope" and _node_names(graph, h, g) == layers[i]
    assert rep.size == sum(len(v) for v in layers.values())
    # Every node is still in exactly one group (overlays and the viewer colour nodes by group).
    assert sorted(h.leaves(0)) == list(range(len(graph.nodes)))
    # The scene ships the repeat group with its members below it.
    scene, _ = build_scene(graph, h)
    keys = [g["key"] for g in scene["groups"]]
    ri = keys.index(rep.key)
    assert scene["groups"][ri]["kind"] == "repeat"
    assert sorted(i for i, g in enumerate(scene["groups"]) if g["parent"] == ri) == \
        sorted(keys.index(g.key) for g in members)


@pytest.mark.parametrize(("file", "prefix"), DECODERS)
def test_a_small_repeat_opens_only_its_first_member(file, prefix):
    """The opening view draws one layer's contents and the other members as closed boxes, even when all of
    them would fit the opening budget (issue 35: the 3-layer llama sample opened all three, 149 boxes for ELK's
    first layout, most of its wait before its layout settled). The members below stay open-able and open to the
    same depth as the first one when asked for (``expanded``), and a diff keeps them as before."""
    model = onnx.load(str(SAMPLES / file))
    graph = graph_from_proto(model, file)
    h = build_hierarchy(graph)
    (rep,) = _repeats(h)
    members = [h.groups[c] for c in rep.groups]
    scene, stats = build_scene(graph, h)
    keys = [g["key"] for g in scene["groups"]]
    opened = set(scene["open"])
    assert keys.index(rep.key) in opened and keys.index(members[0].key) in opened
    assert not {keys.index(g.key) for g in members[1:]} & opened
    # What the first member shows open, a later one shows once it is opened.
    depth_open = {scene["groups"][i]["depth"] for i in opened if scene["groups"][i]["parent"] == keys.index(members[0].key)}
    asked, _ = build_scene(graph, h, expanded=(members[1].key,))
    assert keys.index(members[1].key) in asked["open"]
    assert {asked["groups"][i]["depth"] for i in asked["open"]
            if asked["groups"][i]["parent"] == keys.index(members[1].key)} == depth_open
    # Fewer items at first paint than with every member open (the old opening), by about a member's worth each.
    all_open, old_stats = build_scene(graph, h, status={})
    assert {keys.index(g.key) for g in members} <= set(all_open["open"])
    assert stats.visible < old_stats.visible


@pytest.mark.parametrize(("file", "prefix"), DECODERS)
def test_the_signature_ignores_names(file, prefix):
    """Renaming every node of the first layer (scope kept) still folds all layers."""
    model = onnx.load(str(SAMPLES / file))
    for j, node in enumerate(model.graph.node):
        if _layer_of(node.name, prefix) == 0:
            node.name = f"/{node.name.split('/')[1]}/{prefix}0/renamed_{j}/Op{j}"
    n = len(_layers(model, prefix))
    (rep,) = _repeats(build_hierarchy(graph_from_proto(model, file)))
    assert rep.label.endswith(f"×{n}")


@pytest.mark.parametrize(("file", "prefix"), DECODERS)
def test_a_layer_with_a_different_op_stays_out_of_the_repeat(file, prefix):
    base = onnx.load(str(SAMPLES / file))
    layers = _layers(base, prefix)
    n = len(layers)
    odd = n - 1
    model, changed = _altered(base, odd, prefix)
    graph = graph_from_proto(model, file)
    h = build_hierarchy(graph)
    scopes = {g.label: g for g in h.groups if g.kind == "scope"}
    odd_group = scopes[f"{prefix}{odd}"]
    assert _node_names(graph, h, odd_group) == layers[odd] and changed in layers[odd]
    reps = _repeats(h)
    if n - 1 >= 2:
        (rep,) = reps
        assert rep.label == f"{prefix}0–{n - 2} ×{n - 1}" and rep.note == f"differs: {prefix}{odd}"
        assert odd_group.index not in rep.groups and odd_group.parent == rep.parent
        assert _node_names(graph, h, rep) == set().union(*(layers[i] for i in range(n - 1)))
    else:   # two layers, one altered: nothing is repeated
        assert reps == []
        assert all(h.groups[scopes[f"{prefix}{i}"].parent].kind == "scope" for i in range(n))


def test_a_middle_layer_that_differs_breaks_the_stack():
    """Only consecutive identical layers fold: with layer 1 of 3 altered no two are adjacent."""
    base = onnx.load(str(SAMPLES / "llama_optimum.onnx"))
    assert len(_layers(base, "layers.")) == 3
    model, _ = _altered(base, 1, "layers.")
    h = build_hierarchy(graph_from_proto(model, "m"))
    assert _repeats(h) == []
    assert {g.label for g in h.groups if g.kind == "scope"} >= {"layers.0", "layers.1", "layers.2"}


def test_parallel_branches_and_tiny_blocks_are_not_folded():
    """YOLO's per-scale head branches (cv2.0–2, fed by different maps) and its 3-node Conv
    stages stay drawn; its C2f bottleneck stacks (m.0 feeding m.1) fold."""
    model = onnx.load(str(SAMPLES / "yolo_detector.onnx"))
    h = build_hierarchy(graph_from_proto(model, "yolo"))
    labels = {g.label for g in h.groups}
    assert {"cv2.0", "cv2.1", "cv2.2", "model.0", "model.1"} <= labels
    reps = _repeats(h)
    assert reps and {r.label for r in reps} == {"m.0–1 ×2"}


@pytest.mark.parametrize(("file", "prefix"), DECODERS)
def test_diff_of_two_decoders_lines_up_layer_by_layer(file, prefix):
    """One layer's activation changed: the diff reports that node, in that layer, and
    matches every other node to the same-named node of the same layer."""
    a_model = onnx.load(str(SAMPLES / file))
    layers = _layers(a_model, prefix)
    odd = len(layers) // 2
    b_model, changed = _altered(a_model, odd, prefix)
    a, b = graph_from_proto(a_model, "a"), graph_from_proto(b_model, "b")
    d = diff_graphs(a, b, model_a=a_model, model_b=b_model)
    removed = [a.nodes[e.a].name for e in d.by_status(REMOVED)]
    added = [b.nodes[e.b].name for e in d.by_status(ADDED)]
    assert removed == [changed] and added == [changed] and _layer_of(changed, prefix) == odd
    ops = sum(1 for x in a.nodes if x.kind == OP)
    assert d.counts()[UNCHANGED] == ops - 1 - len(d.by_status("changed"))
    # Whatever else is marked changed is the altered node's consumer, in the same layer.
    for e in d.by_status("changed"):
        assert _layer_of(b.nodes[e.b].name, prefix) == odd
    # Each layer lines up with the same layer: matched pairs keep their layer index.
    matched = [e for e in d.entries if e.a is not None and e.b is not None and a.nodes[e.a].kind == OP]
    assert len(matched) == ops - 1
    for e in matched:
        assert _layer_of(a.nodes[e.a].name, prefix) == _layer_of(b.nodes[e.b].name, prefix)
    for i, names in layers.items():
        if i != odd:
            assert {a.nodes[e.a].name for e in matched if _layer_of(a.nodes[e.a].name, prefix) == i} == names


@pytest.fixture(scope="module")
def deep_llama() -> onnx.ModelProto:
    """A 32-layer LLaMA-style decoder (optimum convention), tiny widths: ~3,000 nodes."""
    import dataclasses

    from sample_models.decoders import LLAMA_TINY, build_llama_optimum
    return build_llama_optimum(dataclasses.replace(LLAMA_TINY, layers=32, hidden=12, heads=2, kv_heads=1,
                                                   intermediate=16, vocab=32))


def test_a_32_layer_decoder_is_one_group_whose_first_layer_opens(deep_llama):
    layers = _layers(deep_llama, "layers.")
    assert sorted(layers) == list(range(32))
    graph = graph_from_proto(deep_llama, "deep")
    h = build_hierarchy(graph)
    (rep,) = _repeats(h)
    assert rep.label == "layers.0–31 ×32" and len(rep.groups) == 32
    model_key = h.groups[rep.parent].key
    scene, _ = build_scene(graph, h, expanded=(model_key, rep.key))
    keys = [g["key"] for g in scene["groups"]]
    opened = {scene["groups"][i]["label"] for i in scene["open"]}
    member_keys = [h.groups[c].key for c in rep.groups]
    # Opened, the repeat draws its first layer's contents; the other 31 stay boxes to open.
    assert keys.index(rep.key) in scene["open"] and keys.index(member_keys[0]) in scene["open"]
    assert not {keys.index(k) for k in member_keys[1:]} & set(scene["open"])
    assert "layers.0" in opened and "layers.1" not in opened


def test_a_middle_layer_that_differs_splits_the_stack_and_is_named(deep_llama):
    model, _ = _altered(deep_llama, 5, "layers.")
    graph = graph_from_proto(model, "deep")
    h = build_hierarchy(graph)
    reps = sorted(_repeats(h), key=lambda g: g.first)
    assert [(r.label, r.note) for r in reps] == [("layers.0–4 ×5", "differs: layers.5"),
                                                  ("layers.6–31 ×26", "differs: layers.5")]
    (odd,) = [g for g in h.groups if g.label == "layers.5"]
    assert odd.kind == "scope" and odd.parent == reps[0].parent
    scene, _ = build_scene(graph, h)
    assert [g.get("note") for g in scene["groups"] if g["kind"] == "repeat"] == ["differs: layers.5"] * 2


def test_the_diff_drawing_folds_the_matching_layers_around_the_changed_one(deep_llama):
    """The diff view's union graph (both models in one) folds the 31 layers that match and
    leaves the changed layer open beside them, holding its removed and added node."""
    from studio.graphview.diffview import union_graph

    model, changed = _altered(deep_llama, 5, "layers.")
    d = diff_graphs(graph_from_proto(deep_llama, "a"), graph_from_proto(model, "b"),
                    model_a=deep_llama, model_b=model)
    u = union_graph(d)
    h = build_hierarchy(u.graph)
    assert sorted(r.label for r in _repeats(h)) == ["layers.0–4 ×5", "layers.6–31 ×26"]
    (odd,) = [g for g in h.groups if g.label == "layers.5"]
    marked = {(u.graph.nodes[k].name, u.status[k]) for k in h.leaves(odd.index) if u.status[k] != UNCHANGED}
    assert {(changed, REMOVED), (changed, ADDED)} <= marked
    for r in _repeats(h):
        assert all(u.status[k] == UNCHANGED for k in h.leaves(r.index))
