"""The repeat groups' structure signature (``hierarchy.structure_signature``), signed over lists of member
positions with each node's neighbours taken once per hierarchy (issue 35 item 2: the signature was most of
the hierarchy's build on a 10k-node model). Oracle: the dict-based Weisfeiler-Lehman signature it replaces,
written out here, which must give the very same value on hand-built graphs (a node reading one tensor twice,
members fed from and feeding outside, a member listed twice, an empty member set)."""

from __future__ import annotations

import onnx
from onnx import helper

import studio.graphview.hierarchy as hierarchy
from studio.graphview.hierarchy import WL_ROUNDS, build_hierarchy, node_adjacency, structure_signature
from studio.graphview.model import GEdge, GNode, GraphInfo, GraphModel, OP, graph_from_proto
from tests.conftest import SAMPLES
from tests.spies import count_calls


def _reference(graph: GraphModel, members: list[int]) -> tuple:
    """The signature as it was first written: dicts keyed by node, neighbours read from the edges."""
    inside = set(members)
    preds_in = {k: [graph.edges[e].src for e in graph.pred[k] if graph.edges[e].src in inside] for k in members}
    succs_in = {k: [graph.edges[e].dst for e in graph.succ[k] if graph.edges[e].dst in inside] for k in members}
    label = {}
    for k in members:
        n = graph.nodes[k]
        label[k] = hash((n.kind, n.op_type, n.domain, len(preds_in[k]) < len(graph.pred[k]),
                         len(succs_in[k]) < len(graph.succ[k])))
    for _ in range(WL_ROUNDS):
        label = {k: hash((label[k], tuple(sorted(label[p] for p in preds_in[k])),
                          tuple(sorted(label[v] for v in succs_in[k])))) for k in members}
    return len(members), tuple(sorted(label.values()))


def _graph(ops: list[str], wires: list[tuple[int, int]]) -> GraphModel:
    nodes = tuple(GNode(i, f"n{i}", f"/blk/n{i}", op, "", OP, 0, (), ()) for i, op in enumerate(ops))
    edges = tuple(GEdge(a, b, f"t{a}") for a, b in wires)
    return GraphModel("hand", nodes, edges, (GraphInfo("", None, None, "", None),), {})


# 0 Conv -> 1 Relu -> 2 Mul(reads 1 twice) -> 3 Add <- 0 (skip); 3 -> 4 Sigmoid -> 5 Mul <- 3; 5 -> 6 Conv
# (the next block), 7 Relu fed from 0 and 2 (a side branch).
OPS = ["Conv", "Relu", "Mul", "Add", "Sigmoid", "Mul", "Conv", "Relu"]
WIRES = [(0, 1), (1, 2), (1, 2), (2, 3), (0, 3), (3, 4), (4, 5), (3, 5), (5, 6), (0, 7), (2, 7)]


def test_the_signature_is_the_reference_value_on_hand_built_member_sets():
    g = _graph(OPS, WIRES)
    adjacency = node_adjacency(g)
    for members in ([0, 1, 2, 3, 4, 5], [1, 2, 3], [3, 4, 5, 6], [2, 1, 0], list(range(8)), [4], [],
                    [0, 1, 1, 2]):            # a member listed twice counts once in the labels, twice in the size
        assert structure_signature(g, members) == _reference(g, members), members
        assert structure_signature(g, members, adjacency) == _reference(g, members), members


def test_the_signature_sees_a_doubled_read_and_names_do_not_matter():
    g = _graph(OPS, WIRES)
    once = _graph(OPS, [w for i, w in enumerate(WIRES) if i != 2])       # Mul reads Relu's output once
    assert structure_signature(g, [0, 1, 2, 3]) != structure_signature(once, [0, 1, 2, 3])
    renamed = GraphModel("other", tuple(n._replace(id=f"x{n.index}", name=f"/x/y{n.index}") for n in g.nodes),
                         g.edges, g.graphs, {})
    assert structure_signature(renamed, [0, 1, 2, 3, 4, 5]) == structure_signature(g, [0, 1, 2, 3, 4, 5])


