"""A model past the old 12,000-leaf scene budget ships whole and opens fully (issue 35 item 2: at 100k
nodes, groups of more than 12,000 nodes were sealed: drawn closed for good, never openable).

Oracle: the ONNX proto itself. Every op node's name is a leaf of the opened view (and, in the browser, a box
of the laid-out drawing), and the drawn edges are exactly the proto's producer -> consumer pairs by tensor
name, worked out here from ``node.input`` / ``node.output`` without the studio's graph model. The browser's
side (the renderer lays it all out, in its worker) is tests/e2e/test_graph_viewer_large_open.py."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from studio.graphview.hierarchy import build_hierarchy
from studio.graphview.model import graph_from_proto
from studio.graphview.scene import build_scene, opening_view
from tests.conftest import save

NODES = 20_000          # one scope ("big") holding more nodes than the old budget (12,000); with every group
                        # open, past the 20,000 items from which the renderer lays out in its worker


def _big_scope_model(path: Path, n: int = NODES) -> Path:
    """``n`` ops under ``/big/b<k>/``: a chain of Relus where every 10th op is an Add of the previous output
    and the one 7 ops back (skip edges, so the edges are not only a chain)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    nodes, outs = [], ["x"]
    for i in range(n):
        name = f"/big/b{i // 50}/op{i}"
        if i % 10 == 9:
            nodes.append(helper.make_node("Add", [outs[-1], outs[-7]], [f"t{i}"], name=name))
        else:
            nodes.append(helper.make_node("Relu", [outs[-1]], [f"t{i}"], name=name))
        outs.append(f"t{i}")
    y = helper.make_tensor_value_info(outs[-1], TensorProto.FLOAT, [1, 4])
    return save(helper.make_model(helper.make_graph(nodes, "big", [x], [y]),
                                  opset_imports=[helper.make_opsetid("", 17)]), path)


def _oracle(model: onnx.ModelProto) -> tuple[set[str], set[tuple[str, str]]]:
    """Op names, and (producer name, consumer name) for every tensor an op makes and another op reads."""
    producer = {o: n.name for n in model.graph.node for o in n.output}
    pairs = {(producer[t], n.name) for n in model.graph.node for t in n.input if t in producer}
    return {n.name for n in model.graph.node}, pairs


def _scene(path: Path) -> dict:
    g = graph_from_proto(onnx.load(str(path)), "big")
    scene, stats = build_scene(g, build_hierarchy(g))
    assert stats.sealed == 0 and scene["note"] is None
    return scene


def test_a_group_past_12000_nodes_ships_unsealed_and_opens_to_every_node(tmp_path):
    path = _big_scope_model(tmp_path / "big.onnx")
    names, pairs = _oracle(onnx.load(str(path)))
    scene = _scene(path)
    assert max(g["size"] for g in scene["groups"][1:]) >= NODES > 12_000     # a group (not the root) past it
    assert not [lf for lf in scene["leaves"] if lf["kind"] == "sealed"]
    # Every group open: the renderer's rule (opening_view) shows each leaf as itself.
    items, edges = opening_view(scene, set(range(len(scene["groups"]))))
    leaves = scene["leaves"]
    shown = {leaves[int(i[1:])]["full"] for i in items if i.startswith("n") and leaves[int(i[1:])]["kind"] == "op"}
    assert shown == names
    drawn = {(leaves[int(a[1:])]["full"], leaves[int(b[1:])]["full"]) for a, b in edges
             if leaves[int(a[1:])]["kind"] == "op" and leaves[int(b[1:])]["kind"] == "op"}
    assert drawn == pairs
