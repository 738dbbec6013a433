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

from passes.base import Change, PassResult, StudioPass, node_label, result
from passes.ir_helpers import (const_array, free_initializer_name, has_ops, int_attr, ints_attr, is_onnx_op,
                               opset_version)
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


def _slice_params(node: ir.Node, rank: int | None) -> tuple[list[int], ...] | None:
    """(starts, ends, axes, steps) of an opset >= 10 Slice with constant inputs, axes made non-negative."""
    ins = list(node.inputs) + [None] * (5 - len(node.inputs))
    if len(node.inputs) < 3 or node.attributes.get("starts") is not None:
        return None
    arrays = [const_array(v, 64) if v is not None else None for v in ins[1:5]]
    if arrays[0] is None or arrays[1] is None or any(v is not None and a is None for v, a in zip(ins[3:5], arrays[2:])):
        return None
    starts, ends = [int(v) for v in np.ravel(arrays[0])], [int(v) for v in np.ravel(arrays[1])]
    axes = [int(v) for v in np.ravel(arrays[2])] if arrays[2] is not None else list(range(len(starts)))
    steps = [int(v) for v in np.ravel(arrays[3])] if arrays[3] is not None else [1] * len(starts)
    if any(a < 0 for a in axes):
        if rank is None:
            return None
        axes = [a + rank if a < 0 else a for a in axes]
    if not len(starts) == len(ends) == len(axes) == len(steps) or len(set(axes)) != len(axes):
        return None
    return starts, ends, axes, steps


def merge_slices(model: ir.Model) -> list[str]:
    """Slice(Slice(x, axis a), axis b)  ⇒  one Slice of x on both axes (YOLOX's Focus slices x[..., ::2, ::2]
    as two). Slices along different axes commute and compose exactly; the inner Slice goes only when every
    consumer of it merges (it is then dead code), so nothing is computed twice. Main graph only."""
    graph, done = model.graph, []
    for outer in list(graph):
        if not is_onnx_op(outer, "Slice") or not outer.inputs or outer.inputs[0] is None:
            continue
        inner = outer.inputs[0].producer()
        if inner is None or not is_onnx_op(inner, "Slice") or inner.outputs[0].is_graph_output():
            continue
        x = inner.inputs[0]
        rank = len(x.shape) if x is not None and x.shape is not None else None
        first = _slice_params(inner, rank)
        users = [u for u, _ in inner.outputs[0].uses()]
        if first is None or any(not is_onnx_op(u, "Slice") or u.inputs[0] is not inner.outputs[0] for u in users):
            continue
        plans = [(u, _slice_params(u, rank)) for u in users]
        if any(p is None or set(p[2]) & set(first[2]) for _, p in plans):
            continue
        for u, p in plans:
            merged = [a + b for a, b in zip(first, p)]
            values = []
            for part, ints in zip(("starts", "ends", "axes", "steps"), merged):
                tensor = ir.tensor(np.asarray(ints, np.int64))
                v = ir.Value(name=free_initializer_name(x, f"{u.outputs[0].name}_{part}"), shape=ir.Shape(tensor.shape),
                             type=ir.TensorType(ir.DataType.INT64), const_value=tensor)
                graph.register_initializer(v)
                values.append(v)
            u.resize_inputs(5)
            for i, v in enumerate([x, *values]):
                u.replace_input_with(i, v)
            done.append(node_label(u))
    return done


def _rules() -> list:
    return [ReshapeAfterShapeOp.rule(first) for first in SHAPE_ONLY] + [UnsqueezeUnsqueeze.rule()]


@register
class MergeReshapes(StudioPass):
    """Reshape after Reshape/Flatten/Squeeze/Unsqueeze  ⇒  one Reshape; two Unsqueezes  ⇒  one."""

    name = "merge-reshapes"
    summary = ("Merge chains of shape-only ops ending in a Reshape to a constant shape, Unsqueeze pairs, and a Slice "
               "of a Slice on other axes.")

    def call(self, model: ir.Model) -> PassResult:
        sliced: list[str] = []
        if has_ops(model, "Slice") and opset_version(model) >= 10:
            with inferred_shapes(model):
                sliced = merge_slices(model)
        extra = [Change("changed", tuple(sliced), "Slice of a Slice on other axes: one Slice")] if sliced else []
        if not has_ops(model, "Reshape", "Unsqueeze"):
            return result(model, extra, slices_merged=len(sliced))
        with inferred_shapes(model):
            outcome = apply_rules(model, _rules())
        return result(model, changes_for(outcome) + extra, notes=refusal_notes(outcome),
                      reshapes_merged=outcome.count, slices_merged=len(sliced))
