"""`edit --project` when the project refuses the result (byte-identical to a version: "same as vN", R63):
nothing is written at -o (the writer rule: nothing written on a refusal). Before, -o was written first and
the refusal came after it. Oracle: the file system (does -o exist) and the sha256 of what was written."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import numpy_helper

from studio import api
from studio.cli import main
from tests.conftest import SAMPLES


def _same_weight_script(tmp_path):
    """Replace a weight with its own values: the edit changes no number."""
    w = next(t for t in onnx.load(SAMPLES / "cnn_unfused.onnx").graph.initializer if len(t.dims) == 4)
    np.save(tmp_path / "same.npy", numpy_helper.to_array(w))
    script = tmp_path / "edits.json"
    script.write_text(json.dumps([{"op": "replace_initializer", "name": w.name, "npy": str(tmp_path / "same.npy")}]))
    return script


def test_a_refused_edit_writes_nothing_at_o(tmp_path, capsys):
    p = api.create_project("edit refusal")
    script = _same_weight_script(tmp_path)
    first, second = tmp_path / "out" / "one.onnx", tmp_path / "new" / "two.onnx"
    args = ["edit", str(SAMPLES / "cnn_unfused.onnx"), "--script", str(script), "--project", p.id]
    assert main([*args, "-o", str(first)]) == 0
    (info,) = api.project_models(p.id)
    model = api.project_model(p.id, info.id)
    assert [v.id for v in model.versions] == ["v0", "v1"]
    assert api.load(first).sha256 == model.version("v1").sha256          # -o holds what was kept
    capsys.readouterr()
    assert main([*args, "-o", str(second)]) == 2                          # the same edit of v0 again
    assert "same as v1" in capsys.readouterr().err
    assert not second.exists() and not second.parent.exists()           # not even its folder
    assert sorted(p.name for p in first.parent.iterdir()) == ["one.onnx"]
    assert [v.id for v in model.versions] == ["v0", "v1"]


def test_without_a_project_the_edit_writes_o_as_before(tmp_path):
    script = _same_weight_script(tmp_path)
    out = tmp_path / "plain.onnx"
    assert main(["edit", str(SAMPLES / "cnn_unfused.onnx"), "--script", str(script), "-o", str(out)]) == 0
    assert out.exists() and api.load(out).sha256 != api.load(SAMPLES / "cnn_unfused.onnx").sha256


def test_check_fix_into_a_project_twice_is_same_as_v1_and_writes_nothing(tmp_path, capsys):
    """`check --fix --project` run again on the original: the fixed model is byte-identical to v1, so the
    project refuses it ("same as v1") and -o is not written; before, v2 was filed with v1's bytes."""
    p = api.create_project("fix refusal")
    args = ["check", str(SAMPLES / "transformer_block.onnx"), "--engines", "ort", "--fix", "fix-input-shapes",
            "--dim", "batch=2", "--dim", "sequence=7", "--project", p.id]
    first, second = tmp_path / "one.onnx", tmp_path / "new" / "two.onnx"
    assert main([*args, "--output", str(first)]) == 0
    (info,) = api.project_models(p.id)
    model = api.project_model(p.id, info.id)
    assert [v.id for v in model.versions] == ["v0", "v1"] and api.load(first).sha256 == model.version("v1").sha256
    capsys.readouterr()
    assert main([*args, "--output", str(second)]) == 2
    assert "same as v1" in capsys.readouterr().err
    assert not second.parent.exists() and [v.id for v in model.versions] == ["v0", "v1"]
