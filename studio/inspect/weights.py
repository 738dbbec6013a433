"""Read one weight tensor on demand (inline, external or a Constant node's value)
and describe it: statistics and a histogram for the node-details view.

Only the requested tensor is read, at its validated offset, so a 1 GB model's
weights never come into memory all at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from onnx import AttributeProto, TensorProto, numpy_helper

from studio.core.errors import StudioError
from studio.core.model import ModelHandle
from studio.core.protowalk import iter_graphs
from studio.core.types import dtype_name, np_dtype

MAX_STATS_ELEMENTS = 64 * 2**20     # larger tensors are summarized from a strided sample


@dataclass(frozen=True)
class WeightStats:
    name: str
    dtype: str
    shape: tuple[int, ...]
    elements: int
    nbytes: int
    min: float | None
    max: float | None
    mean: float | None
    std: float | None
    zeros_fraction: float | None
    nan_count: int
    inf_count: int
    histogram_counts: tuple[int, ...]
    histogram_edges: tuple[float, ...]
    sampled: bool

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def find_tensor(handle: ModelHandle, name: str) -> TensorProto | None:
    """The TensorProto holding ``name``: an initializer (any graph) or a Constant's value."""
    for ref in iter_graphs(handle.proto):
        for t in ref.graph.initializer:
            if t.name == name:
                return t
        for n in ref.graph.node:
            if n.op_type == "Constant" and name in n.output:
                for a in n.attribute:
                    if a.name == "value" and a.type == AttributeProto.TENSOR:
                        return a.t
                    if a.name in ("value_float", "value_floats", "value_int", "value_ints"):
                        value = numpy_helper.from_array(np.asarray(
                            _scalar_attr(a), dtype=np.float32 if "float" in a.name else np.int64))
                        value.name = name
                        return value
    return None


def _scalar_attr(a: AttributeProto):
    return {"value_float": a.f, "value_floats": list(a.floats), "value_int": a.i,
            "value_ints": list(a.ints)}[a.name]


def read_tensor(handle: ModelHandle, t: TensorProto) -> np.ndarray:
    """The tensor's values; external data read from its validated location only."""
    if t.data_location != TensorProto.EXTERNAL:
        return numpy_helper.to_array(t)
    ref = next((r for r in handle.scan.external if r.tensor == t.name), None)
    if ref is None:
        raise StudioError(f"external data of '{t.name[:80]}' was not validated; reload the model")
    dtype = np_dtype(t.data_type)
    count = math.prod(t.dims)
    if dtype.itemsize * count > ref.length:
        raise StudioError(f"external data of '{t.name[:80]}' is shorter than its declared shape")
    arr = np.fromfile(ref.file, dtype=dtype, count=count, offset=ref.offset)
    return arr.reshape(tuple(t.dims))


def weight_stats(handle: ModelHandle, name: str, bins: int = 40) -> WeightStats:
    t = find_tensor(handle, name)
    if t is None:
        raise StudioError(f"no weight named '{name[:80]}' in the model")
    arr = read_tensor(handle, t)
    shape = tuple(int(d) for d in arr.shape)
    flat = arr.reshape(-1)
    sampled = flat.size > MAX_STATS_ELEMENTS
    if sampled:
        flat = flat[:: math.ceil(flat.size / MAX_STATS_ELEMENTS)]
    if flat.dtype.kind in "biuf" or flat.dtype.name in ("bfloat16",) or flat.dtype.name.startswith("float8"):
        vals = flat.astype(np.float64)
    else:
        vals = None
    if vals is None or vals.size == 0:
        return WeightStats(name, dtype_name(t.data_type), shape, int(arr.size), int(arr.nbytes),
                           None, None, None, None, None, 0, 0, (), (), sampled)
    finite = vals[np.isfinite(vals)]
    counts, edges = np.histogram(finite, bins=bins) if finite.size else (np.array([]), np.array([]))
    return WeightStats(
        name, dtype_name(t.data_type), shape, int(arr.size), int(arr.nbytes),
        float(finite.min()) if finite.size else None, float(finite.max()) if finite.size else None,
        float(finite.mean()) if finite.size else None, float(finite.std()) if finite.size else None,
        float(np.count_nonzero(vals == 0) / vals.size), int(np.isnan(vals).sum()), int(np.isinf(vals).sum()),
        tuple(int(c) for c in counts), tuple(float(e) for e in edges), sampled)