def test_one_adjacency_serves_every_signature_of_a_hierarchy(monkeypatch):
    """The llama sample's layers are signed (a repeat group comes out) with the neighbours listed once."""
    made: list[int] = []
    signed: list[bool] = []
    real_adjacency, real_wiring = hierarchy.node_adjacency, hierarchy.member_wiring

    def adjacency(graph):
        made.append(1)
        return real_adjacency(graph)

    def wiring(graph, members, adj):
        signed.append(adj is not None)
        out = real_wiring(graph, members, adj)
        assert hierarchy._refine(out) == _reference(graph, members)
        return out

    monkeypatch.setattr(hierarchy, "node_adjacency", adjacency)
    monkeypatch.setattr(hierarchy, "member_wiring", wiring)
    graph = graph_from_proto(onnx.load(str(SAMPLES / "llama_optimum.onnx")))
    h = build_hierarchy(graph)
    assert any(g.kind == "repeat" for g in h.groups)
    assert len(signed) >= 2 and all(signed)
    assert made == [1]


def test_a_model_without_indexed_scopes_lists_no_neighbours(monkeypatch):
    made: list[int] = []
    monkeypatch.setattr(hierarchy, "node_adjacency", lambda graph: made.append(1) or ([], []))
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="/a/Relu"), helper.make_node("Neg", ["y"], ["z"], name="/b/Neg")],
        "g", [x], [helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [1])]))
    build_hierarchy(graph_from_proto(model))
    assert made == []


# Four 5-node blocks in a chain (Conv -> Relu -> Mul reading Relu twice -> Add <- Conv -> Sigmoid -> the next
# block's Conv), fed by node 20 and feeding node 21; the last block has one more internal wire (its Conv also
# feeds its Sigmoid) unless ``odd`` is False.
def _blocks(odd: bool = True) -> tuple[GraphModel, list[list[int]]]:
    ops, wires = [], [(20, 0), (19, 21)]
    for b in range(4):
        c = 5 * b
        ops += ["Conv", "Relu", "Mul", "Add", "Sigmoid"]
        wires += [(c, c + 1), (c + 1, c + 2), (c + 1, c + 2), (c + 2, c + 3), (c, c + 3), (c + 3, c + 4)]
        if b:
            wires.append((c - 1, c))
        if b == 3 and odd:
            wires.append((c, c + 4))
    return _graph(ops + ["Identity", "Identity"], wires), [list(range(5 * b, 5 * b + 5)) for b in range(4)]


def test_a_family_refines_once_per_new_wiring_and_each_signature_is_the_reference(monkeypatch):
    g, blocks = _blocks()
    refined = count_calls(monkeypatch, hierarchy, "_refine")
    sigs = hierarchy.family_signatures(g, blocks, node_adjacency(g))
    assert sigs == [_reference(g, b) for b in blocks]
    assert sigs[0] == sigs[1] == sigs[2] != sigs[3]       # the extra wire still tells the last block apart
    even, _ = _blocks(odd=False)
    assert _reference(even, blocks[3]) == sigs[0]         # (and only that wire)
    # The first block's wiring is refined; the next two are wired as it is, position for position; the last is not.
    assert len(refined) == 2


def test_the_shortcut_needs_the_same_wiring_position_for_position(monkeypatch):
    """The same block listed in another order is the same structure, but not the same wiring: refined again."""
    g, blocks = _blocks()
    refined = count_calls(monkeypatch, hierarchy, "_refine")
    shuffled = [blocks[0], blocks[1][::-1], [6]]              # a list under RUN_MIN nodes is not signed
    sigs = hierarchy.family_signatures(g, shuffled, node_adjacency(g))
    assert sigs[:2] == [_reference(g, blocks[0])] * 2 and sigs[2] is None
    assert len(refined) == 2
