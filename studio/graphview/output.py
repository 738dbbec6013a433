"""Write a graph view to a file: interactive ``.html`` (self-contained),
``.dot``, or ``.svg`` (through graphviz ``dot``; when it is missing, the
``.dot`` is written instead and the result says so in one line).

The output path is the user's choice (CLI ``-o``); model text never becomes
part of a file name. Files are written atomically.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from studio.core.errors import StudioError
from studio.core.paths import atomic_write_bytes
from studio.graphview.dot import SVG_MAX_ITEMS, dot_binary, dot_to_svg, to_dot
from studio.graphview.html import Panel, Table, render_html
from studio.graphview.view import GraphView

log = logging.getLogger(__name__)

FORMATS = ("html", "dot", "svg")


@dataclass(frozen=True)
class Written:
    path: Path
    format: str             # html | dot | svg
    items: int              # items drawn (all panels)
    note: str | None = None # e.g. the missing-`dot` fallback


def _write(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))   # UTF-8 whatever the locale says


def format_of(path: Path) -> str:
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise StudioError(f"output must end in .html, .dot or .svg (got '{path.suffix[:20] or 'no suffix'}')")
    return fmt


def write_graph(path: Path, panels: Sequence[Panel], *, title: str, notes: Sequence[str] = (),
                tables: Sequence[Table] = (), dot_view: GraphView | None = None) -> Written:
    """Write ``panels`` as HTML, or ``dot_view`` (default: the first panel's view) as DOT/SVG."""
    path = Path(path)
    fmt = format_of(path)
    items = sum(len(p.view) for p in panels)
    if fmt == "html":
        _write(path, render_html(panels, title=title, notes=notes, tables=tables))
        return Written(path, fmt, items)
    view = dot_view or panels[0].view
    text = to_dot(view)
    if fmt == "svg":
        if not dot_binary().ok:
            fallback = path.with_suffix(".dot")
            _write(fallback, text)
            return Written(fallback, "dot", len(view),
                           f"graphviz `dot` was not found, so {fallback.name} was written instead of an SVG "
                           "(apt-get install graphviz)")
        if len(view) > SVG_MAX_ITEMS:
            raise StudioError(f"{len(view):,} items are too many for an SVG (at most {SVG_MAX_ITEMS:,}); "
                              "use a lower --level, --focus NODE --hops K, or write .html")
        _write(path, dot_to_svg(text))
        return Written(path, fmt, len(view))
    _write(path, text)
    return Written(path, fmt, len(view))
