"""onnx-studio check: exit codes (0 clean, 1 errors for a requested engine, 2 usage), JSON, --fix.
The command runs through the CLI's ``main()`` in this process (tests/clirun.py), its warm workers shared."""

from __future__ import annotations

import json

import pytest

from tests.clirun import run_cli
from tests.conftest import ROOT, SAMPLES, assert_user_message, sha256_file


@pytest.fixture
def _cli(capfd):
    """``onnx-studio check ARGS`` from the checkout: exit code, stdout and stderr."""
    return lambda *args: run_cli(capfd, ["check", *args], ROOT)


def test_json_and_exit_codes(_cli):
    ok = _cli(str(SAMPLES / "gridsample_4d.onnx"), "--engines", "ort,trt", "--json")
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    assert {v["engine"]: v["verdict"] for v in report["verdicts"]} == {"onnxruntime": "runs", "tensorrt": "runs"}
    bad = _cli(str(SAMPLES / "mmdeploy_grid_sampler.onnx"), "--engines", "ort", "--json")
    assert bad.returncode == 1
    data = json.loads(bad.stdout)
    assert data["fixes"] == ["legalize-grid-sampler"]
    assert any(f["code"] == "ORT-NO-KERNEL" and f["node"] == "/grid_sampler" for f in data["findings"])
    # Only TensorRT requested: the mmdeploy plugin makes it a warning, not an error.
    assert _cli(str(SAMPLES / "mmdeploy_grid_sampler.onnx"), "--engines", "trt").returncode == 0


def test_text_output_ep_and_trt_version(_cli):
    # The two engines whose options are under test: the default set would also convert to MNN and LiteRT
    # (TensorFlow's import, ~50 of the ~60 s in a fresh process); `check` with the default engines runs in test_readme.
    out = _cli(str(SAMPLES / "gridsample_5d.onnx"), "--ep", "cpu,cuda", "--trt-version", "11", "--engines", "ort,trt")
    assert out.returncode == 1
    assert "CUDAExecutionProvider" in out.stdout and "ORT-CPU-FALLBACK" in out.stdout
    assert "tensorrt (11.x)" in out.stdout and "TensorRT 11" in out.stdout


def test_usage_errors_exit_2(_cli):
    for args in (["missing.onnx"], [str(SAMPLES / "gridsample_4d.onnx"), "--engines", "tpu"],
                 [str(SAMPLES / "gridsample_4d.onnx"), "--ep", "npu"],
                 [str(SAMPLES / "gridsample_4d.onnx"), "--fix", "legalize-grid-sampler"]):
        res = _cli(*args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert_user_message(res.stderr.strip())


def test_fix_writes_output_and_leaves_the_original(_cli, tmp_path):
    source = SAMPLES / "mmdeploy_grid_sampler.onnx"
    before = sha256_file(source)
    out = tmp_path / "fixed.onnx"
    res = _cli(str(source), "--fix", "legalize-grid-sampler", "--output", str(out), "--engines", "ort,ov")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "reference evaluator" in res.stdout and out.is_file()
    assert sha256_file(source) == before
