"""Fixes that need options work from `check --fix` and from `api.apply_fix`:
convert-opset takes its target from the finding, fix-input-shapes the user's
dims; old-IR models come out valid; a failed or empty fix leaves no file."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from diagnostics.fixes import fix_to_file
from studio import api
from studio.core.errors import StudioError
from studio.core.workspace import Workspace
from tests.conftest import sha256_file


def _ir3_model(path):
    """IR 3 / opset 6: the weight is also a graph input (the old-IR rule), dynamic batch."""
    w = nh.from_array(np.arange(16, dtype=np.float32).reshape(4, 4) / 16, "W")
    g = h.make_graph([h.make_node("MatMul", ["x", "W"], ["y"], name="mm"), h.make_node("Relu", ["y"], ["z"], name="r")],
                     "g", [h.make_tensor_value_info("x", T.FLOAT, ["batch", 4]),
                           h.make_tensor_value_info("W", T.FLOAT, [4, 4])],
                     [h.make_tensor_value_info("z", T.FLOAT, ["batch", 4])], [w])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 6)])
    m.ir_version = 3
    onnx.save(m, path)
    return path


@pytest.fixture
def ir3(tmp_path):
    return _ir3_model(tmp_path / "ir3.onnx")


def test_findings_carry_the_opset_target(ir3):
    report = api.check(api.load(ir3), ["onnxruntime"], run=False)
    assert "convert-opset" in report.fixes()
    assert report.fix_options("convert-opset") == {"target": 17}


@pytest.mark.parametrize("names", [["convert-opset"], ["remove-initializers-from-inputs"],
                                   ["remove-initializers-from-inputs", "convert-opset"]])
def test_old_ir_fixes_give_valid_models(ir3, tmp_path, names):
    before = sha256_file(ir3)
    out = tmp_path / "out" / "fixed.onnx"
    fix_to_file(ir3, names, out)
    fixed = onnx.load(out)
    onnx.checker.check_model(fixed, full_check=True)
    assert fixed.ir_version >= 4
    if "convert-opset" in names:
        assert fixed.opset_import[0].version == 17 and fixed.ir_version >= 8
    if "remove-initializers-from-inputs" in names:
        assert [i.name for i in fixed.graph.input] == ["x"]
    assert sha256_file(ir3) == before


def test_fix_input_shapes_takes_the_user_dims(ir3, tmp_path):
    out = tmp_path / "fixed.onnx"
    with pytest.raises(StudioError, match="needs a value for each dynamic dim"):
        fix_to_file(ir3, ["fix-input-shapes"], out)
    assert not out.exists()
    fix_to_file(ir3, ["fix-input-shapes"], out, dims={"batch": 3})
    dims = [d.dim_value for d in onnx.load(out).graph.input[0].type.tensor_type.shape.dim]
    assert dims == [3, 4]


def test_a_fix_that_changes_nothing_writes_nothing(ir3, tmp_path):
    out = tmp_path / "fixed.onnx"
    with pytest.raises(StudioError, match="changed nothing"):
        fix_to_file(ir3, ["eliminate-identity"], out)
    assert not out.exists()


def test_apply_fix_in_a_workspace_uses_finding_options_and_dims(ir3, tmp_path):
    ws = Workspace.create(tmp_path)
    v0 = ws.add_file(ir3, label="original")
    report = api.check(ws.handle(v0.id), ["onnxruntime"], run=False)
    finding = next(f for f in report.findings if f.fix_pass == "convert-opset")
    v1 = api.apply_fix(ws, v0.id, finding)
    assert onnx.load(ws.handle(v1.id).path).opset_import[0].version == 17
    v2 = api.apply_fix(ws, v1.id, "fix-input-shapes", dims={"batch": 2})
    assert onnx.load(ws.handle(v2.id).path).graph.input[0].type.tensor_type.shape.dim[0].dim_value == 2


def test_check_cli_fix_with_dims_and_set(ir3, tmp_path, capsys):
    from studio.cli import main

    out = tmp_path / "c.onnx"
    rc = main(["check", str(ir3), "--engines", "ort", "--fix", "convert-opset", "--set", "convert-opset.target=13",
               "--fix", "fix-input-shapes", "--dim", "batch=1", "--output", str(out)])
    assert rc == 0, capsys.readouterr()
    fixed = onnx.load(out)
    assert fixed.opset_import[0].version == 13
    assert fixed.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 1


def test_check_and_fix_run_on_the_users_inputs(tmp_path):
    """`check --inputs X.npz`: the real runs use the user's values (a wrong file is refused up
    front); `--fix` verifies on them too."""
    from tests.conftest import SAMPLES

    good, bad = tmp_path / "good.npz", tmp_path / "bad.npz"
    np.savez(good, input_ids=np.ones((1, 16), np.int64), attention_mask=np.ones((1, 16), np.int64))
    np.savez(bad, foo=np.ones((1, 16), np.int64))
    handle = api.load(SAMPLES / "transformer_block.onnx")
    report = api.check(handle, ["onnxruntime"], inputs=good)
    assert report.verdicts[0].verdict == "runs"
    with pytest.raises(StudioError, match="'foo', which is not an input"):
        api.check(handle, ["onnxruntime"], inputs=bad)
    out = tmp_path / "static.onnx"
    result = fix_to_file(SAMPLES / "transformer_block.onnx", ["fix-input-shapes"], out,
                         dims={"batch": 1, "sequence": 16}, inputs=good)
    assert result.ok and result.reference.endswith("1 given feed set(s)"), result.reference   # the user's values
    assert "seeded" not in result.reference
    (record,) = result.records
    assert record.verification.numeric_status == "passed"
    dims = [[d.dim_value for d in i.type.tensor_type.shape.dim] for i in onnx.load(out).graph.input]
    assert dims == [[1, 16], [1, 16]]
