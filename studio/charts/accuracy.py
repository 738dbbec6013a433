"""Plotly figures for comparisons: the per-layer error chart of a layer-wise run.

Model-derived names only appear in hover text and axis data (plotly escapes
them); they are never formatted into HTML by hand."""

from __future__ import annotations

import math

import plotly.graph_objects as go

from studio.accuracy.layerwise import LayerwiseResult

__all__ = ["layer_error_figure"]


def layer_error_figure(result: LayerwiseResult, *, threshold: float | None = None, max_points: int = 3000,
                       title: str = "Relative L2 error per layer") -> go.Figure:
    """Error of each compared tensor in the reference's topological order (log scale),
    the divergence threshold, and the first diverging layer marked."""
    layers = list(result.layers)
    if len(layers) > max_points:
        step = math.ceil(len(layers) / max_points)
        keep = {id(x) for x in layers[::step]} | {id(x) for x in layers if x.exceeds}
        layers = [x for x in layers if id(x) in keep]
    floor = 1e-12
    xs = list(range(len(layers)))
    ys = [max(x.error, floor) if math.isfinite(x.error) else None for x in layers]
    colors = ["#d62728" if x.exceeds else "#1f77b4" for x in layers]
    hover = [f"{x.node[:120]}<br>{x.op_type} → {x.tensor[:120]}<br>rel L2 {x.error:.3g}, cosine "
             f"{(x.cosine if x.cosine is not None else float('nan')):.5f}"
             + (f"<br>candidate: {x.candidate_node[:120]}" if x.candidate_node else "")
             + (f"<br>{x.note[:160]}" if x.note else "") for x in layers]
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="lines+markers", marker={"color": colors, "size": 6},
                               line={"color": "#9ecae1", "width": 1}, hovertext=hover, hoverinfo="text",
                               name="relative L2 error"))
    threshold = threshold if threshold is not None else _threshold(result)
    if threshold:
        fig.add_hline(y=threshold, line_dash="dash", line_color="#d62728",
                      annotation_text=f"threshold {threshold:g}", annotation_position="top left")
    first = result.first_divergence
    if first is not None and first in layers:
        i = layers.index(first)
        fig.add_annotation(x=i, y=math.log10(max(first.error, floor)) if math.isfinite(first.error) else 0,
                           text="first divergence", showarrow=True, arrowhead=2)
    fig.update_layout(title=title, xaxis_title="layer (topological order of the reference)",
                      yaxis_title="relative L2 error", yaxis_type="log", height=420,
                      margin={"l": 60, "r": 20, "t": 50, "b": 50}, showlegend=False)
    return fig


def _threshold(result: LayerwiseResult) -> float | None:
    text = result.tolerance
    try:
        return float(text.split(">")[1].split()[0])
    except (IndexError, ValueError):
        return None
