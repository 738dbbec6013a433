"""Reading the comma lists users type for repeatable options (``--target ort,openvino --target trt``).

One reading for every option that takes them (export targets, OpenVINO precisions, engines, plugin targets),
so that spaces, empty items and repeated flags mean the same everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["comma_items"]


def comma_items(value: str | Iterable[str]) -> list[str]:
    """Every non-empty item of ``value``'s comma lists, stripped, in order ('a, b' or ['a', 'b,c'])."""
    items = [value] if isinstance(value, str) else value
    return [part.strip() for item in items for part in str(item).split(",") if part.strip()]
