"""Model-derived strings made literal and safe for each output (R28).

Node and tensor names come from the model file, so they may carry HTML,
DOT or Markdown metacharacters, control characters, newlines or megabytes of
text. Every renderer in this package sends them through one of these
functions; none uses them as file names or identifiers.
"""

from __future__ import annotations

import html

from studio.core import jsonsafe

MAX_LABEL = 48        # on-canvas labels
MAX_TEXT = 300        # tooltips, details, DOT labels


def display(text: str, max_len: int = MAX_TEXT) -> str:
    """One line of printable text: control characters shown as escapes
    (a newline becomes the two characters ``\\n``), length capped."""
    if not isinstance(text, str):
        text = str(text)
    text = text[: max_len * 4]   # bound the work on a 1 MB name before escaping
    # All printable (nearly every name): nothing to escape, checked in C (the per-character join was most
    # of the viewer page's build on a 10k-node model: 107k labels, 2.5M characters).
    out = text if text.isprintable() else "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)
    return out if len(out) <= max_len else out[: max_len - 1] + "…"


def html_text(text: str, max_len: int = MAX_TEXT) -> str:
    """Text for HTML element content or attributes (ECharts tooltips render HTML).

    Braces become entities too: ECharts treats ``{a}``, ``{b}``... in a tooltip
    formatter as placeholders and ``{style|text}`` in labels as rich text.
    """
    return html.escape(display(text, max_len), quote=True).replace("{", "&#123;").replace("}", "&#125;")


def canvas_label(text: str, max_len: int = MAX_LABEL) -> str:
    """Text drawn on a canvas by ECharts: not HTML, but braces and pipes start
    ECharts rich-text markup, so they are replaced by look-alikes."""
    return display(text, max_len).replace("{", "\uff5b").replace("}", "\uff5d").replace("|", "\u2223")


def dot_string(text: str, max_len: int = MAX_TEXT) -> str:
    """A DOT double-quoted string, quotes included, that graphviz shows literally.

    Backslashes are doubled (graphviz reads ``\\n``, ``\\N``, ``\\G``... as
    escapes in labels) and ``&`` becomes ``&amp;`` (graphviz decodes HTML
    entities in labels, so ``&lt;`` would otherwise show as ``<``).
    """
    s = display(text, max_len).replace("\\", "\\\\").replace('"', '\\"').replace("&", "&amp;")
    return f'"{s}"'


def dot_lines(lines: list[str], max_len: int = MAX_TEXT) -> str:
    """Several literal lines as one DOT label string (joined by graphviz's ``\\n``)."""
    parts = [dot_string(line, max_len)[1:-1] for line in lines]
    return '"' + "\\n".join(parts) + '"'


_SCRIPT_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                   ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


def json_for_script(obj: object) -> str:
    """JSON safe inside an HTML ``<script>`` element: ``<``, ``>``, ``&`` and the
    JS line separators are escaped, so no string can close the element."""
    text = jsonsafe.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    for ch, escaped in _SCRIPT_ESCAPES:
        # Tested first: a replace that finds nothing still scans ~10x slower than ``in`` (a 10k-node model's
        # 4.6 MB scene usually holds none of them: 16 ms of replaces, 1.5 ms of tests).
        if ch in text:
            text = text.replace(ch, escaped)
    return text
