"""One JSON codec for the typed requests (issue 34, item 2): a frozen dataclass to plain JSON values and back.

Why one: each request used to write its own ``to_dict``/``from_dict``, and each copy chose its own shapes
(pairs as objects here, as lists there). The shape now follows the field's type, the same for every request:

- a nested dataclass is an object of its fields (read back by its own class);
- ``tuple[tuple[str, X], ...]`` (sorted pairs, how a request keeps a mapping hashable) is an object;
- any other tuple is a list; an ``Enum`` its value; a path its string;
- a field with ``metadata={"json": "text"}`` holds JSON text and is written as the value that text says.

Reading back is strict: unknown keys and wrong shapes are one line (BAD-REQUEST), never dropped, so a
request from a newer client is refused rather than run with options missing. Each class's own
``__post_init__`` still checks and normalizes the values it is given.

A leaf module (stdlib and ``studio.core.errors`` only).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import types
import typing
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any, TypeVar

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError

__all__ = ["from_json", "to_json"]

T = TypeVar("T")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _optional(hint: Any) -> Any:
    """``X | None`` -> ``X`` (other hints as they are)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else Any
    return hint


def _pair_value(hint: Any) -> tuple[bool, Any]:
    """Whether ``hint`` is ``tuple[tuple[str, X], ...]`` (a mapping kept as sorted pairs), and its ``X``."""
    hint = _optional(hint)
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis and typing.get_origin(args[0]) is tuple:
            inner = typing.get_args(args[0])
            if len(inner) == 2 and inner[0] is str:
                return True, inner[1]
    return False, None


def _item(hint: Any) -> Any:
    """The item type of ``tuple[X, ...]`` (``Any`` otherwise)."""
    args = typing.get_args(_optional(hint))
    return args[0] if typing.get_origin(_optional(hint)) is tuple and len(args) == 2 and args[1] is Ellipsis else Any


def to_json(value: Any, hint: Any = Any) -> Any:
    """``value`` as plain JSON values, shaped by its type (see the module's docstring)."""
    if value is None:
        return None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        hints = _hints(type(value))
        return {f.name: ([json.loads(t) for t in getattr(value, f.name)] if f.metadata.get("json") == "text"
                         else to_json(getattr(value, f.name), hints.get(f.name, Any)))
                for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, tuple):
        pairs, item = _pair_value(hint)
        if pairs:
            return {str(k): to_json(v, item) for k, v in value}
        return [to_json(v, _item(hint)) for v in value]
    if isinstance(value, list):
        return [to_json(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    return value


def _decode(value: Any, hint: Any) -> Any:
    """One field's JSON value as the field's type takes it (the class's ``__post_init__`` does the rest)."""
    if value is None:
        return None
    hint = _optional(hint)
    if isinstance(hint, type):
        if dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
            return from_json(hint, value)
        if issubclass(hint, enum.Enum) and not isinstance(value, hint):
            return hint(value)
        if issubclass(hint, PurePath) and isinstance(value, str):
            return hint(value)
    pairs, item = _pair_value(hint)
    if pairs and isinstance(value, Mapping):
        return tuple((str(k), _decode(v, item)) for k, v in value.items())
    if typing.get_origin(hint) is tuple and isinstance(value, list):
        return tuple(_decode(v, _item(hint)) for v in value)
    return value


def from_json(cls: type[T], data: Mapping[str, Any]) -> T:
    """A ``cls`` from its :func:`to_json` form: unknown keys and wrong shapes are one line (BAD-REQUEST)."""
    if not isinstance(data, Mapping):
        raise StudioError(f"a {cls.__name__} must be a mapping, got {type(data).__name__}", code=ErrorCode.BAD_REQUEST)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise StudioError(f"{cls.__name__} has no option(s) {', '.join(map(str, unknown))[:80]}; known: "
                          f"{', '.join(sorted(fields))[:300]}", code=ErrorCode.BAD_REQUEST)
    hints = _hints(cls)
    try:
        return cls(**{name: value if fields[name].metadata.get("json") == "text" else _decode(value, hints.get(name, Any))
                      for name, value in data.items()})
    except (TypeError, ValueError) as exc:
        raise StudioError(f"{cls.__name__}: {str(exc).splitlines()[0][:200]}", code=ErrorCode.BAD_REQUEST) from None
