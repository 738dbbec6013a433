"""cse: nodes computing the same op on the same inputs with the same attributes  ⇒  one node.

Hand-written rather than onnx-ir's CommonSubexpressionEliminationPass because
that one covers only the main graph and treats every op as pure: here
subgraphs and functions are covered, and ops that are random or may keep
state (``passes.nondeterministic``: Random*, Bernoulli, Multinomial,
training-mode Dropout, any op outside the ONNX domains) are never merged:
two Bernoulli nodes on the same input are two independent draws.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass, node_label, result
from passes.ir_helpers import can_replace, drop_orphaned_initializers, graphs_of, opset_version, replace_value
from passes.nondeterministic import is_pure
from passes.registry import register

_TENSOR_ATTR_LIMIT = 4096     # elements; larger tensor attributes are not compared


def _attr_key(attr: ir.Attr) -> object | None:
    """A hashable form of an attribute, or None when it cannot be compared cheaply."""
    if attr.is_ref():
        return ("ref", attr.ref_attr_name)
    t = attr.type
    if t in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
        return None
    if t == ir.AttributeType.TENSOR:
        tensor = attr.value
        if tensor.size > _TENSOR_ATTR_LIMIT:
            return None
        arr = tensor.numpy()
        return ("tensor", str(arr.dtype), arr.shape, np.ascontiguousarray(arr).tobytes())
    if t in (ir.AttributeType.TENSORS, ir.AttributeType.SPARSE_TENSOR, ir.AttributeType.SPARSE_TENSORS,
             ir.AttributeType.TYPE_PROTO, ir.AttributeType.TYPE_PROTOS):
        return None
    value = attr.value
    if isinstance(value, (list, tuple)):
        value = tuple(value)
    return (t.value, value)


def _is_pure(node: ir.Node, opset: int | None) -> bool:
    return bool(node.outputs) and is_pure(node, opset)


def _key(node: ir.Node) -> tuple | None:
    attrs = []
    for name, attr in sorted(node.attributes.items()):
        k = _attr_key(attr)
        if k is None:
            return None
        attrs.append((name, k))
    return (node.domain or "", node.op_type, node.overload, len(node.outputs),
            tuple(id(v) if v is not None else None for v in node.inputs), tuple(attrs))


@register
class CommonSubexpressionElimination(StudioPass):
    """Two nodes with the same op, inputs and attributes  ⇒  one node feeding both users."""

    name = "cse"
    summary = "Merge duplicate computations (same op, same inputs, same attributes); random ops are never merged."
    needs_weights = False

    def call(self, model: ir.Model) -> PassResult:
        merged: list[Change] = []
        notes: list[str] = []
        opset = opset_version(model) or None
        for graph in list(graphs_of(model)):
            seen: dict[tuple, ir.Node] = {}
            for node in list(graph):
                if not _is_pure(node, opset):
                    continue
                try:
                    key = _key(node)
                except Exception:
                    key = None
                if key is None:
                    continue
                first = seen.get(key)
                if first is None:
                    seen[key] = node
                    continue
                pairs = [(a, b) for a, b in zip(first.outputs, node.outputs)]
                why = next((w for a, b in pairs if (w := can_replace(a, b, graph))), None)
                if why:
                    notes.append(f"{node.op_type} '{node_label(node)}' kept: {why}")
                    continue
                label = node_label(node)
                for keep, drop in pairs:
                    replace_value(keep, drop)
                inputs = [v for v in node.inputs if v is not None]
                graph.remove(node, safe=True)
                drop_orphaned_initializers(inputs)
                merged.append(Change("removed", (label,), f"same as '{node_label(first)}'"))
        return result(model, merged, notes=notes, nodes_removed=len(merged))
