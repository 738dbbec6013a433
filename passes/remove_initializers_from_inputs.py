"""remove-initializers-from-inputs: initializers listed as graph inputs (old IR)  ⇒  initializers only."""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes.common import RemoveInitializersFromInputsPass

from passes.base import Change, PassResult, StudioPass, result
from passes.base import register


@register
class RemoveInitializersFromInputs(StudioPass):
    """Graph inputs that are initializers  ⇒  removed from the inputs (the weights stay)."""

    name = "remove-initializers-from-inputs"
    summary = ("Stop listing initializers as graph inputs (IR < 4 style), so they are constants that folding, "
               "fusion and engines can rely on.")

    def call(self, model: ir.Model) -> PassResult:
        listed = [v.name for g in model.graphs() for v in g.inputs if v in set(g.initializers.values())]
        if not listed:
            return result(model, [])
        RemoveInitializersFromInputsPass()(model)
        changes = []
        if model.ir_version < 4:       # IR < 4 requires every initializer to be an input: move to IR 4
            changes.append(Change("changed", (), f"IR version {model.ir_version} -> 4"))
            model.ir_version = 4
        shown = ", ".join(repr(n) for n in listed[:5]) + (" ..." if len(listed) > 5 else "")
        changes.insert(0, Change("changed", (), f"{len(listed)} initializer(s) no longer graph inputs: {shown}"))
        return result(model, changes,
                      inputs_removed=len(listed))
