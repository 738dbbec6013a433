"""Calibration samples as they cross to MNN's quantization worker: the adapter
(:mod:`studio.core.engines.mnn`) packs them, the quantization job (:mod:`studio.core.engines.mnn_quant`)
unpacks them, in this one format."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

_KEY = re.compile(r"^s(?P<i>\d{1,6})/(?P<name>.*)$", re.S)


def pack_samples(samples: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Calibration samples as one flat array mapping (what crosses to the worker)."""
    return {f"s{i}/{name}": np.asarray(a) for i, s in enumerate(samples) for name, a in s.items()}


def unpack_samples(arrays: Mapping[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """The inverse of :func:`pack_samples`, in sample order."""
    out: dict[int, dict[str, np.ndarray]] = {}
    for key, a in arrays.items():
        m = _KEY.match(key)
        if m:
            out.setdefault(int(m.group("i")), {})[m.group("name")] = a
    return [out[i] for i in sorted(out)]
