"""eliminate-dead-code: nodes and initializers nothing consumes  ⇒  removed."""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from passes.base import ChangeTracker, PassResult, StudioPass, result
from passes.base import register
from passes.base import Change


@register
class EliminateDeadCode(StudioPass):
    """Nodes whose outputs reach no graph output, and unused initializers  ⇒  removed."""

    name = "eliminate-dead-code"
    summary = "Remove nodes and initializers that no graph output depends on."

    def call(self, model: ir.Model) -> PassResult:
        tracker = ChangeTracker(model)
        inits_before = set(model.graph.initializers)
        RemoveUnusedNodesPass()(model)
        removed_inits = len(inits_before - set(model.graph.initializers))
        changes = list(tracker.changes(detail="no graph output depends on it"))
        if removed_inits and not changes:
            changes.append(Change("removed", (), f"{removed_inits} unused initializers"))
        return result(model, changes, nodes_removed=sum(len(c.nodes) for c in changes if c.kind == "removed"),
                      initializers_removed=removed_inits)
