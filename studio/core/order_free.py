"""Which outputs have no meaningful order: rows a TopK or NonMaxSuppression picked.

Two engines (or a model before and after a pass) that find the same detections
with near-tied scores may list them in another order; comparing such outputs
element by element reports a difference as large as the values themselves
("differs by 664"). An output reached from TopK/NMS through ops that only move,
select or scale values (Gather, Concat, Reshape, Cast, Mul...) is compared as a
set of rows instead (``studio.core.compare``).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

# Ops through which a TopK/NMS result keeps being "a set of picked rows".
_CARRIERS = frozenset({
    "Identity", "Cast", "CastLike", "Gather", "GatherElements", "GatherND", "Concat", "Reshape", "Squeeze",
    "Unsqueeze", "Flatten", "Slice", "Split", "Transpose", "Expand", "Tile", "Mul", "Add", "Sub", "Div", "Neg",
    "Abs", "Relu", "Sigmoid", "Exp", "Log", "Clip", "Round", "Floor", "Ceil", "Min", "Max", "Where", "Sqrt"})
# Elementwise ops: the picked axis of a TopK result stays where it was.
_ELEMENTWISE = frozenset({"Identity", "Cast", "CastLike", "Mul", "Add", "Sub", "Div", "Neg", "Abs", "Relu",
                          "Sigmoid", "Exp", "Log", "Clip", "Round", "Floor", "Ceil", "Min", "Max", "Sqrt"})
_SOURCES = frozenset({"TopK", "NonMaxSuppression"})
_MAX_DEPTH = 64


@dataclass(frozen=True)
class OrderFree:
    """An output whose rows come from ``source`` (node ``node``); ``axis``: the axis TopK
    sorted along when only elementwise ops lie between (None: rows of the output)."""

    source: str
    node: str
    axis: int | None = None

    def describe(self) -> str:
        return f"{self.source} '{self.node[:60]}'"


def _axis(node: onnx.NodeProto) -> int:
    for a in node.attribute:
        if a.name == "axis":
            return int(a.i)
    return -1


def order_free_outputs(model: onnx.ModelProto) -> dict[str, OrderFree]:
    """Graph outputs of the main graph produced, directly or through carrier ops, by TopK/NMS."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    found: dict[str, OrderFree] = {}
    for out in model.graph.output:
        seen: set[str] = set()
        stack: list[tuple[str, int, bool]] = [(out.name, 0, True)]
        while stack:
            name, depth, elementwise = stack.pop()
            node = producer.get(name)
            if node is None or name in seen or depth > _MAX_DEPTH or node.domain not in ("", "ai.onnx"):
                continue
            seen.add(name)
            if node.op_type in _SOURCES:
                label = node.name or node.op_type
                axis = _axis(node) if node.op_type == "TopK" and elementwise else None
                found[out.name] = OrderFree(node.op_type, label, axis)
                break
            if node.op_type in _CARRIERS:
                still = elementwise and node.op_type in _ELEMENTWISE
                stack.extend((i, depth + 1, still) for i in node.input if i)
    return found


__all__ = ["OrderFree", "order_free_outputs"]
