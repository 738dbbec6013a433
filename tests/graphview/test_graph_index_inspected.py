"""``api.graph_index_inspected`` (issue 35 item 2): the viewer's graph and hierarchy built while inspect's
sandbox worker runs, then the shapes and FLOPs attached. Oracle: the sequential path the Graph page took
before (``inspect`` then ``graph_index``), which must give the same graph, hierarchy and page."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import studio.facade.graph as facade_graph
from studio import api
from studio.cli import main
from studio.graphview.viewer import graph_page

SAMPLES = Path(__file__).resolve().parents[2] / "sample_models"


@pytest.mark.parametrize("name", ["yolo_detector", "if_loop", "llama_optimum"])
def test_the_overlapped_index_is_the_sequential_one(name):
    h = api.load(SAMPLES / f"{name}.onnx")
    index, summary = api.graph_index_inspected(h)
    oracle = api.graph_index(h, api.inspect(h, memory=False))
    assert summary.memory is None                                   # memory=False, as the viewer asks
    assert index.graph.nodes == oracle.graph.nodes                  # FLOPs included
    assert any(n.flops for n in index.graph.nodes)
    assert index.graph.edges == oracle.graph.edges
    assert dict(index.graph.tensors) == dict(oracle.graph.tensors)  # the summary's edge shapes
    assert index.graph.pred == oracle.graph.pred and index.graph.succ == oracle.graph.succ
    assert index.hierarchy == oracle.hierarchy
    assert graph_page(index.graph, index.hierarchy)[0] == graph_page(oracle.graph, oracle.hierarchy)[0]


def test_the_hierarchy_is_built_while_inspect_runs(monkeypatch, tmp_path):
    """inspect (in its thread) waits until the hierarchy has been built: only an overlapped build finishes
    without the wait timing out; the CLI's 'graph -o x.html' takes that path."""
    built = threading.Event()
    overlapped: list[bool] = []
    real_inspect, real_hierarchy = facade_graph.inspect, facade_graph.build_hierarchy

    def hierarchy(*a, **k):
        out = real_hierarchy(*a, **k)
        built.set()
        return out

    def inspect(*a, **k):
        overlapped.append(built.wait(60))
        return real_inspect(*a, **k)

    monkeypatch.setattr(facade_graph, "build_hierarchy", hierarchy)
    monkeypatch.setattr(facade_graph, "inspect", inspect)
    assert main(["graph", str(SAMPLES / "cnn_unfused.onnx"), "-o", str(tmp_path / "g.html")]) == 0
    assert overlapped == [True]
    assert (tmp_path / "g.html").stat().st_size > 0
