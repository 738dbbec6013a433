"""The plotly figures the pages draw from a result object (plotly is imported only when a page asks).

A room of the facade (``studio.api`` names it; docs/architecture.md section 1)."""

from __future__ import annotations

from studio.charts.accuracy import layer_error_figure
from studio.charts.precision import tradeoff_figure

__all__ = [
    "layer_error_figure", "tradeoff_figure",
]
