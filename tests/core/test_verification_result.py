"""One verification result (issue 34 item 4): the optimizer's per-pass check, an edit and an exported
artifact all return ``studio.core.compare.Verification`` with the one ``VerifyStatus`` vocabulary (before:
``studio.verification.verifier.VerifyResult`` with ``numeric_status`` "passed"/"failed"/"skipped: <why>", the edit's
``Verification`` with status "skipped: <why>", export's with "not verified"/"error"). The mapping is in
docs/architecture.md section 4b; every producer's earlier ``--json`` keys are kept."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from studio.core.compare import Verification, VerifyStatus, compare_outputs
from tests.conftest import ROOT

# each producer's --json keys before the types were one (they must all still be there)
OPTIMIZER_KEYS = {"ok", "interface_ok", "checker_ok", "nondeterministic", "numeric_status", "message", "seconds",
                  "numeric"}
EDIT_KEYS = {"status", "method", "message"}
EXPORT_KEYS = {"status", "message", "engine", "criteria", "checker", "comparison"}


def _add_model(path: Path, c: float) -> Path:
    """y = x + c over float[2, 3] (written here: the oracle is the arithmetic)."""
    const = numpy_helper.from_array(np.full((2, 3), c, np.float32), "c")
    graph = helper.make_graph([helper.make_node("Add", ["x", "c"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [const])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_one_class_and_one_vocabulary_in_the_comparison_module():
    """No other module defines a verification result class (an AST scan of every class statement)."""
    found = []
    for d in ("studio", "passes", "profilers", "diagnostics"):
        for p in sorted((ROOT / d).rglob("*.py")):
            for n in ast.walk(ast.parse(p.read_text())):
                if (isinstance(n, ast.ClassDef) and ("Verification" in n.name or n.name.startswith("Verify"))
                        and not n.name.endswith("Error")):     # an exception is not a result
                    found.append(f"{p.relative_to(ROOT)}:{n.name}")
    assert found == ["studio/core/compare.py:VerifyStatus", "studio/core/compare.py:Verification"]
    assert [s.value for s in VerifyStatus] == ["passed", "failed", "skipped", "not verified", "error"]
    try:
        Verification("skipped: values change", "x")
    except ValueError:
        pass
    else:
        raise AssertionError("a status outside the vocabulary was accepted")


def test_the_optimizer_check_maps_onto_it(tmp_path):
    """studio.verification.verifier.Verifier on a model that keeps the numbers (PASSED) and one that changes them by 0.5
    (FAILED, the comparison's max abs diff 0.5 as the arithmetic says), and with numbers turned off (SKIPPED,
    the reason kept in the optimizer's numeric_status form)."""
    from studio.verification.verifier import Verifier

    original = _add_model(tmp_path / "a.onnx", 1.0)
    same = Verifier(original).verify(_add_model(tmp_path / "same.onnx", 1.0))
    assert type(same) is Verification and same.status is VerifyStatus.PASSED and same.ok
    assert same.numeric_status == "passed" and same.checker == "passed" and same.comparison
    other = Verifier(original).verify(_add_model(tmp_path / "other.onnx", 1.5))
    assert other.status is VerifyStatus.FAILED and other.failed and not other.ok
    assert other.numeric_status == "failed" and other.reason == ""
    assert np.isclose(other.comparison.outputs["y"].max_abs, 0.5)
    off = Verifier(original, numeric=False).verify(_add_model(tmp_path / "off.onnx", 1.5))
    assert off.status is VerifyStatus.SKIPPED and off.ok and off.comparison is None
    assert off.numeric_status == f"skipped: {off.reason}" and off.reason
    for v in (same, other, off):
        assert OPTIMIZER_KEYS | EDIT_KEYS | EXPORT_KEYS <= set(v.to_dict())
        assert v.to_dict()["status"] in {s.value for s in VerifyStatus}


def test_edit_and_export_produce_the_same_type():
    """An edit that changes values on purpose is SKIPPED with the why in ``reason`` (it was the status text);
    the CLI line and the page show ``verdict``, the old text. Export's statuses are the enum's members."""
    from studio.edit.state import VALUES
    from studio.edit.verify import verify
    from studio.export import results

    v = verify(Path("unused.onnx"), (), (VALUES,), ("attribute alpha set to 0.2",), {})
    assert type(v) is Verification and v.status is VerifyStatus.SKIPPED and v.method == "none"
    assert v.reason == "values change on purpose (attribute alpha set to 0.2)"
    assert v.verdict == "skipped: values change on purpose (attribute alpha set to 0.2)"
    assert v.to_dict()["status"] == "skipped" and EDIT_KEYS <= set(v.to_dict())
    assert results.Verification is Verification
    assert (results.PASSED, results.FAILED, results.NOT_VERIFIED, results.ERROR) == (
        VerifyStatus.PASSED, VerifyStatus.FAILED, VerifyStatus.NOT_VERIFIED, VerifyStatus.ERROR)
    art = Verification(results.NOT_VERIFIED, "engine not built: no GPU", "tensorrt")
    assert not art.ok and not art.failed and art.to_dict()["status"] == "not verified"


def test_numeric_status_is_derived_from_the_fields():
    """The optimizer's numeric_status, worked out by hand for each case."""
    equal = compare_outputs({"y": np.ones(3, np.float32)}, {"y": np.ones(3, np.float32)})
    differ = compare_outputs({"y": np.ones(3, np.float32)}, {"y": np.zeros(3, np.float32)})
    assert Verification(VerifyStatus.PASSED, "m", comparison=equal).numeric_status == "passed"
    # the interface failed but the numbers matched: the verdict fails, the numbers' part passed
    assert Verification(VerifyStatus.FAILED, "m", comparison=equal, interface_ok=False).numeric_status == "passed"
    assert Verification(VerifyStatus.FAILED, "m", comparison=differ).numeric_status == "failed"
    assert Verification(VerifyStatus.FAILED, "cannot run").numeric_status == "failed"
    # a refused candidate whose reference could not run: failed, its numbers skipped with the reason
    assert Verification(VerifyStatus.FAILED, "m", reason="ORT cannot run it").numeric_status == \
        "skipped: ORT cannot run it"
