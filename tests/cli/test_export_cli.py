"""`onnx-studio export`: exit codes (0 verified, 1 a verification or target failed,
2 bad input), --json prints the same result objects, the printed report."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from studio.cli import main
from tests.conftest import ROOT, SAMPLES, assert_user_message


def test_export_all_json(capsys, tmp_path):
    rc = main(["export", str(SAMPLES / "mobilenet_like.onnx"), "--target", "all", "-o", str(tmp_path / "out"),
               "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert rc == 0 and printed["ok"] is True and printed["failures"] == []
    assert [t["target"] for t in printed["targets"]] == ["onnxruntime", "openvino", "tensorrt", "triton"]
    assert printed["manifest"]["source"]["name"] == "mobilenet_like.onnx"
    bundle = tmp_path / "out" / printed["manifest"]["bundle"]
    assert json.loads((bundle / "manifest.json").read_text())["files"] == printed["manifest"]["files"]


def test_text_report_and_failure_exit_code(capsys, tmp_path):
    rc = main(["export", str(SAMPLES / "gridsample_5d.onnx"), "--target", "ort,openvino", "-o", str(tmp_path)])
    out, err = capsys.readouterr()
    assert rc == 1
    assert out.startswith("FAILED   openvino:") and "GridSample" in out.splitlines()[0]
    assert "onnxruntime/model.onnx" in out and "bundle  " in out
    assert "error: openvino:" in err


def test_bad_input_exits_2(capsys, tmp_path):
    model = str(SAMPLES / "cnn_unfused.onnx")
    assert main(["export", model, "--target", "coreml", "-o", str(tmp_path)]) == 2
    assert "unknown export target" in capsys.readouterr().err
    assert main(["export", model, "-o", str(tmp_path), "--shapes", "input=1x3"]) == 2
    err = capsys.readouterr().err
    assert "rank" in err
    assert_user_message(err.strip().removeprefix("error: "))
    assert main(["export", model, "-o", str(tmp_path), "--shapes", "nope=1x3x32x32"]) == 2
    assert "unknown input" in capsys.readouterr().err
    from passes.registry import known_passes

    if "quantize-int8-static" not in known_passes():
        assert main(["export", model, "-o", str(tmp_path), "--precision", "int8"]) == 2
        assert "needs the quantize-int8-static pass" in capsys.readouterr().err


def test_cli_in_a_fresh_process(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "studio", "export", str(SAMPLES / "cnn_unfused.onnx"), "--target",
                           "ort", "-o", str(tmp_path / "out"), "--no-zip", "--name", "cnn"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert "session creation" in proc.stdout
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [next(iter((tmp_path / "out").iterdir())).name]
    assert next((tmp_path / "out").iterdir()).name.startswith("cnn-")
