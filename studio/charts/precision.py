"""The accuracy-vs-latency trade-off across variants (plotly scatter)."""

from __future__ import annotations

import re

import plotly.graph_objects as go

from studio.charts.layout import legend_below
from studio.precision.report import PrecisionReport

__all__ = ["tradeoff_figure"]

_SYMBOLS = {"fp32": "circle", "fp16": "square", "bf16": "diamond", "int8": "triangle-up",
            "int8-mixed": "triangle-down"}   # by variant name first, then by precision
_COLORS = {"onnxruntime": "#1f77b4", "openvino": "#ff7f0e", "tensorrt": "#2ca02c", "mnn": "#9467bd",
           "litert": "#d62728"}


_TARGET = re.compile(r"^\s*(?P<metric>[^<>=\s]+)\s*(?P<op>>=|<=)\s*(?P<value>[-+0-9.eE]+)\s*$")


def _task_target(report: PrecisionReport) -> tuple[str, float] | None:
    """(metric, value) of the task-metric target the report was judged by, when it has one."""
    m = _TARGET.match(report.target or "")
    if m is None:
        return None
    try:
        return m["metric"], float(m["value"])
    except ValueError:
        return None


def tradeoff_figure(report: PrecisionReport) -> go.Figure:
    """x: latency relative to ORT fp32 (same run), y: the measure the target was chosen on (the task
    metric of a dataset target, else cosine vs fp32); the target actually chosen and the fp32 line
    drawn, the recommended variant ringed."""
    fig = go.Figure()
    task = _task_target(report)

    def y_of(v):  # noqa: ANN001, ANN202 - a VariantResult
        return (v.task or {}).get("target_value") if task else v.cosine

    for engine in dict.fromkeys(v.engine for v in report.variants):
        vs = [v for v in report.variants if v.engine == engine and v.ratio is not None and y_of(v) is not None]
        if not vs:
            continue
        fig.add_trace(go.Scatter(
            x=[v.ratio for v in vs], y=[y_of(v) for v in vs], mode="markers+text", name=engine,
            text=[v.name for v in vs], textposition="top center",
            marker={"size": [18 if v.recommended else 11 for v in vs], "color": _COLORS.get(engine, "#7f7f7f"),
                    "symbol": [_SYMBOLS.get(v.name, _SYMBOLS.get(v.precision, "circle")) for v in vs],
                    "line": {"width": [3 if v.recommended else 0 for v in vs], "color": "#2ca02c"}},
            hovertext=[f"{v.label}<br>p10 {v.latency_p10_ms:.2f} ms ({v.speed_text})"
                       + (f"<br>cosine {v.cosine:.5f}" if v.cosine is not None else "")
                       + (f"<br>{task[0]} {y_of(v):.4g}" if task else "")
                       + (f"<br>top-1 {v.top1:.2f}" if v.top1 is not None else "")
                       + ("" if v.meets_target else "<br>target missed")
                       + ("<br>recommended" if v.recommended else "") for v in vs],
            hoverinfo="text"))
    if task:
        fig.add_hline(y=task[1], line_dash="dash", line_color="#d62728",
                      annotation_text=f"target {report.target}", annotation_position="bottom right")
        y_title = f"{task[0]} (on the dataset's evaluation part)"
    else:
        fig.add_hline(y=report.target_cosine, line_dash="dash", line_color="#d62728",
                      annotation_text=f"target cosine {report.target_cosine:.10g}", annotation_position="bottom right")
        y_title = "cosine vs fp32 (worst output)"
    fig.add_vline(x=1.0, line_dash="dot", line_color="#7f7f7f", annotation_text="fp32 latency")
    fig.update_layout(title="Accuracy vs latency (lower-left is faster, higher is more accurate)",
                      xaxis_title="latency / ORT fp32 latency (same run)", yaxis_title=y_title,
                      height=460, margin={"l": 60, "r": 20, "t": 50, "b": 50})
    return legend_below(fig)
