"""The engines the studio knows, as plain rows (studio/core/engines/table.py), for the CLI's choices and
the pages' labels.

A room of the facade (``studio.api`` names it; docs/architecture.md section 1)."""

from __future__ import annotations

from typing import Any

from studio.core.engines.table import ENGINES as _ENGINE_ROWS

__all__ = ["engines"]


def engines() -> list[dict[str, Any]]:
    """Every engine the studio knows, one plain row each (studio/core/engines/table.py): name, label,
    aliases, kind, precisions, suffix, install... The CLI's engine choices and the pages' labels read it."""
    return [row.to_dict() for row in _ENGINE_ROWS]
