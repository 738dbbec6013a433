"""Peak activation memory from tensor lifetimes in topological order.

Each activation lives from the node that produces it to its last consumer
(graph outputs to the end); weights are not activations. This is the lower
bound a perfect allocator reaches with no in-place reuse, the figure engines'
arenas approach. While an If/Loop/Scan node runs, the peak of its largest body
(computed the same way, recursively; one iteration of a loop) is live on top
of the outer graph's tensors.
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
    unknown: list[int] = [0]
    peak, peak_node = _graph_peak(graph, resolved_shape, table, unknown, "", 0)
    return MemoryEstimate(weights_bytes, peak, peak_node, unknown[0])


def _outer_names(node, depth: int) -> list[str]:
    """Names a node's bodies read (at any depth): outer values stay live until the node has run."""
    from studio.core.protowalk import MAX_DEPTH, subgraphs_of

    out: list[str] = []
    if depth >= MAX_DEPTH:
        return out
    for _, body in subgraphs_of(node):
        for n in body.node:
            out.extend(n.input)
            out.extend(_outer_names(n, depth + 1))
    return out


def _graph_peak(graph: GraphProto, resolved_shape: Callable[[str], tuple[int, ...] | None],
                table: dict[str, TensorInfo], unknown: list[int], scope: str, depth: int) -> tuple[int, str | None]:
    from studio.core.protowalk import MAX_DEPTH, subgraphs_of
    from studio.core.tensor_safety import packed_nbytes

    # Weights, and anything computed from weights alone (ConstantOfShape on a
    # constant shape, Transpose of a weight...), are not activations.
    constants = {t.name for t in graph.initializer}
    graph_inputs = {vi.name for vi in graph.input} - constants
    for n in graph.node:
        if all(name in constants or not name for name in n.input) and not (
                set(n.input) & graph_inputs) and n.op_type not in ("RandomNormal", "RandomUniform") \
                and not any(True for _ in subgraphs_of(n)):
            constants.update(n.output)
    nodes = [(i, n) for i, n in enumerate(graph.node) if not set(n.output) <= constants]
    last_use: dict[str, int] = {}
    end = len(nodes)
    for k, (_, n) in enumerate(nodes):
        for name in list(n.input) + _outer_names(n, depth):
            if name and name not in constants:
                last_use[name] = k
    for o in graph.output:
        last_use[o.name] = end

    def size_of(name: str) -> int:
        info = table.get(name)
        shape = resolved_shape(name)
        if info is None or shape is None:
            unknown[0] += 1
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
    for k, (i, n) in enumerate(nodes):
        label = n.name or f"{n.op_type}_{i}"
        # A body runs while its node does: its own peak sits on top of what is live outside.
        body_peak, body_node = 0, None
        if depth < MAX_DEPTH:
            for attr, body in subgraphs_of(n):
                bp, bn = _graph_peak(body, resolved_shape, table, unknown, f"{scope}/{label}/{attr}", depth + 1)
                if bp > body_peak:
                    body_peak, body_node = bp, bn or f"{scope}/{label}/{attr}"
        if live + body_peak > peak:
            peak, peak_node = live + body_peak, body_node
        for o in n.output:
            if o and o not in sizes:
                sizes[o] = size_of(o)
                live += sizes[o]
                if o not in last_use:      # produced but never used: freed right away
                    frees.setdefault(k, []).append(o)
        if live > peak:
            peak, peak_node = live, (f"{scope}/{label}" if scope else label)
        for name in frees.get(k, ()):
            live -= sizes.pop(name, 0)
    return peak, peak_node
