"""`onnx-studio memory`: the plan as JSON (hand figures of the two-branch model), the text view,
--reorder keeping a verified model equal to plain ORT, and one-line errors for bad input."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from studio.cli import main
from tests.conftest import assert_user_message
from tests.memory_models import BIG, STEM, two_branch


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "branches.onnx"
    onnx.save(two_branch(), str(path))
    return path


def test_json_plan(capsys, model):
    assert main(["memory", str(model), "--json", "--no-measure"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["peak_bytes"] == 3 * BIG and d["peak_node"] == "q2"
    assert [t["name"] for t in d["peak_tensors"]] == ["p3", "q1", "q2"]
    assert d["order"][:2] == ["s", "p1"] and len(d["live_bytes"]) == 8 == len(d["node_live_bytes"])
    assert d["measured"] == [] and d["kv_cache"] is None and d["lower_bound"] is False


def test_text_view_with_the_measurement(capsys, model):
    assert main(["memory", str(model), "--top", "2", "--no-engine-graph"]) == 0
    out = capsys.readouterr().out
    assert "peak       384.0 KiB at step 6 of 8: q2" in out
    assert "measured   onnxruntime: 400.0 KiB (predicted 400.0 KiB, +0.0 %)" in out
    assert "measured   openvino: 400.0 KiB (predicted 400.0 KiB, +0.0 %)" in out     # its workspace, one line
    assert "... and 1 more" in out


@pytest.mark.slow
def test_reorder_keeps_a_verified_model(capsys, model, tmp_path):
    out_path = tmp_path / "out" / "reordered.onnx"
    assert main(["memory", str(model), "--reorder", "-o", str(out_path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["verified"] and d["modified"] and d["lowers_peak"] and d["output"] == str(out_path)
    assert d["before"]["peak_bytes"] == 3 * BIG and d["after"]["peak_bytes"] == 2 * BIG + 2 * STEM
    assert d["after"]["measured"][0]["measured_bytes"] < d["before"]["measured"][0]["measured_bytes"]
    x = np.random.RandomState(5).randn(1, 3, 32, 32).astype(np.float32)
    run = lambda p: ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]  # noqa: E731
    np.testing.assert_array_equal(run(model), run(out_path))


def test_reorder_without_output_keeps_nothing(capsys, model, tmp_path):
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["memory", str(model), "--reorder", "--no-measure"]) == 0
    out = capsys.readouterr().out
    assert "reorder    verified" in out and "predicted peak 384.0 KiB -> 288.0 KiB" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("argv, needle", [
    (["memory", "missing.onnx"], "does not exist"),
    (["memory", "{model}", "--dim", "N=abc"], "is not an integer"),
    (["memory", "{model}", "-o", "x.onnx"], "with --reorder"),
    (["memory", "{model}", "--top", "-1"], "--top"),
])
def test_bad_input_is_one_line(capsys, model, tmp_path, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)
    assert main([a.replace("{model}", str(model)) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ")
    assert_user_message(err, needle)


def test_memory_json_feeds_the_graph_overlay(capsys, model, tmp_path):
    mem = tmp_path / "memory.json"
    assert main(["memory", str(model), "--json", "--no-measure"]) == 0
    mem.write_text(capsys.readouterr().out)
    out = tmp_path / "g.html"
    assert main(["graph", str(model), "-o", str(out), "--overlay-data", str(mem), "--overlay", "live memory"]) == 0
    page = out.read_text(encoding="utf-8")
    assert "live memory" in page and "384.0 KiB" in page       # q2's step: p3 + q1 + q2
