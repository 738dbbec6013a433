"""Helpers shared by CLI commands: dims parsing and JSON printing."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from studio.core import jsonsafe
from studio.core.bounds import MAX_DIM, OutOfRange, bounded_int
from studio.core.errors import StudioError


def positive_ints(text: str) -> list[int]:
    """An argparse type: comma-separated integers from 1 to 2^31 - 1 ("1,2,4"), or a usage error naming
    the text and the domain (before any work: 10^400 is not a size to try)."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text[:40]!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("values must be positive integers")
    for v in values:
        try:
            bounded_int(v, "each value", 1, MAX_DIM)
        except OutOfRange as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return values


def bounded(low: int = 1, high: int = MAX_DIM) -> Callable[[str], int]:
    """An argparse type: one integer in ``low..high``, else a usage error naming the domain."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text[:40]!r}") from None
        try:
            return bounded_int(value, "it", low, high)
        except OutOfRange as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parse.__name__ = "integer"      # argparse names the type in its own messages
    return parse


def parse_dims(items: list[str] | None) -> dict[str, int]:
    """['batch=1', 'sequence=128'] -> {'batch': 1, 'sequence': 128}."""
    dims: dict[str, int] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise StudioError(f"--dim expects NAME=VALUE, got '{item[:60]}'")
        try:
            parsed = int(value)
        except ValueError:
            raise StudioError(f"--dim {name[:60]}: '{value[:30]}' is not an integer") from None
        dims[name] = bounded_int(parsed, f"--dim {name[:60]}", 1, MAX_DIM)
    return dims


def print_json(obj: Any) -> None:
    """The document is encoded whole first (non-finite numbers as null), so it is never cut off."""
    sys.stdout.write(jsonsafe.dumps(obj, indent=2) + "\n")


def parse_options(items: list[str] | None) -> dict[str, dict]:
    """['convert-opset.target=17'] -> {'convert-opset': {'target': 17}} (values parsed as JSON when they can be)."""
    out: dict[str, dict] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        name, dot, opt = key.partition(".")
        if not sep or not dot or not name or not opt:
            raise StudioError(f"--set expects PASS.KEY=VALUE, got '{item[:60]}'")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        out.setdefault(name, {})[opt] = value
    return out
