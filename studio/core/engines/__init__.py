"""Engine adapters, one module each, one row each in :mod:`studio.core.engines.table`.

``get_engine("ort")`` returns the adapter; every adapter runs its engine in a
sandbox worker, never in the calling process. Availability is read from package
metadata (no engine import) and cached; ``available(refresh=True)`` re-reads it.
"""

from __future__ import annotations

import importlib

from studio.core.engines.base import Availability, EngineAdapter, RunOptions, RunOutput
from studio.core.engines.table import ENGINES, EngineRow, alias_map, engine_row, names
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.sandbox import Limits

__all__ = ["ENGINES", "ENGINE_NAMES", "Availability", "EngineAdapter", "EngineRow", "RunOptions", "RunOutput",
           "all_engines", "engine_limits", "engine_row", "get_engine", "resolve_engine_name"]

ENGINE_NAMES: tuple[str, ...] = names()
_ALIASES = alias_map()
_instances: dict[str, EngineAdapter] = {}


def resolve_engine_name(name: str) -> str:
    """Canonical engine name for a name or alias; StudioError naming the valid ones."""
    key = str(name).strip().lower()
    if key not in _ALIASES:
        shown = str(name)[:40]
        valid = ", ".join(f"{r.name} ({r.short})" if r.short != r.name else r.name for r in ENGINES)
        raise StudioError(f"unknown engine {shown!r}; valid engines: {valid}", code=ErrorCode.UNKNOWN_ENGINE)
    return _ALIASES[key]


def get_engine(name: str) -> EngineAdapter:
    """The adapter of an engine (name or alias), made once from its row's ``adapter`` ("module:Class")."""
    canonical = resolve_engine_name(name)
    adapter = _instances.get(canonical)
    if adapter is None:
        row = engine_row(canonical)
        module, _, cls = row.adapter.partition(":")
        adapter = getattr(importlib.import_module(module), cls)()
        _instances[canonical] = adapter
    return adapter


def engine_limits(name: str, limits: Limits | None) -> Limits | None:
    """The limits a job of this engine runs under: the row's ``limits`` function applied (LiteRT's
    converter needs room and time), else ``limits`` unchanged."""
    row = engine_row(name)
    if row is None or not row.limits:
        return limits
    module, _, fn = row.limits.partition(":")
    return getattr(importlib.import_module(module), fn)(limits)


def all_engines() -> list[EngineAdapter]:
    return [get_engine(name) for name in ENGINE_NAMES]
