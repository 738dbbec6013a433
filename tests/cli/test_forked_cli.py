"""tests/forked_cli.py (a CLI run forked from a preloaded server) gives what a cold ``python -m studio`` gives:
the oracle is a real subprocess with the same argv, folder and environment."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from tests.conftest import ROOT
from tests.forked_cli import file_size_limit, run_forked


def _cold(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "studio", *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def _model(path: Path) -> Path:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_forked_run_reads_and_prints_as_a_cold_one(tmp_path):
    _model(tmp_path / "m.onnx")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ONNX_STUDIO_PROJECTS_ROOT": str(tmp_path / "root")}
    cwd_before, env_before = os.getcwd(), dict(os.environ)
    assert run_forked(["projects", "create", "p"], cwd=tmp_path, env=env).returncode == 0
    for argv in (["inspect", "m.onnx", "--json"], ["inspect", "missing.onnx"], ["inspect"], ["projects", "list"]):
        forked, cold = run_forked(argv, cwd=tmp_path, env=env), _cold(argv, tmp_path, env)
        assert (forked.returncode, forked.stdout, forked.stderr) == (cold.returncode, cold.stdout, cold.stderr), argv
    assert (tmp_path / "root").is_dir()                       # the child's environment named the root
    assert (os.getcwd(), dict(os.environ)) == (cwd_before, env_before)   # and the test's were left alone


def test_a_limit_holds_in_the_child_only(tmp_path):
    _model(tmp_path / "m.onnx")
    before = resource.getrlimit(resource.RLIMIT_FSIZE)
    proc = run_forked(["optimize", "m.onnx", "-o", "o.onnx", "--no-verify"], cwd=tmp_path,
                      env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec=file_size_limit(50))
    assert proc.returncode == 2 and "file-size limit" in proc.stderr, proc.stderr[-800:]
    assert not (tmp_path / "o.onnx").exists()
    assert resource.getrlimit(resource.RLIMIT_FSIZE) == before
