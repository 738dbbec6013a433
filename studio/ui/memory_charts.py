"""The memory plan's figure and tables (``api.memory_plan``'s ``MemoryReport``): live bytes over ORT's
execution order with the peak marked, the tensors at the peak, each engine's measured activation
memory beside the prediction. Presentation only; model-derived names go into figures as data (plotly
escapes them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import plotly.graph_objects as go

from studio.core.fmt import human_bytes, printable

if TYPE_CHECKING:
    from studio.api import MemoryReport

__all__ = ["live_bytes_figure", "measured_rows", "peak_tensor_rows"]


def _plain(text: str, limit: int = 80) -> str:
    text = printable(text, limit)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def live_bytes_figure(report: MemoryReport, *, compare: MemoryReport | None = None) -> go.Figure:
    """MiB live at each step of the schedule (hover: the step's node), the peak marked; with ``compare``
    (the reordered model) its curve beside."""
    fig = go.Figure()
    for r, name in ((report, "as written"), (compare, "reordered")):
        if r is None:
            continue
        p = r.plan
        steps = list(range(1, len(p.live_bytes) + 1))
        fig.add_trace(go.Scatter(x=steps, y=[b / 2**20 for b in p.live_bytes], mode="lines", name=name,
                                 line={"shape": "hv"}, customdata=[_plain(n) for n in p.order],
                                 hovertemplate="step %{x}: %{customdata}<br>%{y:.3f} MiB live<extra></extra>"))
        fig.add_trace(go.Scatter(x=[p.peak_step + 1], y=[p.peak_bytes / 2**20], mode="markers+text",
                                 name=f"peak ({name})", marker={"size": 11, "symbol": "x"},
                                 text=[f"peak {human_bytes(p.peak_bytes)}"], textposition="top center",
                                 customdata=[_plain(p.peak_node or "-")],
                                 hovertemplate="peak at step %{x}: %{customdata}<br>%{y:.3f} MiB<extra></extra>"))
    fig.update_layout(title="Live memory over the schedule (ORT's order)", xaxis_title="step (node)",
                      yaxis_title="MiB live", margin={"t": 50, "b": 40}, height=340,
                      legend={"orientation": "h", "y": -0.25})
    return fig


def peak_tensor_rows(report: MemoryReport, top: int = 30) -> list[dict]:
    """The tensors live at the peak, largest first, with their lifetimes (steps, 1-based)."""
    life = {t.name: t for t in report.plan.tensors}
    end = len(report.plan.order)
    rows = []
    for name, nbytes in report.plan.peak_tensors[:top]:
        t = life.get(name)
        rows.append({"tensor": printable(name, 120), "bytes": nbytes, "size": human_bytes(nbytes),
                     "kind": t.kind if t else "?",
                     "from step": (t.start + 1 if t.start >= 0 else "input") if t else None,
                     "to step": (t.end + 1 if t.end < end else "output") if t else None})
    return rows


def measured_rows(report: MemoryReport) -> list[dict]:
    """Predicted against measured, per engine (or why there is no measurement)."""
    return [{"engine": m.engine, "predicted": human_bytes(m.predicted_bytes),
             "measured": human_bytes(m.measured_bytes) if m.measured_bytes is not None else "—",
             "error %": round(m.relative_error * 100, 1) if m.relative_error is not None else None,
             "what": m.what if m.error is None else printable(m.error, 200)} for m in report.measured]
