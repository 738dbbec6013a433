"""The shared graph walker and unique-name helper of studio.core.protowalk: ``walk_graph`` (a graph and its
nested bodies, the main-graph part of ``iter_graphs``) and ``unique_names`` (``unique_name`` as a generator,
also numbered from a start). Expected orders and names are worked out by hand."""

from __future__ import annotations

import onnx
from onnx import TensorProto as T
from onnx import helper

from studio.core.protowalk import iter_graphs, unique_name, unique_names, walk_graph


def _nested_model() -> onnx.ModelProto:
    """main: If 'if' (then: Loop 'loop' whose body is 'inner'; else: a plain body) and a model function.
    make_node writes attributes sorted by name: the If's else_branch comes first."""
    def body(name: str, nodes: list[onnx.NodeProto]) -> onnx.GraphProto:
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info("o", T.FLOAT, [1])])

    inner = body("inner", [helper.make_node("Identity", ["x"], ["o"])])
    then = body("then", [helper.make_node("Loop", ["", "c"], ["o"], name="loop", body=inner)])
    other = body("else", [helper.make_node("Identity", ["x"], ["o"])])
    graph = helper.make_graph([helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)],
                              "main", [helper.make_tensor_value_info("c", T.BOOL, [])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [1])])
    fn = helper.make_function("local", "f", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
                              [helper.make_opsetid("", 17)])
    return helper.make_model(graph, functions=[fn], opset_imports=[helper.make_opsetid("", 17),
                                                                   helper.make_opsetid("local", 1)])


def test_walk_graph_is_a_graph_and_its_bodies_depth_first_and_iter_graphs_adds_the_functions():
    model = _nested_model()
    walked = [(r.graph.name, r.scope, r.depth) for r in walk_graph(model.graph)]
    assert walked == [("main", "", 0), ("else", "/if/else_branch", 1), ("then", "/if/then_branch", 1),
                      ("inner", "/if/then_branch/loop/body", 2)]
    assert [(r.graph.name, r.scope, r.depth) for r in iter_graphs(model)] == [
        *walked, ("local::f", "<function local::f>", 1)]


def test_unique_names_go_on_as_unique_name_again_and_again_or_from_a_start():
    taken = {"a", "a_2", "a_4"}
    again = set(taken)
    names = unique_names(taken, "a")
    assert [next(names) for _ in range(3)] == ["a_3", "a_5", "a_6"]
    assert [unique_name(again, "a") for _ in range(3)] == ["a_3", "a_5", "a_6"]
    assert taken == again == {"a", "a_2", "a_3", "a_4", "a_5", "a_6"}
    fresh = set()
    assert [next(unique_names(fresh, "b", "#")) for _ in range(3)] == ["b", "b#2", "b#3"]
    free = set()            # unique_name's own path for a free base: taken, then numbered as before
    assert [unique_name(free, "b", "#") for _ in range(3)] == ["b", "b#2", "b#3"] and free == fresh
    taken = {"n_0", "n_2", "x"}
    numbered = unique_names(taken, "n", start=0)
    assert [next(numbered) for _ in range(4)] == ["n_1", "n_3", "n_4", "n_5"]
    assert "n" not in taken and {"n_1", "n_3", "n_4", "n_5"} <= taken
