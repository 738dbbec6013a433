"""Mutators for the studio's JSON-like inputs (edit scripts, decoder configs and KV budget options,
preprocessing recipes): value-level (extreme numbers, odd text, wrong types, deep nesting, dropped and
unknown keys) and text-level (truncation, byte flips, a stray escape). Deterministic per seed, like
``tests.fuzz.mutators`` for models, so a failing case can be replayed."""

from __future__ import annotations

import json
import random
from typing import Any

EXTREME_NUMBERS: list[Any] = [0, -1, 1, 2, 2**31 - 1, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 2**64, 10**400,
                              -(10**30), 0.0, -0.0, 1e-320, 1e308, 1e400, float("nan"), float("-inf"), 0.5, 3.7]
ODD_TEXT: list[str] = ["", " ", "\x00", "a\x00b", "\ud800", "x\udcff", "é" * 3, "../../etc/passwd", "/abs/path",
                       "C:\\win", "a" * 5000, "名前", "\u202e", "true", "null", "[]", "{}", "=cmd|' /C calc'!A0",
                       "\n", "0x10", "1e400", "-5", "16GiB", "NaN"]


def deep(depth: int, leaf: Any = 1) -> Any:
    """A value nested ``depth`` lists deep, built without recursion."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def odd_value(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.35:
        return rng.choice(EXTREME_NUMBERS)
    if roll < 0.65:
        return rng.choice(ODD_TEXT)
    if roll < 0.75:
        return rng.choice([None, True, False, [], {}, [1, 2, 3], {"k": "v"}])
    if roll < 0.8:
        return deep(rng.choice([40, 300, 3000]))
    if roll < 0.85:
        return [rng.choice(EXTREME_NUMBERS) for _ in range(rng.randint(1, 6))]
    if roll < 0.9:
        return {rng.choice(ODD_TEXT): rng.choice(EXTREME_NUMBERS)}
    return list(range(rng.choice([0, 1, 50_000])))


def _containers(data: Any) -> list[Any]:
    """Every list and dict in ``data`` (iteratively), the root first."""
    found, todo = [], [data]
    while todo:
        v = todo.pop()
        if isinstance(v, (list, dict)) and len(found) < 10_000:
            found.append(v)
            todo.extend(v.values() if isinstance(v, dict) else v)
    return found


def mutate_data(data: Any, rng: random.Random, rounds: int | None = None) -> tuple[Any, list[str]]:
    """``data`` (changed in place and returned) after 1-3 random value-level mutations, and what was done."""
    done = []
    for _ in range(rounds or rng.randint(1, 3)):
        places = _containers(data)
        if not places:
            return odd_value(rng), ["replaced the whole"]
        c = rng.choice(places)
        roll = rng.random()
        if isinstance(c, dict):
            keys = list(c)
            if keys and roll < 0.55:
                k = rng.choice(keys)
                c[k] = odd_value(rng)
                done.append(f"value of {str(k)[:20]!r}")
            elif keys and roll < 0.7:
                del c[rng.choice(keys)]
                done.append("dropped a key")
            elif keys and roll < 0.8:
                k = rng.choice(keys)
                c[rng.choice(ODD_TEXT)] = c.pop(k)
                done.append("renamed a key")
            else:
                c[rng.choice(["unknown", "op", "extra", "\ud800", ""])] = odd_value(rng)
                done.append("added a key")
        else:
            if c and roll < 0.5:
                c[rng.randrange(len(c))] = odd_value(rng)
                done.append("list item")
            elif c and roll < 0.65:
                del c[rng.randrange(len(c))]
                done.append("dropped an item")
            elif c and roll < 0.8:
                c.append(json.loads(json.dumps(rng.choice(c), allow_nan=True)) if _plain(rng.choice(c)) else c[0])
                done.append("duplicated an item")
            else:
                c.append(odd_value(rng))
                done.append("appended an item")
    return data, done


def _plain(v: Any) -> bool:
    try:
        json.dumps(v)
        return True
    except (ValueError, TypeError, RecursionError):
        return False


def to_text(data: Any, rng: random.Random) -> str:
    """JSON text of ``data`` (surrogates escaped, so the text itself is valid UTF-8); ``[`` x 5000 when
    the data is too deep for the encoder."""
    try:
        return json.dumps(data, allow_nan=True)
    except (RecursionError, ValueError):
        return "[" * 5000 + "]" * 5000


def mutate_text(text: str, rng: random.Random) -> tuple[str, str]:
    """Text-level damage: truncation, a byte flip, a stray escape or deep brackets in front."""
    roll = rng.random()
    if roll < 0.3 and text:
        return text[: rng.randrange(len(text))], "truncated"
    if roll < 0.55 and text:
        i = rng.randrange(len(text))
        return text[:i] + chr(rng.choice([0, 0x7F, 0xFFFD, ord("\\"), ord('"'), ord("{"), ord("]")])) + text[i + 1:], \
            "character flipped"
    if roll < 0.75:
        return text.replace('"', '"\\ud800', 1), "lone surrogate escape"
    if roll < 0.9:
        return "[" * 3000 + text + "]" * 3000, "deep brackets"
    return "\ufeff" + text, "byte order mark"
