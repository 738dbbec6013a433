"""The one topological sort (studio.core.protowalk.topo_order) that the cycle check (cycle_nodes: GRAPH-CYCLE,
memory's refusal, inspect's check line) and the sorting pass (passes.normalize.sort_graph) share. The orders
below are worked out by hand; a self-loop's refusal is checked against plain ONNX Runtime."""

from __future__ import annotations

import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper

from passes.normalize import sort_graph
import onnx_ir as ir

from passes.reorder_for_memory import schedule_of
from studio.core.protowalk import cycle_nodes, cycle_text, ir_node_reads, node_reads, outer_reads, topo_order
from studio.inspect.memory_plan import schedule_from_graph

X = helper.make_tensor_value_info("x", T.FLOAT, [4])
C = helper.make_tensor_value_info("c", T.BOOL, [])


def _branch(name: str, nodes: list[onnx.NodeProto], out: str) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, T.FLOAT, [4])])


def _ties_and_an_if() -> onnx.GraphProto:
    """0: If whose then-branch reads 'a' from outside; 1: Relu x -> a; 2: Abs x -> b; 3: Neg b -> d.

    By hand: 1 and 2 are ready at the start (0 waits on 1 through its body, 3 on 2); the earliest, 1, runs;
    that readies 0, now the earliest ready; then 2, then 3: order 1, 0, 2, 3."""
    then = _branch("then", [helper.make_node("Identity", ["a"], ["t"])], "t")
    other = _branch("else", [helper.make_node("Identity", ["x"], ["e"])], "e")
    return helper.make_graph(
        [helper.make_node("If", ["c"], ["r"], name="if", then_branch=then, else_branch=other),
         helper.make_node("Relu", ["x"], ["a"], name="relu"),
         helper.make_node("Abs", ["x"], ["b"], name="abs"),
         helper.make_node("Neg", ["b"], ["d"], name="neg")],
        "g", [X, C], [helper.make_tensor_value_info(n, T.FLOAT, [4]) for n in ("r", "d")])


def test_ties_keep_file_order_and_an_if_body_waits_on_its_outer_read():
    g = _ties_and_an_if()
    topo = topo_order(g)
    assert topo.order == (1, 0, 2, 3) and topo.stuck == ()
    assert not topo.in_file_order and cycle_nodes(g) == []
    assert sort_graph(g)
    assert [n.name for n in g.node] == ["relu", "if", "abs", "neg"]
    # sorted once, nothing moves again: the same order is the file's order now
    assert topo_order(g).in_file_order and not sort_graph(g)


def test_a_body_own_name_hides_no_outer_read_of_its_parent(tmp_path):
    """The then-branch reads outer 'a'; a nested If inside it makes its own 'a'. The nested body's name is
    local to the nested body: the then-branch still reads the outer 'a', so the If waits on Relu. (The cycle
    check used to pool every nested body's names and missed this read, hence a cycle through it.)"""
    inner = _branch("inner", [helper.make_node("Neg", ["x"], ["a"])], "a")
    then = _branch("then", [helper.make_node("Identity", ["a"], ["t"]),
                            helper.make_node("If", ["c"], ["u"], then_branch=inner, else_branch=inner)], "t")
    other = _branch("else", [helper.make_node("Identity", ["x"], ["e"])], "e")
    assert outer_reads(then) == ("a", "c", "x")       # first read first: Identity's a, the If's c, Neg's x
    g = helper.make_graph([helper.make_node("If", ["c"], ["r"], name="if", then_branch=then, else_branch=other),
                           helper.make_node("Relu", ["x"], ["a"], name="relu")], "g", [X, C],
                          [helper.make_tensor_value_info("r", T.FLOAT, [4])])
    assert topo_order(g).order == (1, 0)
    # Relu reading the If's output instead closes a cycle through the body's read
    g.node[1].input[0] = "r"
    path = tmp_path / "cycle_through_a_body.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(Exception, match="not acyclic"):          # the oracle: plain ONNX Runtime refuses it
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert cycle_nodes(g) == ["if", "relu"]


