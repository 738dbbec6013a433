"""The Overview page's charts of a model summary (``api.inspect``'s ``ModelSummary``): op histogram
and FLOPs by op type, one labelled row per op (studio.charts.layout). Presentation only."""

from __future__ import annotations

from typing import TYPE_CHECKING

import plotly.graph_objects as go

from studio.charts.layout import category_rows
from studio.core.fmt import printable

if TYPE_CHECKING:
    from studio.api import ModelSummary


def _bars(labels: list[str], values: list[float], title: str, x_title: str) -> go.Figure:
    fig = go.Figure(go.Bar(x=values, y=labels, orientation="h"))
    fig.update_layout(title=title, xaxis_title=x_title, yaxis={"autorange": "reversed"},
                      margin={"t": 50, "b": 40})
    return category_rows(fig, len(labels))


def op_histogram_figure(summary: ModelSummary, top: int = 30) -> go.Figure | None:
    """Node count per op type (``domain::op`` for custom domains), most frequent first; None without nodes."""
    ops = summary.op_histogram[:top]
    if not ops:
        return None
    labels = [printable((f"{o.domain}::" if o.domain else "") + o.op_type, 60) for o in ops]
    return _bars(labels, [o.count for o in ops], "Op histogram", "nodes")


def flops_by_op_figure(summary: ModelSummary, top: int = 20) -> go.Figure | None:
    """GFLOPs per op type, largest first; None when nothing was counted."""
    rows = [(op, f / 1e9) for op, f in summary.flops.by_op if f > 0][:top]
    if not rows:
        return None
    return _bars([printable(op, 60) for op, _ in rows], [g for _, g in rows], "FLOPs by op type", "GFLOPs")
