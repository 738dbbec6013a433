"""The pipeline framework: verification after every modifying pass, stop vs
revert on failure, interface checks, pass errors, lineage records."""

from __future__ import annotations

import onnx
import onnx_ir as ir
import pytest

from passes.base import Change, StudioPass, result
from passes.pipeline import resolve_passes, run_passes
from passes.registry import make_pass
from studio.verification.verifier import interface_problems
from studio.core.errors import StudioError
from tests.conftest import parse_model, save, sha256_file

MODEL = """<ir_version: 8, opset_import: ["" : 17]>
g (float[N,4] x) => (float[N,4] y) { dead = Neg(x) r = Relu(x) y = Abs(r) }"""


class BreakSemantics(StudioPass):
    """Abs  ⇒  Neg (wrong on purpose: verification must catch it)."""

    name = "test-break-semantics"

    def call(self, model: ir.Model) -> object:
        changes = []
        for node in model.graph:
            if node.op_type == "Abs":
                node.op_type = "Neg"
                changes.append(Change("replaced", (node.name or "Abs",), "Abs -> Neg"))
        return result(model, changes)


class Explode(StudioPass):
    name = "test-explode"

    def call(self, model: ir.Model) -> object:
        raise RuntimeError("boom")


class RenameInput(StudioPass):
    name = "test-rename-input"

    def call(self, model: ir.Model) -> object:
        model.graph.inputs[0].name = "renamed"
        return result(model, [Change("changed", (), "renamed input")])


@pytest.fixture
def model_path(tmp_path):
    return save(parse_model(MODEL), tmp_path / "in" / "m.onnx")


def _ops(path) -> list[str]:
    return [n.op_type for n in onnx.load(str(path)).graph.node]


def test_stop_on_failure_keeps_last_verified_model(model_path, tmp_path):
    before = sha256_file(model_path)
    r = run_passes(model_path, [make_pass("eliminate-dead-code"), BreakSemantics(), make_pass("eliminate-dead-code")],
                     tmp_path / "out" / "m.onnx", on_failure="stop")
    assert not r.ok and r.stopped_at == "test-break-semantics"
    assert [x.status for x in r.records] == ["changed", "failed"]
    assert "test-break-semantics" in r.summary() and "'y'" in r.records[1].message
    assert _ops(r.output) == ["Relu", "Abs"]            # dead code gone, broken pass undone
    assert sha256_file(model_path) == before


def test_revert_on_failure_continues(model_path, tmp_path):
    r = run_passes(model_path, [BreakSemantics(), make_pass("eliminate-dead-code")], tmp_path / "o" / "m.onnx",
                     on_failure="revert")
    assert [x.status for x in r.records] == ["reverted", "changed"] and r.stopped_at is None
    assert _ops(r.output) == ["Relu", "Abs"]
    assert not r.ok                                      # a reverted pass is not a clean run


def test_pass_exception_is_a_record_not_a_crash(model_path, tmp_path):
    r = run_passes(model_path, [Explode(), make_pass("eliminate-dead-code")], tmp_path / "o" / "m.onnx",
                     on_failure="revert")
    assert r.records[0].status == "error" and "boom" in r.records[0].message
    assert r.records[1].status == "changed"


def test_interface_change_is_caught(model_path, tmp_path):
    r = run_passes(model_path, [RenameInput()], tmp_path / "o" / "m.onnx")
    assert r.records[0].status == "failed" and "names" in r.records[0].message


def test_interface_problems_symbolic_dims():
    a = parse_model(MODEL)
    b = parse_model(MODEL.replace("float[N,4] x", "float[1,4] x"))
    assert interface_problems(a, b) and not interface_problems(a, b, {"N": 1})
    c = parse_model(MODEL.replace("float[N,4] x", "float[M,4] x"))
    assert interface_problems(a, c)


def test_unverifiable_model_is_labelled(tmp_path):
    m = parse_model("""<ir_version: 8, opset_import: ["" : 17, "custom" : 1]>
    g (float[2] x) => (float[2] y) { dead = Neg(x) y = custom.Thing(x) }""")
    r = run_passes(save(m, tmp_path / "m.onnx"), [make_pass("eliminate-dead-code")], tmp_path / "o" / "m.onnx")
    assert r.records[0].verification.numeric_status.startswith("skipped")
    assert "structure only" in r.reference


def test_lineage_format(model_path, tmp_path):
    r = run_passes(model_path, [make_pass("eliminate-dead-code")], tmp_path / "o" / "m.onnx")
    rec = r.lineage()[0]
    assert rec["name"] == "eliminate-dead-code" and rec["modified"] is True
    assert rec["changes"][0]["kind"] == "removed" and rec["changes"][0]["nodes"]


def test_resolve_passes_errors():
    with pytest.raises(StudioError, match="unknown pass"):
        resolve_passes(names=["no-such-pass"])
    with pytest.raises(StudioError):
        resolve_passes()


def test_time_budget_skips_the_rest(model_path, tmp_path):
    r = run_passes(model_path, [make_pass("eliminate-dead-code"), make_pass("cse")], tmp_path / "o" / "m.onnx",
                     time_budget_s=1e-9)             # spent before the first pass starts (a budget of 0 is refused)
    assert [x.status for x in r.records] == ["skipped", "skipped"] and not r.ok
    assert "time budget" in r.records[0].message and r.output.exists()
