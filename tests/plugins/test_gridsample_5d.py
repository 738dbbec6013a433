"""5-D GridSample plugins (OpenVINO has no 5-D GridSample: exactly when a plugin is needed).

The generated ORT Python op runs the reference's own N-D NumPy code; the OpenVINO conversion extension keeps
OpenVINO's GridSample for 4-D and decomposes 5-D into opset-13 operations. Both match the reference in every
5-D mode x padding x align_corners, one-node and whole model, and their own harnesses pass."""

from __future__ import annotations

import subprocess
import sys

import pytest

from studio import api
from tests.conftest import SAMPLES
from tests.plugins.plugin_models import OP, scaffold_all_modes


@pytest.fixture(scope="module")
def modes5(tmp_path_factory):
    return scaffold_all_modes(tmp_path_factory.mktemp("modes5"), rank=5, samples=12,
                              targets="ort-python,openvino-python")


@pytest.mark.parametrize("target,body", [("ort-python", "grid_sampler_op.py"),
                                         ("openvino-python", "grid_sampler_extension.py")])
def test_python_bodies_match_every_5d_mode(modes5, target, body):
    handle, sig, scaffold = modes5
    code = (scaffold.root / target / body).read_text()
    result = api.run_python_op(handle, OP, code, target=target, signature=sig)
    assert result, result.message
    assert len(result.samples) == 12 and all(s.ok for s in result.samples)
    assert result.model["ok"]


def test_gridsample_5d_sample_model_all_targets(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "studio", "plugin", str(SAMPLES / "gridsample_5d.onnx"), "--op",
                           "::GridSample", "--target", "all", "-o", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK      ort-python" in proc.stdout and "OK      openvino-python" in proc.stdout
    root = tmp_path / "out" / "GridSample"
    for target, script in (("ort-python", "test_op.py"), ("openvino-python", "test_extension.py")):
        run = subprocess.run([sys.executable, script], cwd=root / target, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr[-2000:]
    assert "5-D" in (root / "openvino-python" / "GridSample_extension.py").read_text()
