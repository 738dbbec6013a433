"""Overlays as data: a hand-made overlay (the compatibility, profiling and
precision features will hand theirs over the same way), aggregation on
collapsed groups, colours and legends, and the provider registry."""

from __future__ import annotations

import pytest

from studio import api
from studio.graphview.echarts import echarts_option
from studio.graphview.overlays import (
    MISSING,
    Overlay,
    OverlayContext,
    available_overlays,
    paint,
    register_overlay,
    unregister_overlay,
)
from tests.conftest import SAMPLES


@pytest.fixture(scope="module")
def cnn():
    h = api.load(SAMPLES / "cnn_unfused.onnx")
    s = api.inspect(h)
    return h, s, api.graph_index(h, s)


def test_builtin_overlays(cnn):
    _, s, idx = cnn
    found = api.graph_overlays(idx, s)
    assert {"op type", "FLOPs share"} <= set(found)
    flops = found["FLOPs share"]
    assert flops.kind == "numeric" and flops.unit == "%"
    assert sum(flops.values.values()) == pytest.approx(100.0)
    v = api.graph_view(index=idx, overlay="FLOPs share")
    convs = [i for i, it in enumerate(v.items) if it.kind == "node" and idx.graph.nodes[it.ref].op_type == "Conv"]
    assert all(v.painted.values[i] > 0 for i in convs)
    assert "%" in v.painted.text(convs[0])
    # Nodes without FLOPs (graph I/O) are grey.
    io = next(i for i, it in enumerate(v.items) if it.kind == "node" and idx.graph.nodes[it.ref].kind == "input")
    assert v.painted.colors[io] == MISSING


def test_hand_made_categorical_overlay_shows_the_worst_status_on_groups(cnn):
    _, _, idx = cnn
    g, h = idx.graph, idx.hierarchy
    status = {n.id: "supported" for n in g.nodes if n.kind == "op"}
    status["/layer2/layer2.0/conv2/Conv"] = "unsupported"
    status["/layer2/layer2.0/relu/Relu"] = "partial"
    ov = api.graph_overlays(idx, data={"compatibility": {"tensorrt": status}})["compatibility: tensorrt"]
    assert ov.aggregate == "worst"
    v = api.graph_view(index=idx, level=1, overlay=ov)
    layer2 = next(i for i, it in enumerate(v.items)
                  if it.kind == "group" and h.groups[it.ref].label == "layer2/layer2.0")
    layer1 = next(i for i, it in enumerate(v.items)
                  if it.kind == "group" and h.groups[it.ref].label == "layer1/layer1.0")
    assert v.painted.values[layer2] == "unsupported" and v.painted.values[layer1] == "supported"
    legend = {e.label: e.color for e in v.painted.legend}
    assert v.painted.colors[layer2] == legend["unsupported"] != legend["supported"]
    # The hover text carries the value; the legend lists what is drawn with counts.
    assert ("compatibility: tensorrt", "unsupported") in v.tooltip_lines(layer2)
    assert any(e.label == "supported" and e.count > 0 for e in v.painted.legend)


def test_numeric_aggregations_and_scale():
    ov_sum = Overlay("t", "numeric", {"a": 1.0, "b": 3.0}, unit="ms", aggregate="sum")
    ov_max = Overlay("e", "numeric", {"a": 1e-6, "b": 1e-2}, aggregate="max", scale="log")
    p = paint(ov_sum, [["a"], ["b"], ["a", "b"], ["zzz"]])
    assert p.values == (1.0, 3.0, 4.0, None)
    assert p.colors[3] == MISSING and p.colors[0] != p.colors[2]
    assert p.text(2) == "4 ms" and p.low == 1.0 and p.high == 4.0
    q = paint(ov_max, [["a"], ["a", "b"]])
    assert q.values == (1e-6, 1e-2) and q.colors[0] != q.colors[1]
    assert len(q.legend) == 5                            # scale stops for the legend
    with pytest.raises(ValueError):
        Overlay("x", "numeric", {}, aggregate="worst")
    with pytest.raises(ValueError):
        Overlay("x", "ordinal", {})                      # type: ignore[arg-type]


def test_a_feature_registers_its_own_provider(cnn):
    _, s, idx = cnn

    def timings(ctx: OverlayContext):
        times = ctx.data.get("my_profile")
        if times:
            yield Overlay("my time", "numeric", times, unit="ms", aggregate="sum")

    def broken(ctx: OverlayContext):
        raise RuntimeError("provider bug")

    register_overlay("test-timings", timings)
    register_overlay("test-broken", broken)
    try:
        with pytest.raises(ValueError):
            register_overlay("test-timings", timings)
        assert "my time" not in available_overlays(OverlayContext(idx.graph, s))
        found = api.graph_overlays(idx, s, {"my_profile": {"/fc/Gemm": 2.5, "/conv1/Conv": 0.5}})
        assert "my time" in found and "op type" in found      # the broken provider is skipped
        v = api.graph_view(index=idx, overlay=found["my time"])
        gemm = next(i for i, it in enumerate(v.items) if v.item_key(i) == "/fc/Gemm")
        assert v.painted.values[gemm] == 2.5
        option = echarts_option(v)
        assert "2.5 ms" in option["series"][0]["data"][gemm]["tooltip"]["formatter"]
    finally:
        unregister_overlay("test-timings")
        unregister_overlay("test-broken")


def test_time_share_and_error_overlays_from_data(cnn):
    _, s, idx = cnn
    found = api.graph_overlays(idx, s, {"node_times": {"/fc/Gemm": 3.0, "/conv1/Conv": 1.0},
                                        "node_errors": {"/fc/Gemm": 1e-3}})
    assert found["time share"].values["/fc/Gemm"] == pytest.approx(75.0)
    assert found["numeric error"].aggregate == "max" and found["numeric error"].scale == "log"


def test_unknown_overlay_name_is_a_clear_error(cnn):
    _, s, idx = cnn
    with pytest.raises(Exception, match="no overlay 'nope'.*op type"):
        api.graph_view(index=idx, summary=s, overlay="nope")


def test_check_report_becomes_a_compatibility_overlay_on_the_right_nodes():
    """The compatibility check's node ids are the graph's node ids, so its verdicts colour the graph."""
    from studio import api
    from tests.conftest import SAMPLES

    handle = api.load(SAMPLES / "mmdeploy_grid_sampler.onnx")
    report = api.check(handle, ("onnxruntime",), run=False)
    data = api.compatibility_overlay_data(report)
    index = api.graph_index(handle, api.inspect(handle))
    overlays = api.graph_overlays(index, None, {"compatibility": data})
    name = next(n for n in overlays if n.startswith("compatibility: onnxruntime"))
    values = overlays[name].values
    graph_ids = {n.id for n in index.graph.nodes}
    assert values and set(values) <= graph_ids
    assert values["/grid_sampler"] == "unsupported" and values["/conv/Conv"] == "supported"
