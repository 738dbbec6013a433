"""The collector held off while the viewer's page is built (studio.core.gcpause; issue 35 item 2: full
collections walking the whole heap were a quarter of a 10k-node page's CPU). Asserted by the collector's own
record (``gc.callbacks``): no collection during the paused build, collections during the same work unpaused;
and the pause's bookkeeping: nested and concurrent holders, a collector already off, an exception."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest

import studio.facade.graph as facade_graph
from studio import api
from studio.core.gcpause import gc_paused, without_gc
from studio.graphview.hierarchy import build_hierarchy

SAMPLES = Path(__file__).resolve().parents[2] / "sample_models"


def test_the_viewer_page_is_built_without_a_collection_and_the_collector_runs_after(monkeypatch, tmp_path):
    """Collections are recorded while the build's own work runs (from the facade's first step to its last):
    none in the facade's calls, some in the same steps called unpaused."""
    inside = [False]
    seen: list[int] = []

    def record(phase, info):
        if phase == "start" and inside[0]:
            seen.append(info["generation"])

    def opens(fn):
        def run(*a, **k):
            inside[0] = True
            return fn(*a, **k)
        return run

    def closes(fn):
        def run(*a, **k):
            out = fn(*a, **k)
            inside[0] = False
            return out
        return run

    def spans(fn):
        return closes(opens(fn))

    monkeypatch.setattr(facade_graph, "build_graph", opens(facade_graph.build_graph))
    monkeypatch.setattr(facade_graph, "index_graph", closes(facade_graph.index_graph))
    monkeypatch.setattr(facade_graph, "graph_page", spans(facade_graph.graph_page))
    h = api.load(SAMPLES / "llama_optimum.onnx")
    gc.callbacks.append(record)
    try:
        plain = facade_graph.build_graph(h)           # the same steps unpaused: the collector runs in them
        facade_graph.graph_page(plain, build_hierarchy(plain))
        assert seen and not inside[0]
        seen.clear()
        index, summary = api.graph_index_inspected(h)
        assert not inside[0]
        api.write_graph_viewer(index, tmp_path / "g.html", summary=summary)
        api.graph_viewer_html(index, summary=summary)
    finally:
        gc.callbacks.remove(record)
    assert seen == []
    assert gc.isenabled()


def test_both_threads_of_the_overlapped_build_run_paused(monkeypatch):
    seen: dict[str, bool] = {}
    real_inspect, real_hierarchy = facade_graph.inspect, facade_graph.build_hierarchy

    def inspect(*a, **k):
        seen["inspect thread"] = gc.isenabled()
        return real_inspect(*a, **k)

    def hierarchy(*a, **k):
        seen["hierarchy"] = gc.isenabled()
        return real_hierarchy(*a, **k)

    monkeypatch.setattr(facade_graph, "inspect", inspect)
    monkeypatch.setattr(facade_graph, "build_hierarchy", hierarchy)
    api.graph_index_inspected(api.load(SAMPLES / "cnn_unfused.onnx"))
    assert seen == {"inspect thread": False, "hierarchy": False}
    assert gc.isenabled()


def test_concurrent_holders_resume_the_collector_when_the_last_one_leaves():
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    states: list[tuple[str, bool]] = []

    def first():
        with gc_paused():
            first_in.set()
            second_in.wait(10)
        states.append(("first left", gc.isenabled()))
        first_out.set()

    def second():
        first_in.wait(10)
        with gc_paused():
            second_in.set()
            first_out.wait(10)
            states.append(("second still in", gc.isenabled()))
        states.append(("second left", gc.isenabled()))

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert states == [("first left", False), ("second still in", False), ("second left", True)]


def test_a_collector_that_was_off_stays_off_and_an_error_resumes_it():
    gc.disable()
    with gc_paused(), gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()
    gc.enable()

    @without_gc
    def fails():
        assert not gc.isenabled()
        raise ValueError("bad")

    with pytest.raises(ValueError):
        fails()
    assert gc.isenabled()
    assert fails.__name__ == "fails"
