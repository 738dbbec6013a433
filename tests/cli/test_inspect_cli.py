"""`onnx-studio inspect` on every sample model and the onnx wheel's light models."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sample_models.catalog import CATALOG
from studio.cli import main
from tests.conftest import ROOT, SAMPLES, light_models


def _inspect_json(capsys, path, *extra) -> dict:
    assert main(["inspect", str(path), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("sample", [m.filename for m in CATALOG])
def test_inspect_json_every_sample(capsys, sample):
    d = _inspect_json(capsys, SAMPLES / sample)
    assert d["node_counts"]["total"] >= 3 and d["inputs"] and d["outputs"]
    assert d["sha256"] and len(d["nodes"]) == d["node_counts"]["total"]


@pytest.mark.parametrize("path", light_models(), ids=lambda p: p.stem)
def test_inspect_json_light_models(capsys, path):
    d = _inspect_json(capsys, path)
    assert d["flops"]["macs"] > 0 and d["params"]["elements"] > 0
    assert d["shape_inference_error"] is None


def test_inspect_text_and_dims(capsys):
    assert main(["inspect", str(SAMPLES / "transformer_block.onnx"), "--dim", "batch=2", "--dim", "sequence=16"]) == 0
    out = capsys.readouterr().out
    assert "FLOPs" in out and "input_ids" in out and "assumed" not in out


def test_inspect_bad_dim_and_bad_file(capsys, tmp_path):
    assert main(["inspect", str(SAMPLES / "cnn_unfused.onnx"), "--dim", "batch"]) == 2
    assert "NAME=VALUE" in capsys.readouterr().err
    junk = tmp_path / "x.onnx"
    junk.write_bytes(b"<html></html>")
    assert main(["inspect", str(junk)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "HTML" in err and str(tmp_path) not in err


def test_console_entry_point_runs_as_module():
    out = subprocess.run([sys.executable, "-m", "studio", "inspect", str(SAMPLES / "if_loop.onnx"), "--json",
                          "--no-nodes"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["node_counts"]["subgraph_nodes"] == 17


def test_relative_model_path_gets_full_figures(capsys, monkeypatch):
    """Workers run in their own folder: a relative path must still reach them."""
    monkeypatch.chdir(SAMPLES.parent)
    d = _inspect_json(capsys, "sample_models/transformer_block.onnx")
    assert d["flops"]["macs"] > 0 and d["shape_inference_error"] is None


def test_long_dim_names_are_truncated_and_unknown_dims_warned(capsys, tmp_path):
    from onnx import TensorProto, helper

    from tests.conftest import save

    long = "d" * 500
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [long, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [long, 4])
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    path = save(m, tmp_path / "long.onnx")
    assert main(["inspect", str(path), "--dim", "foo=3"]) == 0
    captured = capsys.readouterr()
    line = next(ln for ln in captured.out.splitlines() if "counted as 1:" in ln)
    assert long not in line and "…" in line and len(line) < 300
    assert "warning: dim 'foo' is not a dim of this model; known: d" in captured.err
    assert main(["inspect", str(SAMPLES / "if_loop.onnx")]) == 0
    assert "per branch then" in capsys.readouterr().out
