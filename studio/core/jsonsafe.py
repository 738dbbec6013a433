"""One JSON encoder for everything the studio writes as JSON (CLI ``--json``, reports,
manifests, indexes, traces): always a valid document.

JSON has no NaN or infinity, and Python's ``json`` writes the invalid tokens ``NaN`` and
``Infinity`` by default (or raises with ``allow_nan=False``, which used to give a traceback
and a cut-off document). Here every non-finite float -- Python or NumPy, at any depth -- is
written as ``null`` (docs/reliability.md, R48); NumPy scalars and arrays become plain
numbers and lists; other objects (paths, enums) their ``str``. The document is encoded
whole before anything is written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np


def finite(obj: Any) -> Any:
    """``obj`` with non-finite floats replaced by ``None`` and NumPy values made plain."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, (str, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, np.generic):
        return finite(obj.item())
    if isinstance(obj, np.ndarray):
        return finite(obj.tolist())
    if isinstance(obj, Mapping):
        return {_key(k): finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [finite(v) for v in obj]
    return obj


def _key(k: Any) -> Any:
    if isinstance(k, np.generic):
        k = k.item()
    if isinstance(k, float) and not math.isfinite(k):
        return str(k)
    return k if isinstance(k, (str, int, float, bool)) or k is None else str(k)


def _default(obj: Any) -> Any:
    return str(obj)


class _NotPlain(TypeError):
    """Raised by the fast path's ``default``: the object needs ``finite`` first."""


def _refuse(obj: Any) -> Any:
    raise _NotPlain(type(obj).__name__)


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` that always yields valid JSON (non-finite numbers as null).

    A document of plain values (dicts, lists, str, int, finite floats: the graph viewer's 4.6 MB scene
    of a 10k-node model) is encoded directly, in C; the first non-finite float, NumPy value, set or
    other object makes it start over through ``finite``, which gives the same text for the plain parts
    (the Python walk was 2/3 of encoding that scene)."""
    kwargs.pop("allow_nan", None)
    if "default" not in kwargs:
        try:
            return json.dumps(obj, allow_nan=False, default=_refuse, **kwargs)
        except (TypeError, ValueError):     # _NotPlain, a key json refuses, a non-finite float
            pass
    kwargs.setdefault("default", _default)
    return json.dumps(finite(obj), allow_nan=False, **kwargs)


