"""The view graph (ids, edges across subgraphs, graph I/O) and the hierarchy
(name scopes, subgraphs as nested groups, op runs, depth bands for flat names)."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from studio import api
from studio.graphview.hierarchy import FANOUT, build_hierarchy
from studio.graphview.model import INPUT, OUTPUT, build_graph, graph_from_proto
from tests.conftest import SAMPLES, light_models, parse_model, save


def _index(path):
    h = api.load(path)
    s = api.inspect(h)
    return h, s, api.graph_index(h, s)


def test_ids_match_the_summary_and_io_nodes_exist():
    h, s, idx = _index(SAMPLES / "if_loop.onnx")
    ops = [n for n in idx.graph.nodes if n.kind == "op"]
    assert [n.id for n in ops] == [n.id for n in s.nodes]
    assert {n.id for n in idx.graph.nodes if n.kind == INPUT} == {"input:input"}
    assert {n.name for n in idx.graph.nodes if n.kind == OUTPUT} == {o.name for o in s.outputs}
    # Without a summary (the fast path) the ids are the same.
    assert [n.id for n in build_graph(h).nodes] == [n.id for n in idx.graph.nodes]


def test_edges_cross_into_bodies_and_back_to_the_owner():
    _, _, idx = _index(SAMPLES / "if_loop.onnx")
    g = idx.graph
    by_id = {n.id: n for n in g.nodes}
    loop = next(n for n in g.nodes if n.op_type == "Loop" and n.graph == 0)
    then_relu = next(n for n in g.nodes if n.name == "/If/then/Relu")
    owner_if = next(n for n in g.nodes if n.name == "/If")
    # A body output flows to the node that owns the body.
    assert any(e.src == then_relu.index and e.dst == owner_if.index for e in g.edges)
    # The If branches read the outer graph input (a captured value): an edge into the body.
    then_nodes = {n.index for n in g.nodes if g.graphs[n.graph].owner == owner_if.index}
    assert any(e.src == by_id["input:input"].index and e.dst in then_nodes for e in g.edges)
    # The Loop body's own inputs (iter_num, cond_in, h_in) shadow outer names: no edge from outside.
    body = {n.index for n in g.nodes if g.graphs[n.graph].owner == loop.index}
    assert not any(e.dst in body and g.nodes[e.src].graph == 0 for e in g.edges if e.tensor == "h_in")
    # Edge labels carry dtype and shape from the summary.
    assert g.tensors["input"].dtype == "float32"


def _groups(idx):
    h = idx.hierarchy
    return {g.key: g for g in h.groups}


def test_name_scopes_make_nested_groups():
    _, _, idx = _index(SAMPLES / "cnn_unfused.onnx")
    h, g = idx.hierarchy, idx.graph
    labels = {grp.label for grp in h.groups}
    # /layer1/layer1.0/... has one child scope: merged into one group; conv1 holding one node is the node.
    assert "layer1/layer1.0" in labels and "conv1" not in labels
    conv = idx.find("/layer2/layer2.0/downsample/downsample.0/Conv")
    chain = [h.groups[x].label for x in h.ancestors(conv)]
    assert chain == ["downsample", "layer2/layer2.0", "cnn_unfused"]
    assert h.groups[0].size == len(g.nodes)
    # Level 1 draws the top-level groups and the loose nodes; the last level draws everything.
    counts = h.visible_counts()
    assert counts[1] < counts[-1] == len(g.nodes)


def test_nested_if_inside_loop_are_groups():
    _, _, idx = _index(SAMPLES / "if_loop.onnx")
    h = idx.hierarchy
    tanh = next(n for n in idx.graph.nodes if n.op_type == "Tanh")
    chain = [(h.groups[x].kind, h.groups[x].label) for x in h.ancestors(tanh.index)]
    kinds = [k for k, _ in chain]
    # Tanh sits in else_branch of the If that sits in the body of the Loop.
    assert kinds[:4] == ["subgraph", "control", "subgraph", "control"]
    assert chain[0][1] == "else_branch" and chain[2][1] == "body"
    assert chain[-1][0] == "root"
    # Collapsed to level 1 the whole Loop is one item.
    proj_items = api.graph_view(index=idx, level=1).items
    assert any(it.kind == "group" and h.groups[it.ref].kind == "control" for it in proj_items)


@pytest.mark.parametrize("path", light_models()[:3] + light_models()[-2:], ids=lambda p: p.stem)
def test_flat_names_still_get_a_usable_hierarchy(path):
    idx = api.graph_index(api.load(path))
    h = idx.hierarchy
    for grp in h.groups:                     # every level stays drawable
        assert len(grp.groups) + len(grp.nodes) <= FANOUT
    counts = h.visible_counts()
    assert counts[-1] == len(idx.graph.nodes)
    if len(idx.graph.nodes) > FANOUT:
        assert h.max_depth >= 1 and counts[1] <= FANOUT
        assert any(g.kind == "band" for g in h.groups)


def test_op_type_runs_fold_into_one_group(tmp_path):
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name="") for i in range(6)]
    nodes.append(helper.make_node("Neg", ["t6"], ["y"]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    idx = api.graph_index(api.load(save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                                        tmp_path / "runs.onnx")))
    runs = [grp for grp in idx.hierarchy.groups if grp.kind == "run"]
    assert len(runs) == 1 and runs[0].label == "Relu ×6" and len(runs[0].nodes) == 6


def test_deeply_nested_model_never_fails(tmp_path):
    """30 nested If bodies with 16-deep scoped names: a hierarchy comes back (maybe flattened)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    deep = "/".join(f"s{i}" for i in range(16))
    leaf = helper.make_graph([helper.make_node("Identity", ["x"], ["o"], name=f"/{deep}/Identity")], "b0", [],
                             [helper.make_tensor_value_info("o", TensorProto.FLOAT, [1])])
    body = leaf
    for i in range(30):   # protobuf parses ~30 levels; only then-branches nest (both would double each level)
        node = helper.make_node("If", ["c"], ["o"], name=f"/{deep}/If_{i}", then_branch=body, else_branch=leaf)
        body = helper.make_graph([node], f"b{i + 1}", [], [helper.make_tensor_value_info("o", TensorProto.FLOAT, [1])])
    g = helper.make_graph(list(body.node), "g", [x, cond], [helper.make_tensor_value_info("o", TensorProto.FLOAT, [1])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    graph = graph_from_proto(model, "deep")
    h = build_hierarchy(graph)
    assert h.groups[0].size == len(graph.nodes) > 30
    view = api.graph_view(index=api.graph_index(api.load(save(model, tmp_path / "deep.onnx"))))
    assert len(view) >= 1


def test_graph_of_hostile_and_empty_names(tmp_path):
    m = parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[1] x) => (float[1] y) '
                    '{ a = Relu(x) b = Neg(a) y = Relu(b) }')
    m.graph.node[0].name = "/a/b/" + "x" * 10_000
    m.graph.node[1].name = ""
    m.graph.node[2].name = "////"
    idx = api.graph_index(api.load(save(m, tmp_path / "m.onnx")))
    assert len([n for n in idx.graph.nodes if n.kind == "op"]) == 3
    assert idx.hierarchy.groups[0].size == 5
    onnx.checker.check_model(m)
