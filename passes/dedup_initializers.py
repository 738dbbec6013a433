"""dedup-initializers: initializers with identical dtype, shape and bytes  ⇒  one shared initializer.

Hand-written on top of onnx-ir's idea (DeduplicateInitializersPass) to stay
cheap on multi-GB models: tensors are grouped by dtype and shape, compared by
a fingerprint of a few sampled bytes, and only fingerprint ties are compared
in full (exactly, byte for byte). Random weights never get read in full.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass, node_label, result
from passes.base import register

_SAMPLES = 64


def _bytes_view(tensor: ir.TensorProtocol) -> np.ndarray | None:
    try:
        if tensor.dtype == ir.DataType.STRING:
            return np.frombuffer(b"\0".join(tensor.string_data()), dtype=np.uint8)
        arr = tensor.numpy()
    except Exception:
        return None
    arr = np.ascontiguousarray(arr)
    return arr.reshape(-1).view(np.uint8) if arr.size else np.zeros(0, np.uint8)


def _fingerprint(data: np.ndarray) -> bytes:
    n = data.size
    if n <= 4 * _SAMPLES:
        return data.tobytes()
    idx = np.linspace(0, n - 1, _SAMPLES).astype(np.int64)
    return data[:_SAMPLES].tobytes() + data[idx].tobytes() + data[-_SAMPLES:].tobytes()


@register
class DedupInitializers(StudioPass):
    """Initializers with identical dtype, shape and content  ⇒  one initializer, shared."""

    name = "dedup-initializers"
    summary = "Share identical weight tensors (exact byte comparison); the file gets smaller."

    def call(self, model: ir.Model) -> PassResult:
        changes: list[Change] = []
        removed = saved = 0
        for graph in model.graphs():
            groups: dict[tuple, list[ir.Value]] = {}
            for value in graph.initializers.values():
                t = value.const_value
                if t is None or value.is_graph_input() or value.is_graph_output():
                    continue          # an overridable or exported initializer keeps its identity
                groups.setdefault((t.dtype, tuple(t.shape), t.nbytes), []).append(value)
            for values in groups.values():
                if len(values) < 2:
                    continue
                kept: list[tuple[bytes, np.ndarray, ir.Value]] = []
                for value in values:
                    data = _bytes_view(value.const_value)
                    if data is None:
                        continue
                    fp = _fingerprint(data)
                    twin = next((k for f, d, k in kept if f == fp and np.array_equal(d, data)), None)
                    if twin is None:
                        kept.append((fp, data, value))
                        continue
                    users = sorted({node_label(n) for n in value.consumers()})
                    changes.append(Change("changed", tuple(users),
                                          f"initializer '{value.name}' is identical to '{twin.name}': shared"))
                    value.replace_all_uses_with(twin)
                    graph.initializers.pop(value.name)
                    removed += 1
                    saved += value.const_value.nbytes
        return result(model, changes, initializers_removed=removed, bytes_saved=saved)
