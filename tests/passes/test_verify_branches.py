"""Verification covers both branches of an If whose condition is a model input:
a pass that breaks only the then-branch, or only the else-branch, is caught."""

from __future__ import annotations

import onnx_ir as ir
import pytest

from passes.base import Change, StudioPass, result
from passes.pipeline import run_passes
from tests.conftest import parse_model, save

MODEL = """<ir_version: 8, opset_import: ["" : 17]>
g (bool c, float[4] x) => (float[4] y) {
  y = If(c) <then_branch = t () => (float[4] a) { a = Relu(x) },
             else_branch = e () => (float[4] b) { b = Abs(x) }>
}"""


class BreakBranch(StudioPass):
    """Relu or Abs inside an If branch  ⇒  Neg (wrong on purpose)."""

    name = "test-break-branch"

    def call(self, model: ir.Model) -> object:
        target = self.options["op"]
        changes = []
        for node in ir.traversal.RecursiveGraphIterator(model.graph):
            if node.op_type == target:
                node.op_type = "Neg"
                changes.append(Change("replaced", (node.name or target,), f"{target} -> Neg"))
        return result(model, changes)


@pytest.mark.parametrize("op", ["Relu", "Abs"])
def test_a_broken_branch_is_caught_whichever_branch(tmp_path, op):
    src = save(parse_model(MODEL), tmp_path / "in" / "m.onnx")
    res = run_passes(src, [BreakBranch(op=op)], tmp_path / "out" / "m.onnx")
    assert not res.ok
    assert res.records[0].status == "failed"
