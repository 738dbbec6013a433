"""Human-readable numbers for the CLI, the UI and reports."""

from __future__ import annotations
from studio.core.bounds import number_text


def human_bytes(n: float | None) -> str:
    if n is None:
        return "?"
    if isinstance(n, int) and abs(n) >= 1 << 1000:        # beyond any float: shown by its digits, no OverflowError

        return f"{number_text(n)} B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def human_count(n: float | None) -> str:
    if n is None:
        return "?"
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return str(int(n))


def speedup_text(speedup: float) -> str:
    """A ratio old time / new time as words ("1.37x slower than" for 0.73): a ratio below 1 is never "faster"."""
    if round(speedup, 2) == 1.0:
        return "as fast as"
    if speedup > 1:
        return f"{speedup:.2f}x faster than"
    return f"{1 / speedup:.2f}x slower than"


def printable(text: str, max_len: int = 200) -> str:
    """Model-supplied text made safe for a terminal or a single table cell:
    control characters escaped, length capped."""
    out = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)
    return out if len(out) <= max_len else out[: max_len - 1] + "…"


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(cell: object) -> object:
    """A CSV cell a spreadsheet shows as text, never runs: a string that begins with ``= + - @``, a tab or a
    carriage return gets a leading single quote (OWASP's CSV-injection rule). A model named
    ``+cmd;calc.onnx`` or ``@SUM(1+1).onnx`` would otherwise be a formula. Numbers stay numbers."""
    if isinstance(cell, str) and cell.startswith(FORMULA_STARTS):
        return "'" + cell
    return cell
