"""Peak activation memory from tensor lifetimes in topological order.

Each activation lives from the node that produces it to its last consumer
(graph outputs to the end); weights are not activations. This is the lower
bound a perfect allocator reaches with no in-place reuse, the figure engines'
arenas approach; subgraph internals are not included.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from onnx import GraphProto

from studio.core.types import TensorInfo
from studio.inspect.flops import numel


@dataclass(frozen=True)
class MemoryEstimate:
    weights_bytes: int
    peak_activation_bytes: int
    peak_after_node: str | None
    unknown_tensors: int       # activations whose size is unknown (not counted)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def peak_activation(graph: GraphProto, resolved_shape: Callable[[str], tuple[int, ...] | None],
                    table: dict[str, TensorInfo], weights_bytes: int) -> MemoryEstimate:
    from studio.core.tensor_safety import packed_nbytes

    # Weights, and anything computed from weights alone (ConstantOfShape on a
    # constant shape, Transpose of a weight...), are not activations.
    constants = {t.name for t in graph.initializer}
    graph_inputs = {vi.name for vi in graph.input} - constants
    for n in graph.node:
        if all(name in constants or not name for name in n.input) and not (
                set(n.input) & graph_inputs) and n.op_type not in ("RandomNormal", "RandomUniform"):
            constants.update(n.output)
    nodes = [n for n in graph.node if not set(n.output) <= constants]
    last_use: dict[str, int] = {}
    end = len(nodes)
    for i, n in enumerate(nodes):
        for name in n.input:
            if name and name not in constants:
                last_use[name] = i
    for o in graph.output:
        last_use[o.name] = end

    unknown = 0

    def size_of(name: str) -> int:
        nonlocal unknown
        info = table.get(name)
        shape = resolved_shape(name)
        if info is None or shape is None:
            unknown += 1
            return 0
        return packed_nbytes(info.elem_type, numel(shape)) or 0

    live = 0
    sizes: dict[str, int] = {}
    for vi in graph.input:
        if vi.name not in constants:
            sizes[vi.name] = size_of(vi.name)
            live += sizes[vi.name]
    peak, peak_node = live, None
    frees: dict[int, list[str]] = {}
    for name, idx in last_use.items():
        frees.setdefault(idx, []).append(name)
    for i, n in enumerate(nodes):
        for o in n.output:
            if o and o not in sizes:
                sizes[o] = size_of(o)
                live += sizes[o]
                if o not in last_use:      # produced but never used: freed right away
                    frees.setdefault(i, []).append(o)
        if live > peak:
            peak, peak_node = live, n.name or f"{n.op_type}_{i}"
        for name in frees.get(i, ()):
            live -= sizes.pop(name, 0)
    return MemoryEstimate(weights_bytes, peak, peak_node, unknown)
