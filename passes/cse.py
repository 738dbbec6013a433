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
from passes.ir_helpers import (can_replace, drop_orphaned_initializers, graphs_of, opset_version, replace_value,
                               rewire_inputs)
from passes.nondeterministic import is_pure
from passes.base import register

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


def _key(node: ir.Node, alias: dict[ir.Value, ir.Value]) -> tuple | None:
    attrs = []
    for name, attr in sorted(node.attributes.items()):
        k = _attr_key(attr)
        if k is None:
            return None
        attrs.append((name, k))
    return (node.domain or "", node.op_type, node.overload, len(node.outputs),
            tuple(id(alias.get(v, v)) if v is not None else None for v in node.inputs), tuple(attrs))


@register
class CommonSubexpressionElimination(StudioPass):
    """Two nodes with the same op, inputs and attributes  ⇒  one node feeding both users."""

    name = "cse"
    summary = "Merge duplicate computations (same op, same inputs, same attributes); random ops are never merged."

    def call(self, model: ir.Model) -> PassResult:
        merged: list[Change] = []
        notes: list[str] = []
        opset = opset_version(model) or None
        for graph in list(graphs_of(model)):
            merged.extend(_merge_graph(graph, opset, notes))
        return result(model, merged, notes=notes, nodes_removed=len(merged))


def _merge_graph(graph: ir.Graph | ir.Function, opset: int | None, notes: list[str]) -> list[Change]:
    """Merge duplicates of one graph. Uses are re-pointed once per consumer at the end, not
    once per duplicate: 50,000 duplicates feeding one Concat would otherwise rebuild that
    Concat's 50,000 inputs 50,000 times (onnx-ir rebuilds the tuple per replaced input)."""
    merged: list[Change] = []
    seen: dict[tuple, ir.Node] = {}
    alias: dict[ir.Value, ir.Value] = {}        # dropped value -> the value that replaces it
    dropped: list[ir.Node] = []
    for node in list(graph):
        if not _is_pure(node, opset):
            continue
        try:
            key = _key(node, alias)
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
        for keep, drop in pairs:
            if drop.is_graph_output():
                replace_value(keep, drop)          # takes over the output's name now (rare)
            else:
                if keep.shape is None and drop.shape is not None:
                    keep.shape = drop.shape
                alias[drop] = keep
        dropped.append(node)
        merged.append(Change("removed", (node_label(node),), f"same as '{node_label(first)}'"))
    if not dropped:
        return merged
    consumers: dict[ir.Node, None] = {}
    for drop in alias:
        for use in drop.uses():
            consumers[use.node] = None
    for consumer in consumers:
        rewire_inputs(consumer, [alias.get(v, v) if v is not None else None for v in consumer.inputs])
    inputs = [v for node in dropped for v in node.inputs if v is not None]
    graph.remove(dropped, safe=True)
    drop_orphaned_initializers(inputs)
    return merged
