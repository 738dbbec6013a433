"""Shared helper of the GridSample passes: swap one node for an equivalent one.

Not a pass itself: ``legalize-grid-sampler``, ``gridsample-to-standard`` and
``gridsample-to-contrib`` each decide *which* nodes and attributes; this
module does the IR surgery (new node after the old one, uses and graph
outputs moved, names and types kept, old node removed).
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx_ir as ir

from passes.base import node_label
from passes.base import Change

__all__ = ["default_opset", "drop_unused_domains", "graphs_with_nodes", "mode_name", "raise_to_gridsample_opset",
           "swap_node"]

# The first ai.onnx opset with GridSample.
GRIDSAMPLE_OPSET = 16

# ai.onnx GridSample mode names changed in opset 20 (bilinear -> linear, bicubic -> cubic).
_TO_20 = {"bilinear": "linear", "bicubic": "cubic", "nearest": "nearest", "linear": "linear", "cubic": "cubic"}
_TO_16 = {"linear": "bilinear", "cubic": "bicubic", "nearest": "nearest", "bilinear": "bilinear", "bicubic": "bicubic"}


def mode_name(mode: str, opset: int) -> str:
    """The GridSample mode spelled for ``opset`` (ai.onnx 16-19 vs 20+, contrib uses the 16 names)."""
    table = _TO_20 if opset >= 20 else _TO_16
    if mode not in table:
        raise ValueError(f"unknown GridSample mode {mode!r}")
    return table[mode]


def default_opset(model: ir.Model) -> int:
    return int(model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0)) or 0)


def raise_to_gridsample_opset(model: ir.Model) -> tuple[int, list]:
    """Convert the model to ai.onnx 16 when it is older (onnxscript's converter, in place; custom-domain
    nodes pass through untouched). Returns the opset now in effect and the change made, if any."""
    opset = default_opset(model)
    if opset >= GRIDSAMPLE_OPSET:
        return opset, []
    from onnxscript.version_converter import convert_version

    convert_version(model, GRIDSAMPLE_OPSET, fallback=True)
    return GRIDSAMPLE_OPSET, [Change("changed", (), f"ai.onnx opset {opset} -> {GRIDSAMPLE_OPSET} "
                                                    "(GridSample needs 16)")]


def drop_unused_domains(model: ir.Model, domains) -> None:
    """Remove the opset imports of ``domains`` that no node uses any more."""
    still_used = {n.domain for _, n in graphs_with_nodes(model)}
    for dom in domains:
        if dom in model.opset_imports and dom not in still_used:
            del model.opset_imports[dom]


def graphs_with_nodes(model: ir.Model) -> Iterator[tuple[ir.Graph | ir.Function, ir.Node]]:
    """(owning graph/function, node) for every node, subgraphs and functions included."""
    for graph in model.graphs():
        for node in list(graph):
            yield graph, node
    for fn in model.functions.values():
        for node in list(fn):
            yield fn, node


def swap_node(owner: ir.Graph | ir.Function, old: ir.Node, op_type: str, domain: str,
              attributes: dict[str, object]) -> ir.Node:
    """Replace ``old`` by a node of ``domain::op_type`` with the same inputs, outputs and name."""
    attrs = [ir.Attr(k, ir.AttributeType.STRING, v) if isinstance(v, str) else
             ir.Attr(k, ir.AttributeType.INT, int(v)) for k, v in attributes.items()]
    new = ir.Node(domain, op_type, inputs=list(old.inputs), attributes=attrs, num_outputs=len(old.outputs),
                  name=old.name or node_label(old))
    ir.convenience.replace_nodes_and_values(owner, old, [old], [new], list(old.outputs), list(new.outputs))
    return new
