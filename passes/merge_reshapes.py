"""merge-reshapes: Reshape(Reshape|Flatten|Squeeze|Unsqueeze(x), s)  ⇒  Reshape(x, s);
Unsqueeze(Unsqueeze(x))  ⇒  one Unsqueeze.

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
from passes.ir_helpers import const_array, free_initializer_name, has_ops, int_attr, ints_attr
from passes.base import register
from passes.rewriting import apply_rules, changes_for, refusal_notes
from passes.ir_helpers import inferred_shapes

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


def _unsqueeze_axes(node: ir.Node) -> list[int] | None:
    axes = ints_attr(node, "axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1] is not None:
        arr = const_array(node.inputs[1], 64)
        axes = None if arr is None else [int(a) for a in np.ravel(arr)]
    return axes


def combined_unsqueeze_axes(rank: int, first: list[int], second: list[int]) -> list[int] | None:
    """Axes of one Unsqueeze doing ``first`` then ``second`` on a rank-``rank`` input."""
    dims: list[str] = ["x"] * rank
    for axes in (first, second):
        out_rank = len(dims) + len(axes)
        norm = sorted(a + out_rank if a < 0 else a for a in axes)
        if len(set(norm)) != len(norm) or any(not 0 <= a < out_rank for a in norm):
            return None
        for a in norm:
            dims.insert(a, "1")
    return [i for i, d in enumerate(dims) if d == "1"]


class UnsqueezeUnsqueeze(RewriteRuleClassBase):
    """Unsqueeze(Unsqueeze(x, a1), a2)  ⇒  Unsqueeze(x, a) with constant axes (an initializer, not a
    Constant node, so the node count really drops)."""

    def pattern(self, op, x):
        inner = op.Unsqueeze(x, _allow_other_inputs=True, _allow_other_attributes=True, _outputs=["inner"])
        return op.Unsqueeze(inner, _allow_other_inputs=True, _allow_other_attributes=True, _outputs=["out"])

    def check(self, context, x, inner, out) -> MatchResult:
        a1, a2 = _unsqueeze_axes(inner.producer()), _unsqueeze_axes(out.producer())
        rank = len(x.shape) if x.shape is not None else None
        if a1 is None or a2 is None or rank is None:
            return MatchResult().fail("axes are not constant or the input rank is unknown")
        self._axes = combined_unsqueeze_axes(rank, a1, a2)
        if self._axes is None:
            return MatchResult().fail("invalid axes")
        return MatchResult()

    def rewrite(self, op, x, inner, out):
        if len(out.producer().inputs) > 1:          # opset >= 13: axes is an input
            axes = op.initializer(ir.tensor(np.asarray(self._axes, np.int64)),
                                  name=free_initializer_name(out, f"{out.name}_axes"))
            return op.Unsqueeze(x, axes)
        return op.Unsqueeze(x, axes=self._axes)


def _rules() -> list:
    return [ReshapeAfterShapeOp.rule(first) for first in SHAPE_ONLY] + [UnsqueezeUnsqueeze.rule()]


@register
class MergeReshapes(StudioPass):
    """Reshape after Reshape/Flatten/Squeeze/Unsqueeze  ⇒  one Reshape; two Unsqueezes  ⇒  one."""

    name = "merge-reshapes"
    summary = "Merge chains of shape-only ops ending in a Reshape to a constant shape, and Unsqueeze pairs."

    def call(self, model: ir.Model) -> PassResult:
        if not has_ops(model, "Reshape", "Unsqueeze"):
            return result(model, [])
        with inferred_shapes(model):
            outcome = apply_rules(model, _rules())
        return result(model, changes_for(outcome), notes=refusal_notes(outcome), reshapes_merged=outcome.count)
