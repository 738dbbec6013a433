"""fuse-matmul-add: Add(MatMul(A, B), C) with 2-D A and B  ⇒  Gemm(A, B, C).

The patterns are onnxscript's (``rules.common._matmul_add_to_gemm``, including
the Transpose-folding variants and both operand orders of the Add); this
module adds the legality checks Gemm needs that the rules leave out: C must
broadcast *unidirectionally* to (M, N) (rank <= 2, each dim 1 or equal), so
the Add cannot change the output's shape, and the dtype must be one Gemm has.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter._basics import MatchResult
from onnxscript.rewriter.rules.common._matmul_add_to_gemm import (
    MatMulAddToGemm,
    TransABMatMulAddToGemm,
    TransAMatMulAddToGemm,
    TransBMatMulAddToGemm,
)

from passes.base import PassResult, StudioPass, result
from passes.ir_helpers import dtype_of, opset_version
from passes.base import register
from passes.rewriting import changes_for, refusal_notes, rewrite_if_present

GEMM_TYPES = (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16)


def _dim(value: ir.Value, index: int) -> int | None:
    d = value.shape[index] if value.shape is not None and len(value.shape) > index else None
    return d if isinstance(d, int) else None


class _Legal:
    def check(self, context, input_a, input_b, input_c=None, **kwargs) -> MatchResult:
        res = super().check(context, input_a, input_b, **kwargs)
        if not res:
            return res
        fail = MatchResult().fail
        if dtype_of(input_a) not in GEMM_TYPES or dtype_of(input_b) != dtype_of(input_a):
            return fail("dtype is not float16/32/64 on both operands")
        if input_c is None or dtype_of(input_c) != dtype_of(input_a):
            return fail("the bias has another dtype (or an unknown one)")
        if input_c.shape is None or len(input_c.shape) > 2:
            return fail("the bias has an unknown rank or rank > 2 (Gemm's C broadcasts to 2-D only)")
        m = _dim(input_a, 1 if self.trans_a else 0)
        n = _dim(input_b, 0 if self.trans_b else 1)
        c_dims = list(input_c.shape)
        targets = [m, n][2 - len(c_dims):]
        for cd, target in zip(c_dims, targets):
            if cd == 1:
                continue
            if not (isinstance(cd, int) and target is not None and cd == target):
                return fail("the bias does not broadcast unidirectionally to the (M, N) output")
        return res


class MatMulAdd(_Legal, MatMulAddToGemm):
    pass


class TransAMatMulAdd(_Legal, TransAMatMulAddToGemm):
    pass


class TransBMatMulAdd(_Legal, TransBMatMulAddToGemm):
    pass


class TransABMatMulAdd(_Legal, TransABMatMulAddToGemm):
    pass


def _rules() -> list:
    rules = []
    for cls in (TransABMatMulAdd, TransAMatMulAdd, TransBMatMulAdd, MatMulAdd):
        rules.extend(cls.rule().commute())     # Add(MatMul, C) and Add(C, MatMul)
    return rules


@register
class FuseMatMulAdd(StudioPass):
    """Add(MatMul(A, B), C) with 2-D operands and a bias that broadcasts to (M, N)  ⇒  Gemm(A, B, C)."""

    name = "fuse-matmul-add"
    summary = "Turn 2-D MatMul + Add (bias) into one Gemm where Gemm's broadcasting rules allow it."

    def call(self, model: ir.Model) -> PassResult:
        if opset_version(model) < 11:
            return result(model, [], notes=[f"opset {opset_version(model)} < 11: Gemm's optional C differs"])
        outcome = rewrite_if_present(model, ("MatMul",), lambda: [_rules()])
        if outcome is None:
            return result(model, [])
        return result(model, changes_for(outcome), notes=refusal_notes(outcome), gemms_created=outcome.count)
