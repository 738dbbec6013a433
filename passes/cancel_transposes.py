"""cancel-transposes: Transpose(Transpose(x, p), q)  ⇒  one Transpose or nothing, also through
elementwise ops: Transpose(f(Transpose(x, p)), p⁻¹)  ⇒  f(x).

The pair rule is onnxscript's ``TransposeTranspose``; the elementwise rules are
one onnxscript rule per op, generated from a table (an op that maps each
element on its own commutes with any permutation). Scalar constants may be
the other operand of a binary op; anything that could broadcast is left alone.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter._basics import MatchResult
from onnxscript.rewriter._rewrite_rule import RewriteRuleClassBase
from onnxscript.rewriter.rules.common._basic_rules import TransposeTranspose

from passes.base import PassResult, StudioPass, result
from passes.ir_helpers import can_forward, has_ops, const_array, forward
from passes.base import register
from passes.rewriting import apply_rules, changes_for, refusal_notes

# Ops that apply a function to each element independently (attributes allowed).
UNARY_ELEMENTWISE = ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "Abs", "Neg", "Exp", "Log", "Sqrt", "Erf",
                     "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Elu", "Selu", "Softplus", "Softsign",
                     "HardSigmoid", "HardSwish", "Gelu", "Mish", "Cast", "Not", "IsNaN", "Sin", "Cos", "Identity")
# Binary ops whose other operand must then be a single-element constant (no broadcasting).
BINARY_ELEMENTWISE = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min")


def _perm(attr: ir.Attr | None) -> list[int] | None:
    if attr is None or attr.is_ref():
        return None
    return list(attr.as_ints())


def _inverse(p: list[int], q: list[int]) -> bool:
    return len(p) == len(q) and [p[i] for i in q] == list(range(len(p)))


class TransposeThroughUnary(RewriteRuleClassBase):
    """Transpose(f(Transpose(x, p)), q) with q∘p = identity  ⇒  f(x)."""

    def __init__(self, op_type: str) -> None:
        super().__init__(f"TransposeThrough{op_type}")
        self.op_type = op_type

    def pattern(self, op, x, p, q):
        inner = op.Transpose(x, perm=p)
        mid = getattr(op, self.op_type)(inner, _allow_other_attributes=True, _outputs=["mid"])
        return op.Transpose(mid, perm=q)

    def check(self, context, x, p, q, mid) -> MatchResult:
        pp, qq = _perm(p), _perm(q)
        if pp is None or qq is None or not _inverse(pp, qq):
            return MatchResult().fail("the two Transposes are not inverse permutations")
        return MatchResult()

    def rewrite(self, op, x, p, q, mid):
        node = mid.producer()
        return op.op(self.op_type, x, _domain=node.domain, **dict(node.attributes))


class TransposeThroughBinary(RewriteRuleClassBase):
    """Transpose(f(Transpose(x, p), c), q) with scalar constant c, q∘p = identity  ⇒  f(x, c)."""

    def __init__(self, op_type: str, const_first: bool) -> None:
        super().__init__(f"TransposeThrough{op_type}{'R' if const_first else ''}")
        self.op_type = op_type
        self.const_first = const_first

    def pattern(self, op, x, c, p, q):
        inner = op.Transpose(x, perm=p)
        args = (c, inner) if self.const_first else (inner, c)
        mid = getattr(op, self.op_type)(*args, _allow_other_attributes=True, _outputs=["mid"])
        return op.Transpose(mid, perm=q)

    def check(self, context, x, c, p, q, mid) -> MatchResult:
        pp, qq = _perm(p), _perm(q)
        if pp is None or qq is None or not _inverse(pp, qq):
            return MatchResult().fail("the two Transposes are not inverse permutations")
        arr = const_array(c, 1)
        if arr is None or arr.ndim > len(pp):
            return MatchResult().fail("the other operand is not a single-element constant")
        return MatchResult()

    def rewrite(self, op, x, c, p, q, mid):
        node = mid.producer()
        args = (c, x) if self.const_first else (x, c)
        return op.op(self.op_type, *args, _domain=node.domain, **dict(node.attributes))


def _rules() -> list:
    rules = [TransposeTranspose.rule()]
    rules += [TransposeThroughUnary.rule(op) for op in UNARY_ELEMENTWISE]
    rules += [TransposeThroughBinary.rule(op, first) for op in BINARY_ELEMENTWISE for first in (False, True)]
    return rules


@register
class CancelTransposes(StudioPass):
    """Transpose pairs that undo each other, directly or around elementwise ops  ⇒  removed (or one Transpose)."""

    name = "cancel-transposes"
    summary = "Remove Transpose pairs that cancel, also across elementwise ops; merge two Transposes into one."

    def call(self, model: ir.Model) -> PassResult:
        if not has_ops(model, "Transpose"):
            return result(model, [])
        outcome = apply_rules(model, _rules())
        # TransposeTranspose leaves Identity(x) for an identity composition: drop those
        # (only those), unless the interface needs them.
        for a in outcome.applied:
            for n in a.new_nodes:
                if n.op_type == "Identity" and n.graph is not None and not can_forward(n, n.inputs[0], n.outputs[0]):
                    forward(n, n.inputs[0], n.outputs[0])
        return result(model, changes_for(outcome), notes=refusal_notes(outcome), transposes_removed=sum(
            a.matched_ops.count("Transpose") - sum(n.op_type == "Transpose" for n in a.new_nodes)
            for a in outcome.applied))
