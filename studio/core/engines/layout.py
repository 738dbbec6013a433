"""Layout bookkeeping for engines that store tensors channels-last (LiteRT via onnx2tf).

onnx2tf turns 3-D/4-D/5-D NC... tensors into N...C. The adapter records, per input and
output, whether it transposed, and undoes it before anything is compared with ONNX; a
shape that reads the same both ways (``[1, 3, 3, 3]``) is ambiguous and said so.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

__all__ = ["channels_last", "match_names", "to_channels_first", "to_channels_last", "plain_name"]


def channels_last(shape: Sequence[int]) -> tuple[int, ...]:
    """(N, C, *spatial) -> (N, *spatial, C); other ranks unchanged."""
    s = tuple(int(d) for d in shape)
    return (s[0], *s[2:], s[1]) if 3 <= len(s) <= 5 else s


def to_channels_last(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(a, 1, -1)) if 3 <= a.ndim <= 5 else a


def to_channels_first(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(a, -1, 1)) if 3 <= a.ndim <= 5 else a


def plain_name(name: str) -> str:
    """What converters make of a tensor name (``input.1`` -> ``input_1``, ``serving_default_x:0`` -> ``x``)."""
    name = re.sub(r"^serving_default_", "", name)
    name = re.sub(r":\d+$", "", name)
    return re.sub(r"[^0-9A-Za-z]+", "_", name).strip("_").lower()


def match_names(onnx_names: Sequence[str], engine_names: Sequence[str]) -> tuple[dict[str, str], str]:
    """ONNX name -> engine name, and how they were matched ("by name", "by sanitized name",
    "by position"); an empty map when they cannot be matched one to one."""
    engine_names = list(engine_names)
    if set(onnx_names) <= set(engine_names):
        return {n: n for n in onnx_names}, "by name"
    plain = {plain_name(e): e for e in engine_names}
    if len(plain) == len(engine_names) and all(plain_name(n) in plain for n in onnx_names):
        return {n: plain[plain_name(n)] for n in onnx_names}, "by sanitized name"
    if len(onnx_names) == len(engine_names):
        return dict(zip(onnx_names, engine_names)), "by position"
    return {}, "unmatched"
