"""Layered layout, topological order with cycles, projection onto a hierarchy
cut, the overview budget (R20: aggregate, never draw everything) and search."""

from __future__ import annotations

import time

import pytest

from benchmarks.graph_models import chain, resnet_like, wide_io
from studio import api
from studio.graphview.layout import DX, layered_layout
from studio.graphview.order import topo_depth
from studio.graphview.project import project, reveal
from studio.graphview.view import neighbourhood, search
from tests.conftest import SAMPLES


def test_topo_depth_on_a_dag_and_with_a_cycle():
    order, depth = topo_depth(4, [(0, 1), (1, 2), (0, 2), (2, 3)])
    assert depth == [0, 1, 2, 3] and sorted(order) == [0, 1, 2, 3]
    order, depth = topo_depth(3, [(0, 1), (1, 2), (2, 1)])     # 1 <-> 2 cycle is broken, not looped on
    assert sorted(order) == [0, 1, 2] and order[0] == 0


def test_layers_follow_edges_and_nodes_never_overlap():
    edges = [(0, 1), (0, 2), (1, 3), (2, 3), (3, 4), (0, 4), (5, 3)]
    lay = layered_layout(6, edges)
    for s, d in edges:
        assert lay.y[d] > lay.y[s]
    rows: dict[float, list[float]] = {}
    for x, y in zip(lay.x, lay.y):
        rows.setdefault(y, []).append(x)
    for xs in rows.values():
        xs.sort()
        assert all(b - a >= DX - 1e-9 for a, b in zip(xs, xs[1:]))


def test_a_chain_is_straight_and_a_deep_one_wraps_into_columns():
    lay = layered_layout(50, [(i, i + 1) for i in range(49)])
    assert len(set(lay.x)) == 1 and lay.columns == 1
    deep = layered_layout(5000, [(i, i + 1) for i in range(4999)])
    assert deep.columns > 10
    assert len(set(zip(deep.x, deep.y))) == 5000            # no two items on one spot
    assert 0.3 < deep.width / deep.height < 10               # roughly the canvas shape, not a line


def test_layout_is_linear_enough():
    n = 20_000
    edges = [(i, i + 1) for i in range(n - 1)] + [(i, i + 7) for i in range(0, n - 7, 3)]
    t = time.perf_counter()
    layered_layout(n, edges)
    assert time.perf_counter() - t < 60         # hang guard only: ~0.3 s here, a quadratic layout takes many minutes


def test_projection_merges_edges_and_respects_expand_and_collapse():
    idx = api.graph_index(api.load(SAMPLES / "cnn_unfused.onnx"))
    g, h = idx.graph, idx.hierarchy
    p1 = project(g, h, 1)
    layer2 = next(grp for grp in h.groups if grp.label == "layer2/layer2.0")
    assert any(it.kind == "group" and it.ref == layer2.index for it in p1.items)
    # Every graph edge is accounted for: inside an item, or merged into a drawn edge.
    inner = sum(1 for e in g.edges if p1.item_of_node[e.src] == p1.item_of_node[e.dst])
    assert sum(e.count for e in p1.edges) + inner == len(g.edges)
    opened = project(g, h, 1, expanded={layer2.key})
    assert not any(it.kind == "group" and it.ref == layer2.index for it in opened.items)
    assert len(opened.items) > len(p1.items)
    closed = project(g, h, 99, collapsed={layer2.key})
    assert any(it.kind == "group" and it.ref == layer2.index for it in closed.items)
    conv = idx.find("/layer2/layer2.0/downsample/downsample.0/Conv")
    shown = project(g, h, 1, expanded=reveal(h, conv))
    assert shown.items[shown.item_of_node[conv]].kind == "node"


def test_overview_of_10k_nodes_draws_all_and_a_small_budget_aggregates(tmp_path):
    idx = api.graph_index(api.load(resnet_like(1000, tmp_path / "r10k.onnx")))
    v = api.graph_view(index=idx)
    assert len(v) == len(idx.graph.nodes) > 10_000 and v.note is None
    small = api.graph_view(index=idx, budget=500)
    assert len(small) <= 500 and "drawn as" in small.note
    asked = api.graph_view(index=idx, level=99, budget=500)     # asking for more than fits is cut back
    assert len(asked) <= 500 and "would draw" in asked.note


@pytest.mark.slow
def test_100k_chain_and_10k_io_are_aggregated_not_drawn_whole(tmp_path):
    for path in (chain(100_000, tmp_path / "chain.onnx"), wide_io(10_000, tmp_path / "io.onnx")):
        idx = api.graph_index(api.load(path))
        t = time.perf_counter()
        v = api.graph_view(index=idx)
        assert time.perf_counter() - t < 120      # a hang guard only (generous on any CPU or load), not a speed expectation
        assert len(v) <= 12_000 < len(idx.graph.nodes) and "expand a group" in v.note


def test_neighbourhood_and_search():
    idx = api.graph_index(api.load(SAMPLES / "cnn_unfused.onnx"))
    k = idx.find("/layer1/layer1.0/Add")
    one = neighbourhood(idx.graph, k, 1)
    assert k in one and len(one) == 4          # two producers, itself, one consumer
    assert len(neighbourhood(idx.graph, k, 10, limit=7)) == 7
    hits = search(idx.graph, "batchnorm")        # the 7 BN nodes and the consumers of their outputs
    assert sum(idx.graph.nodes[i].op_type == "BatchNormalization" for i in hits) == 7
    assert search(idx.graph, "GEMM") == [idx.find("/fc/Gemm")]
    assert search(idx.graph, "/layer1/layer1.0/conv1/Conv_output_0")      # tensor names match too
    v = api.graph_view(index=idx, focus="/layer1/layer1.0/Add", hops=1, query="Add")
    assert v.mode == "region" and len(v) == 4 and v.focus is not None and v.highlight