def test_a_node_reading_its_own_output_is_a_cycle_and_is_not_sorted(tmp_path):
    """0: Neg s -> z (out of order); 1: Relu x -> a; 2: Add a, s -> s (its own output). Add can never run, nor
    Neg after it; sort_graph leaves the graph as it is for the full check to name."""
    g = helper.make_graph([helper.make_node("Neg", ["s"], ["z"], name="neg"),
                           helper.make_node("Relu", ["x"], ["a"], name="relu"),
                           helper.make_node("Add", ["a", "s"], ["s"], name="add")], "g", [X],
                          [helper.make_tensor_value_info("z", T.FLOAT, [4])])
    path = tmp_path / "self_loop.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(Exception, match="not acyclic"):          # the oracle: plain ONNX Runtime refuses it
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    topo = topo_order(g)
    assert topo.order == (1,) and topo.stuck == (0, 2)
    assert cycle_nodes(g) == ["neg", "add"]
    # Neg is not in the cycle, it waits on it: the sentence says so
    assert cycle_text(cycle_nodes(g)) == "the graph has a cycle: 2 node(s) in it or waiting on it ('neg', 'add')"
    assert not sort_graph(g)
    assert [n.name for n in g.node] == ["neg", "relu", "add"]


def _if_reading_outside() -> onnx.ModelProto:
    """The If of the nested-body test, its then-branch also holding a sparse weight 'w' (a name of its own).

    By hand, what the If waits on: its input c, then its bodies' reads in attribute order (onnx.helper writes
    them sorted: else_branch first): 'x'; then the then-branch's 'a' (Identity), 'c' and 'x' again (the
    nested If, its body's Neg), each name once; 'w' is the branch's own: ('c', 'x', 'a')."""
    inner = _branch("inner", [helper.make_node("Neg", ["x"], ["a"])], "a")
    then = _branch("then", [helper.make_node("Identity", ["a"], ["t0"]),
                            helper.make_node("If", ["c"], ["u"], then_branch=inner, else_branch=inner),
                            helper.make_node("Add", ["t0", "w"], ["t"])], "t")
    then.sparse_initializer.append(helper.make_sparse_tensor(
        helper.make_tensor("w", T.FLOAT, [1], [2.0]), helper.make_tensor("w_i", T.INT64, [1], [0]), [4]))
    other = _branch("else", [helper.make_node("Identity", ["x"], ["e"])], "e")
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                           helper.make_node("If", ["c"], ["r"], name="if", then_branch=then, else_branch=other)],
                          "g", [X, C], [helper.make_tensor_value_info("r", T.FLOAT, [4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_memory_plan_and_reorder_pass_wait_on_what_the_one_rule_reads():
    """The memory plan (proto) and reorder-for-memory (onnx-ir) schedule the If with the same reads, in the
    same order, worked out by hand; a sparse weight of the body is the body's own, not an outer read (the
    plan's own walk used to miss sparse initializers)."""
    m = _if_reading_outside()
    want = ("c", "x", "a")
    assert node_reads(m.graph.node[1]) == want
    plan = schedule_from_graph(m.graph, lambda name: None)
    assert plan.nodes[1].label == "if" and plan.nodes[1].inputs == want
    then = next(a.g for a in m.graph.node[1].attribute if a.name == "then_branch")
    assert outer_reads(then) == ("a", "c", "x")
    del then.sparse_initializer[:]     # onnx-ir reads no sparse weights: a dense one, the branch's own too
    then.initializer.append(helper.make_tensor("w", T.FLOAT, [4], [2.0, 0.0, 0.0, 0.0]))
    model = ir.serde.deserialize_model(m)
    node = list(model.graph)[1]
    assert ir_node_reads(node) == want
    schedule, _ = schedule_of(model.graph)
    assert schedule.nodes[1].inputs == want


def test_a_file_already_in_order_comes_back_as_it_is_and_one_late_read_sorts_it():
    """Every node waiting only on earlier ones gives the file order without the sort (a second producer of
    'a' after its reader does not count: the first producer is waited on); one read of a later node's output
    sorts, and a node reading its own output is stuck, as before."""
    def graph(nodes):
        return helper.make_graph(nodes, "g", [X], [helper.make_tensor_value_info("c", T.FLOAT, [4])])
    in_order = graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
                      helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Abs", ["x"], ["a"])])
    assert topo_order(in_order).order == (0, 1, 2, 3) and topo_order(in_order).stuck == ()
    late = graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Add", ["a", "b"], ["c"]),
                  helper.make_node("Neg", ["a"], ["b"])])
    assert topo_order(late).order == (0, 2, 1) and topo_order(late).stuck == ()
    own = graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Add", ["a", "c"], ["c"])])
    assert topo_order(own).order == (0,) and topo_order(own).stuck == (1,)
