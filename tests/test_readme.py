"""Every `onnx-studio ...` example in the README runs (so the docs cannot rot).

Lines with placeholders (``[...]``, ``MODEL``) and `serve` are skipped; each
example runs as ``python -m studio ...`` in a temp folder where
``sample_models`` points at the repo's samples.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from tests.conftest import ROOT

_BLOCK = re.compile(r"```bash\n(.*?)```", re.S)
# Commands whose documented exit code is not 0 on the sample they use.
EXPECTED_RC: dict[str, int] = {}


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    cmds = []
    for block in _BLOCK.findall(text):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if not line.startswith("onnx-studio "):
                continue
            if "[" in line or "MODEL" in line or line.split()[1] in ("serve",):
                continue
            cmds.append(line)
    return cmds


@pytest.mark.parametrize("command", readme_commands())
def test_readme_example_runs(command, tmp_path):
    (tmp_path / "sample_models").symlink_to(ROOT / "sample_models")
    argv = [sys.executable, "-m", "studio", *shlex.split(command)[1:]]
    env_python_path = {"PYTHONPATH": str(ROOT)}
    import os

    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **env_python_path})
    assert proc.returncode == EXPECTED_RC.get(command, 0), f"{command}\n{proc.stderr[-2000:]}"


def test_readme_has_examples():
    assert len(readme_commands()) >= 3
