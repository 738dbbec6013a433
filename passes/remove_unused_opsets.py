"""remove-unused-opsets: an opset domain declared but used by no node  ⇒  removed from opset_import."""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedOpsetsPass

from passes.base import Change, PassResult, StudioPass, result
from passes.base import register


@register
class RemoveUnusedOpsets(StudioPass):
    """Declared opset domains no node (in any subgraph or function) uses  ⇒  dropped (ai.onnx stays)."""

    name = "remove-unused-opsets"
    summary = "Drop opset imports of domains no node uses (some converters refuse unknown domains)."

    def call(self, model: ir.Model) -> PassResult:
        before = dict(model.opset_imports)
        RemoveUnusedOpsetsPass()(model)
        gone = [f"{d!r} (version {v})" for d, v in before.items() if d not in model.opset_imports]
        changes = [Change("changed", (), f"opset domain {g} removed: no node uses it") for g in gone]
        return result(model, changes, opsets_removed=len(gone))
