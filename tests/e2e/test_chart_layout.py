"""Charts drawn by real Plotly.js in Chromium: every op-histogram label is there, and no legend
covers the plot area, tick labels or axis titles (issue 15). The figures are the studio's own
builders over real results (a real model summary, a real ORT + OpenVINO profile, a real precision run)."""

from __future__ import annotations

import onnx
import plotly.offline
import pytest
from onnx import TensorProto, helper

from studio import api
from studio.ui import overview_charts, profile_charts
from tests.conftest import SAMPLES, save

pytestmark = pytest.mark.browser

UNARY = ["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Exp", "Softsign", "Softplus", "Elu", "Selu", "HardSigmoid",
         "HardSwish", "Sin", "Cos", "Floor", "Ceil", "Round", "Sign", "Erf", "Identity", "Reciprocal", "Atan",
         "Sinh", "Cosh", "Asinh", "Tan", "Mish", "Celu", "LeakyRelu", "ThresholdedRelu"]

_BOXES = """sel => [...document.querySelectorAll(sel)].map(e => { const r = e.getBoundingClientRect();
                    return [r.left, r.top, r.right, r.bottom]; }).filter(b => b[2] > b[0] && b[3] > b[1])"""


def _many_ops(path):
    """A chain with 30 op types, op i used 30 - i times (30 distinct bars)."""
    nodes, prev, k = [], "x", 0
    for i, op in enumerate(UNARY):
        for _ in range(len(UNARY) - i):
            nodes.append(helper.make_node(op, [prev], [f"t{k}"], name=f"n{k}"))
            prev, k = f"t{k}", k + 1
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)


@pytest.fixture
def plot(browser):
    """Draw a figure at a Streamlit column's width; returns the page."""
    context = browser.new_context(viewport={"width": 700, "height": 1600})
    js = plotly.offline.get_plotlyjs()

    def draw(fig):
        pg = context.new_page()          # a fresh page per figure: one plot per document
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.set_content(f"<html><body style='margin:0'><div id='p'></div><script>{js}</script><script>"
                       f"const f = {fig.to_json()}; Plotly.newPlot('p', f.data, f.layout, {{responsive: true}});"
                       "</script></body></html>")
        pg.wait_for_selector(".main-svg", state="attached")
        assert errors == []
        return pg
    yield draw
    context.close()


def _overlaps(a, b) -> bool:
    return not (a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1])


def _assert_legend_outside(pg, name: str) -> None:
    legends = pg.evaluate(_BOXES, ".legend .bg")
    assert legends, f"{name}: no legend drawn"
    axes = {part: pg.evaluate(_BOXES, sel) for part, sel in (
        ("plot area", ".nsewdrag"), ("x tick labels", ".xtick text"), ("y tick labels", ".ytick text"),
        ("x title", ".xtitle"), ("y title", ".ytitle"))}
    for legend in legends:
        for part, boxes in axes.items():
            hit = [b for b in boxes if _overlaps(legend, b)]
            assert not hit, f"{name}: the legend {legend} covers the {part} {hit[:2]}"


def test_every_op_histogram_label_is_drawn(plot, tmp_path):
    summary = api.inspect(api.load(_many_ops(tmp_path / "many_ops.onnx")))
    assert len(summary.op_histogram) == 30
    pg = plot(overview_charts.op_histogram_figure(summary))
    labels = pg.evaluate("() => [...document.querySelectorAll('.ytick text')].map(e => e.textContent)")
    assert sorted(labels) == sorted(UNARY)
    boxes = pg.evaluate(_BOXES, ".ytick text")
    assert not any(_overlaps(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:])   # readable, not stacked


@pytest.fixture(scope="module")
def cnn_profile():
    """One real ORT + OpenVINO profile of the CNN, with memory, for both profile-chart tests (one run, not two)."""
    options = api.ProfileOptions(warmup=1, iterations=20, rounds=2, memory=True, memory_iterations=10)
    return api.profile([api.load(SAMPLES / "cnn_unfused.onnx")], ["ort", "ov"], options)


def test_profile_and_precision_legends_stay_outside_the_axes(plot, cnn_profile):
    handle = api.load(SAMPLES / "cnn_unfused.onnx")
    profile = cnn_profile
    figures = {"latency histogram": profile_charts.latency_histogram(profile),
               "cold start": profile_charts.cold_start_chart(profile),
               "memory timeline": profile_charts.memory_timeline(profile)}
    report = api.precision(handle, variants=["fp32", "fp32-ov", "fp16"], samples=2, latency_budget_s=1)
    figures["precision trade-off"] = api.tradeoff_figure(report)
    for name, fig in figures.items():
        _assert_legend_outside(plot(fig), name)


def _label_boxes(pg) -> list:
    return pg.evaluate(_BOXES, ".annotation-text-g")


def test_profile_histogram_labels_never_collide(plot, cnn_profile):
    """p50/p99 labels of every variant: none overlaps another, on a real ORT + OpenVINO profile and on
    the worst case of the same profile (each p99 a hair above its p50, both variants on one value)."""
    import dataclasses

    profile = cnn_profile
    assert sum(v.ok for v in profile.variants) == 2
    same = float(profile.variants[0].latency.p50_ms)
    worst = dataclasses.replace(profile, variants=tuple(
        dataclasses.replace(v, latency=dataclasses.replace(v.latency, p50_ms=same, p99_ms=same * 1.0001))
        for v in profile.variants))
    for name, prof in (("measured", profile), ("worst case", worst)):
        pg = plot(profile_charts.latency_histogram(prof))
        boxes = _label_boxes(pg)
        assert len(boxes) == 4, (name, boxes)                          # p50 and p99 of both variants
        hits = [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:] if _overlaps(a, b)]
        assert not hits, (name, hits)
        _assert_legend_outside(pg, f"latency histogram ({name})")
