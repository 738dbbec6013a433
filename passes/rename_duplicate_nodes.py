"""rename-duplicate-nodes: two nodes of one graph with the same name  ⇒  the later ones renamed ``name_1``, ``name_2``..."""

from __future__ import annotations

import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass, result
from passes.base import register


@register
class RenameDuplicateNodes(StudioPass):
    """Repeated node names within a graph  ⇒  the first keeps its name, the others get a unique suffix.

    ONNX Runtime refuses such a model ("two nodes with same node name"); only names change, so
    outputs are identical. Each graph (main graph, every If/Loop/Scan body, every function) is its
    own namespace, as it is for ONNX Runtime; unnamed nodes are left alone.
    """

    name = "rename-duplicate-nodes"
    summary = "Give repeated node names a unique suffix (ONNX Runtime refuses two nodes with the same name)."

    def call(self, model: ir.Model) -> PassResult:
        changes: list[Change] = []
        graphs: list[ir.Graph | ir.Function] = list(model.graphs())
        graphs += list(model.functions.values())
        for graph in graphs:
            taken = {n.name for n in graph if n.name}
            seen: set[str] = set()
            for node in graph:
                name = node.name
                if not name:
                    continue
                if name not in seen:
                    seen.add(name)
                    continue
                k = 1
                while f"{name}_{k}" in taken:
                    k += 1
                node.name = f"{name}_{k}"
                taken.add(node.name)
                seen.add(node.name)
                changes.append(Change("changed", (name,), f"{node.op_type} node renamed to {node.name!r}"))
        return result(model, changes, nodes_renamed=len(changes))
