"""Helpers shared by CLI commands: dims parsing and JSON printing."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from studio.core import jsonsafe
from studio.core.errors import StudioError


def positive_ints(text: str) -> list[int]:
    """An argparse type: comma-separated positive integers ("1,2,4"), or a usage error naming the text."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text[:40]!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("values must be positive integers")
    return values


def parse_dims(items: list[str] | None) -> dict[str, int]:
    """['batch=1', 'sequence=128'] -> {'batch': 1, 'sequence': 128}."""
    dims: dict[str, int] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise StudioError(f"--dim expects NAME=VALUE, got '{item[:60]}'")
        try:
            dims[name] = int(value)
        except ValueError:
            raise StudioError(f"--dim {name}: '{value[:30]}' is not an integer") from None
        if dims[name] <= 0:
            raise StudioError(f"--dim {name}: value must be positive")
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
