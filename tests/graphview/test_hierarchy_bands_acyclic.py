"""Depth bands never loop through a kept sub-scope (issue 35 item 2: upward edges in the viewer).

A band is drawn as one box among its siblings. Cut only by depth, a band could hold both a node that feeds a
kept sub-scope and a node that scope feeds (llama_optimum's ``self_attn``: band ``d:1`` <-> ``repeat_kv``),
and however the siblings are laid out one edge of that loop points upwards (6 in ELK's drawing of the fully
opened decoder). Oracle: the proto's own producer -> consumer pairs (``node.output`` -> ``node.input``),
lifted to the two siblings under their lowest common group; the siblings of every group must be acyclic."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from studio.graphview.hierarchy import FANOUT, build_hierarchy
from studio.graphview.model import graph_from_proto
from tests.conftest import SAMPLES


def _sibling_loops(model: onnx.ModelProto) -> list[tuple]:
    """Loops among the siblings of any group: (group key, units on the loop); [] when none."""
    graph = graph_from_proto(model, "m")
    h = build_hierarchy(graph)
    by_name = {n.name: n.index for n in graph.nodes if n.kind == "op"}
    made = {o: nd.name for nd in model.graph.node for o in nd.output if o}
    pairs = {(made[i], nd.name) for nd in model.graph.node for i in nd.input if i in made}

    def chain(k: int) -> list[tuple[str, int]]:
        out, g = [("n", k)], h.node_group[k]
        while g >= 0:
            out.append(("g", g))
            g = h.groups[g].parent
        return out[::-1]                    # root first

    succ: dict[int, dict] = {}
    for a, b in pairs:
        ca, cb = chain(by_name[a]), chain(by_name[b])
        i = 0
        while i < min(len(ca), len(cb)) and ca[i] == cb[i]:
            i += 1
        if i < len(ca) and i < len(cb):
            succ.setdefault(ca[i - 1][1], {}).setdefault(ca[i], set()).add(cb[i])
    loops = []
    for g, s in succ.items():
        state: dict = {}

        def visit(u, path, s=s, state=state):
            state[u] = 1
            for v in s.get(u, ()):
                if state.get(v) == 1:
                    return path + [u, v]
                if not state.get(v):
                    found = visit(v, path + [u])
                    if found:
                        return found
            state[u] = 2
            return None

        for u in list(s):
            if not state.get(u):
                found = visit(u, [])
                if found:
                    loops.append((h.groups[g].key, found))
                    break
    return loops


def _scope_beside_a_long_band() -> onnx.ModelProto:
    """61 loose nodes (Relu/Neg alternating: no op-type run) and a 2-node sub-scope fed by the 36th and
    feeding the 51st, so a depth-only band (31 + 30 nodes) holds both."""
    nodes, prev = [], "x"
    for i in range(61):
        op = "Relu" if i % 2 else "Neg"
        if i == 50:
            nodes.append(helper.make_node("Add", [prev, "s1"], [f"t{i}"], name=f"/blk/Add_{i}"))
        else:
            nodes.append(helper.make_node(op, [prev], [f"t{i}"], name=f"/blk/{op}_{i}"))
        prev = f"t{i}"
        if i == 35:
            nodes.append(helper.make_node("Sigmoid", [prev], ["s0"], name="/blk/sub/Sigmoid"))
            nodes.append(helper.make_node("Tanh", ["s0"], ["s1"], name="/blk/sub/Tanh"))
    g = helper.make_graph(nodes, "band", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_band_is_cut_where_a_kept_scope_feeds_it_back():
    model = _scope_beside_a_long_band()
    assert len(model.graph.node) - 2 > FANOUT                   # the loose nodes alone are banded
    h = build_hierarchy(graph_from_proto(model, "m"))
    assert any(g.kind == "band" for g in h.groups) and any(g.label == "sub" for g in h.groups)
    assert _sibling_loops(model) == []
    assert all(g.size <= 2 * FANOUT for g in h.groups if g.kind == "band")


def test_llama_decoder_groups_have_no_loops_among_siblings():
    assert _sibling_loops(onnx.load(str(SAMPLES / "llama_optimum.onnx"))) == []
