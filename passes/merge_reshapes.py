"""merge-reshapes: Reshape(Reshape|Flatten|Squeeze|Unsqueeze(x), s)  ⇒  Reshape(x, s).

A Reshape to a constant shape ignores how its input was shaped, so any
shape-only op before it can go. Written as onnxscript rules (one per first op).
Unlike onnxscript's ``ReshapeReshape`` this never reads a *declared* output
shape (a wrong value_info would be baked in — the onnxslim failure mode): a 0
in ``s`` (copy a dim) is resolved only from the first Reshape's own constant
shape, otherwise the pair is left alone.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter._basics import MatchResult
from onnxscript.rewriter._rewrite_rule import RewriteRuleClassBase

from passes.base import PassResult, StudioPass, result
from passes.ir_helpers import const_array, free_initializer_name, int_attr
from passes.registry import register
from passes.rewriting import apply_rules, changes_for, refusal_notes

SHAPE_ONLY = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


class ReshapeAfterShapeOp(RewriteRuleClassBase):
    """Reshape(first(x, ...), s)  ⇒  Reshape(x, s')."""

    def __init__(self, first: str) -> None:
        super().__init__(f"{first}Reshape")
        self.first = first

    def pattern(self, op, x, s):
        inner = getattr(op, self.first)(x, _allow_other_inputs=True, _allow_other_attributes=True,
                                        _outputs=["inner"])
        return op.Reshape(inner, s, _allow_other_attributes=True, _outputs=["out"])

    def check(self, context, x, s, inner, out) -> MatchResult:
        res = MatchResult()
        shape = const_array(s, 64)
        if shape is None or shape.ndim != 1:
            return res.fail("the second Reshape's shape is not a constant vector")
        zeros = np.flatnonzero(shape == 0)
        if len(zeros) and int_attr(out.producer(), "allowzero", 0) == 0:
            first = inner.producer()
            if first.op_type != "Reshape":
                return res.fail("the shape copies a dim (0) of a tensor whose dims are not constant")
            s1 = const_array(first.inputs[1], 64)
            if s1 is None or int_attr(first, "allowzero", 0) or any(
                    i >= len(s1) or int(s1[i]) <= 0 for i in zeros):
                return res.fail("the shape copies a dim (0) that the first Reshape does not fix")
        return res

    def rewrite(self, op, x, s, inner, out):
        second = out.producer()
        shape = const_array(s, 64)
        allowzero = int_attr(second, "allowzero", 0)
        if (shape == 0).any() and not allowzero:
            s1 = const_array(inner.producer().inputs[1], 64)
            shape = shape.copy()
            for i in np.flatnonzero(shape == 0):
                shape[i] = s1[i]
            s = op.initializer(ir.tensor(shape.astype(np.int64)), name=free_initializer_name(out, f"{out.name}_shape"))
        attrs = {"allowzero": allowzero} if allowzero else {}
        return op.Reshape(x, s, **attrs)


def _rules() -> list:
    return [ReshapeAfterShapeOp.rule(first) for first in SHAPE_ONLY]


@register
class MergeReshapes(StudioPass):
    """Reshape after Reshape/Flatten/Squeeze/Unsqueeze  ⇒  one Reshape."""

    name = "merge-reshapes"
    summary = "Merge chains of shape-only ops ending in a Reshape to a constant shape into one Reshape."
    needs_weights = False

    def call(self, model: ir.Model) -> PassResult:
        outcome = apply_rules(model, _rules())
        return result(model, changes_for(outcome), notes=refusal_notes(outcome), reshapes_merged=outcome.count)
