"""fuse-layernorm: the decomposed LayerNorm exporters write  ⇒  opset-17 ``LayerNormalization``.

    mean = ReduceMean(x, axes=A);  d = x - mean
    var  = ReduceMean(d*d | Pow(d, 2), axes=A)
    y    = d / Sqrt(var + eps)  |  d * Reciprocal(Sqrt(var + eps))
    y    = y * scale + bias        (scale and bias optional)

Written as onnxscript rules (both operand orders of Mul/Add). Unlike
onnxscript's own LayerNormFusion this also matches the opset<18 form (axes as
an attribute), any trailing block of axes, float16 inputs, and checks what
the fused op needs: scale and bias exactly the normalized shape (otherwise the
Mul/Add broadcast and the fused op would not), keepdims=1, eps a scalar. When
the model's opset is below 17 the pattern is left alone and the report says
how many were found and why.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern
from onnxscript.rewriter._basics import MatchResult
from onnxscript.rewriter._rewrite_rule import RewriteRuleClassBase

from passes.base import PassResult, StudioPass, result
from passes.ir_helpers import const_array, dtype_of, free_initializer_name, int_attr, ints_attr, opset_version
from passes.base import register
from passes.rewriting import changes_for, fusion_notes, rewrite_if_present

MIN_OPSET = 17
FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE)


def _reduce_axes(node: ir.Node) -> list[int] | None:
    if int_attr(node, "keepdims", 1) != 1:
        return None
    axes = ints_attr(node, "axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1] is not None:
        arr = const_array(node.inputs[1], 16)
        axes = None if arr is None else [int(a) for a in np.ravel(arr)]
    return axes


def _trailing_axis(axes: list[int] | None, rank: int | None) -> int | None:
    """The first normalized axis (negative) when ``axes`` are the last k dims, else None."""
    if not axes:
        return None
    if rank is not None:
        axes = [a - rank if a >= 0 else a for a in axes]
    elif any(a >= 0 for a in axes):
        return None
    axes = sorted(axes)
    return axes[0] if axes == list(range(-len(axes), 0)) else None


class LayerNormRule(RewriteRuleClassBase):
    """One variant: with or without scale/bias."""

    def __init__(self, scale: bool, bias: bool, opset: int, recip: bool = False) -> None:
        super().__init__(f"LayerNorm{'Scale' if scale else ''}{'Bias' if bias else ''}{'Recip' if recip else ''}")
        self.has_scale, self.has_bias, self.opset, self.recip = scale, bias, opset, recip

    def pattern(self, op, x, eps, scale, bias, p):
        mean = op.ReduceMean(x, _allow_other_inputs=True, _allow_other_attributes=True, _outputs=["mean"])
        d = op.Sub(x, mean)
        sq = pattern.OrValue([op.Pow(d, p), op.Mul(d, d)])
        var = op.ReduceMean(sq, _allow_other_inputs=True, _allow_other_attributes=True, _outputs=["var"])
        std = op.Sqrt(op.Add(var, eps))
        y = op.Mul(d, op.Reciprocal(std)) if self.recip else op.Div(d, std)
        if self.has_scale:
            y = op.Mul(y, scale)
        if self.has_bias:
            y = op.Add(y, bias)
        return y

    def check(self, context, x, eps, mean, var, scale=None, bias=None, p=None, **_) -> MatchResult:
        fail = MatchResult().fail
        if p is not None:
            exponent = const_array(p, 1)
            if exponent is None or float(np.ravel(exponent)[0]) != 2.0:
                return fail("Pow exponent is not 2")
        dtype = dtype_of(x)
        if dtype not in FLOATS:
            return fail("input is not a float tensor")
        a1, a2 = _reduce_axes(mean.producer()), _reduce_axes(var.producer())
        if not a1 or a1 != a2:
            return fail("the two reductions are not over the same axes with keepdims=1")
        # The opset is said first: below 17 nothing fuses whatever the shapes, and the shape checks
        # below may fail only because inference did not reach the input (paddle2onnx's computed Reshapes).
        problem, axis, e = self._shape_problem(x, a1, eps, scale, bias, dtype)
        if self.opset < MIN_OPSET:
            return fail(f"opset {self.opset} < {MIN_OPSET}, LayerNormalization's first (--passes convert-opset,"
                        f"{FuseLayerNorm.name} --set convert-opset.target={MIN_OPSET})"
                        + (f"; at {MIN_OPSET} still: {problem}" if problem else ""))
        if problem:
            return fail(problem)
        self._axis, self._eps = axis, float(np.ravel(e)[0])
        self._stash = ir.DataType.DOUBLE if dtype == ir.DataType.DOUBLE else ir.DataType.FLOAT
        return MatchResult()

    @staticmethod
    def _shape_problem(x, axes: list[int], eps, scale, bias, dtype) -> tuple[str, int | None, np.ndarray | None]:
        """Why the fused op cannot take this match (empty when it can), the first normalized axis, epsilon."""
        rank = len(x.shape) if x.shape is not None else None
        axis = _trailing_axis(axes, rank)
        if axis is None:
            if rank is None and any(a >= 0 for a in axes):
                return f"input rank unknown to shape inference: axes {axes} not provably the last", None, None
            return f"the reductions (axes {axes}) are not over the trailing axes", None, None
        e = const_array(eps, 1)
        if e is None:
            return "epsilon is not a scalar constant", axis, None
        normalized = list(x.shape)[axis:] if x.shape is not None else None
        if normalized is None or not all(isinstance(d, int) for d in normalized):
            return "the normalized dims are not static", axis, e
        for name, v in (("scale", scale), ("bias", bias)):
            if v is not None and (dtype_of(v) != dtype or v.shape is None or list(v.shape) != normalized):
                return f"{name} is not exactly the normalized shape {normalized} of the input dtype", axis, e
        return "", axis, e

    def rewrite(self, op, x, eps, mean, var, scale=None, bias=None, **_):
        if scale is None:
            n = int(np.prod([d for d in x.shape][self._axis:]))
            scale = op.initializer(ir.tensor(np.ones(n, dtype=dtype_of(x).numpy()).reshape(
                [d for d in x.shape][self._axis:])), name=free_initializer_name(x, f"{mean.name}_ln_scale"))
        inputs = [x, scale] + ([bias] if bias is not None else [])
        return op.LayerNormalization(*inputs, axis=self._axis, epsilon=self._eps, stash_type=int(self._stash))


def rule_phases(opset: int) -> list[list]:
    """Longest pattern first, as separate phases: rules are tried node by node in
    graph order, so the bare pattern (rooted at the Div) would otherwise match
    before the one that takes the scale and bias along (rooted at the Add)."""
    phases = []
    for scale, bias in ((True, True), (True, False), (False, False)):
        phase = []
        for recip in (False, True):
            phase.extend(LayerNormRule.rule(scale, bias, opset, recip).commute())
        phases.append(phase)
    return phases


# IEEE: the fused kernel gives the same values, NaN for NaN/Inf inputs included, except where the
# decomposed graph overflows an intermediate (Pow(x - mean, 2) beyond ~1.8e19 in float32, a ReduceMean
# sum beyond the dtype's max): there the original gives NaN/Inf and LayerNormalization a finite value.
OVERFLOW_NOTE = ("IEEE: same values as the decomposed graph (NaN/Inf inputs give NaN alike), except rows whose "
                 "intermediates overflow before fusion (|x - mean| > ~1.8e19 in float32: NaN before, finite after)")


@register
class FuseLayerNorm(StudioPass):
    """Decomposed LayerNorm (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add)  ⇒  LayerNormalization (opset ≥ 17)."""

    name = "fuse-layernorm"
    summary = "Fuse decomposed layer normalization into LayerNormalization (needs opset 17; otherwise says why)."

    def call(self, model: ir.Model) -> PassResult:
        outcome = rewrite_if_present(model, ("ReduceMean",), lambda: rule_phases(opset_version(model)))
        if outcome is None:
            return result(model, [])
        return result(model, changes_for(outcome), notes=fusion_notes(outcome, OVERFLOW_NOTE),
                      layernorms_fused=outcome.count)
