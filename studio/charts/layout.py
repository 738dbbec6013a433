"""Layout conventions every Plotly chart builder applies, so no page draws a legend over its axes
or drops category labels.

Plain layout dicts applied through ``fig.update_layout`` (no plotly import here):

- :func:`legend_below`: a horizontal legend anchored to the bottom of the figure (``yref="container"``),
  below the axis title; Plotly grows the bottom margin to fit it. Plotly's own horizontal default
  (``y=-0.1`` of the plot height) lands on the x tick labels and title.
- :func:`category_rows`: one tick per category row and a height that gives each row room; Plotly
  otherwise thins crowded category labels (every other op name went missing on the Overview).
"""

from __future__ import annotations

from typing import Any

LEGEND_BELOW: dict[str, Any] = {"orientation": "h", "yref": "container", "yanchor": "bottom", "y": 0.0,
                                "x": 0.0, "xanchor": "left"}
ROW_PX = 22              # per category row: fits a 12-px label with its spacing
BASE_PX = 140            # title, x axis and margins


def legend_below(fig: Any) -> Any:
    """Put ``fig``'s legend under the plot, outside the axes; returns ``fig``."""
    fig.update_layout(legend=dict(LEGEND_BELOW))
    return fig


def category_rows(fig: Any, rows: int, *, axis: str = "y", extra_px: int = 0) -> Any:
    """Label every category of ``axis`` and size the figure for ``rows`` rows; returns ``fig``."""
    fig.update_layout(height=BASE_PX + extra_px + ROW_PX * max(rows, 1),
                      **{f"{axis}axis": {"tickmode": "linear", "tick0": 0, "dtick": 1, "automargin": True}})
    return fig
