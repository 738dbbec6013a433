"""fuse-gelu: decomposed GELU  ⇒  opset-20 ``Gelu``.

    exact:  x * 0.5 * (1 + Erf(x / √2))            (or x * (1/√2) inside Erf)
    tanh:   x * 0.5 * (1 + Tanh(√(2/π) * (x + 0.044715 * x³)))   ⇒  Gelu(approximate="tanh")

Written as onnxscript rules over every grouping and operand order exporters
produce (the three Mul groupings; Mul/Add commuted). Constants are matched
with a relative tolerance of 1e-4. When the model's opset is below 20 the
pattern is left alone and the report says how many were found and why.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern
from onnxscript.rewriter._basics import MatchResult
from onnxscript.rewriter._rewrite_rule import RewriteRuleClassBase

from passes.base import PassResult, StudioPass, result
from passes.ir_helpers import const_array, dtype_of, opset_version
from passes.base import register
from passes.rewriting import changes_for, fusion_notes, rewrite_if_present

MIN_OPSET = 20
FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE)


def _is(value: ir.Value | None, expected: float) -> bool:
    arr = const_array(value, 1)
    return arr is not None and math.isclose(float(np.ravel(arr)[0]), expected, rel_tol=1e-4)


class GeluRule(RewriteRuleClassBase):
    """One grouping of x * half * inner."""

    def __init__(self, grouping: int, tanh: bool, opset: int, div: bool = True) -> None:
        super().__init__(f"Gelu{'Tanh' if tanh else ('ErfDiv' if div else 'ErfMul')}{grouping}")
        self.grouping, self.tanh, self.opset, self.div = grouping, tanh, opset, div

    def _inner(self, op, x, c, one, k, c3):
        if self.tanh:
            cube = pattern.OrValue([op.Pow(x, c3), op.Mul(op.Mul(x, x), x)])
            arg = op.Mul(op.Add(x, op.Mul(cube, k)), c)
            return op.Add(op.Tanh(arg), one)
        arg = op.Div(x, c) if self.div else op.Mul(x, c)
        return op.Add(op.Erf(arg), one)

    def pattern(self, op, x, c, one, half, k, c3):
        inner = self._inner(op, x, c, one, k, c3)
        if self.grouping == 0:
            return op.Mul(op.Mul(x, inner), half)
        if self.grouping == 1:
            return op.Mul(x, op.Mul(inner, half))
        return op.Mul(op.Mul(x, half), inner)

    def check(self, context, x, c, one, half, k=None, c3=None, **_) -> MatchResult:
        fail = MatchResult().fail
        if dtype_of(x) not in FLOATS:
            return fail("input is not a float tensor")
        if not (_is(one, 1.0) and _is(half, 0.5)):
            return fail("constants are not 1 and 0.5")
        if self.tanh:
            if not (_is(c, math.sqrt(2 / math.pi)) and _is(k, 0.044715)) or (c3 is not None and not _is(c3, 3.0)):
                return fail("constants are not those of the tanh approximation")
        elif not _is(c, math.sqrt(2) if self.div else 1 / math.sqrt(2)):
            return fail("the Erf argument is not x/√2")
        if self.opset < MIN_OPSET:
            return fail(f"model opset {self.opset} < {MIN_OPSET}: Gelu is not available "
                        f"(run convert-opset to {MIN_OPSET} first)")
        return MatchResult()

    def rewrite(self, op, x, **_):
        return op.Gelu(x, approximate="tanh") if self.tanh else op.Gelu(x)


def rules(opset: int) -> list:
    out = []
    for tanh, div in ((False, True), (False, False), (True, True)):
        for grouping in range(3):
            out.extend(GeluRule.rule(grouping, tanh, opset, div).commute())
    return out


# IEEE: Gelu gives the decomposed graph's values for NaN, +-Inf and -0.0 inputs; only where the
# decomposed x * (1 + erf) overflows (|x| > half the dtype's max) does Gelu give the finite x instead.
OVERFLOW_NOTE = ("IEEE: same values as the decomposed graph (NaN, +-Inf and -0.0 inputs included), except where "
                 "x * (1 + erf(...)) overflows before fusion (|x| > half the dtype's max: Inf before, x after)")


@register
class FuseGelu(StudioPass):
    """Decomposed GELU (Div/Erf/Add/Mul/Mul, or the tanh approximation)  ⇒  Gelu (opset ≥ 20)."""

    name = "fuse-gelu"
    summary = "Fuse decomposed GELU (erf or tanh form) into Gelu (needs opset 20; otherwise says why)."

    def call(self, model: ir.Model) -> PassResult:
        outcome = rewrite_if_present(model, ("Erf", "Tanh"), lambda: [rules(opset_version(model))])
        if outcome is None:
            return result(model, [])
        return result(model, changes_for(outcome), notes=fusion_notes(outcome, OVERFLOW_NOTE), gelus_fused=outcome.count)
