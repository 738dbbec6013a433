"""Every `onnx-studio ...` example in the README runs (so the docs cannot rot).

Lines with placeholders (``[...]``, ``MODEL``) and `serve` are skipped; each
example runs as ``python -m studio ...`` in a temp folder where
``sample_models`` points at the repo's samples. A trailing comment
``# exit N: why`` documents a non-zero exit code the example must give.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from tests.conftest import ROOT

_BLOCK = re.compile(r"```bash\n(.*?)```", re.S)
_EXIT = re.compile(r"#\s*exit\s+(\d+)")


def readme_commands() -> list[tuple[str, int]]:
    text = (ROOT / "README.md").read_text()
    cmds = []
    for block in _BLOCK.findall(text):
        for raw in block.splitlines():
            line = raw.split("  #")[0].strip()
            if not line.startswith("onnx-studio "):
                continue
            if "[" in line or "MODEL" in line or line.split()[1] in ("serve",):
                continue
            rc = _EXIT.search(raw)
            cmds.append((line, int(rc.group(1)) if rc else 0))
    return cmds


@pytest.mark.parametrize("command,expected_rc", readme_commands(), ids=lambda x: str(x)[:80])
def test_readme_example_runs(command, expected_rc, tmp_path):
    (tmp_path / "sample_models").symlink_to(ROOT / "sample_models")
    argv = [sys.executable, "-m", "studio", *shlex.split(command)[1:]]
    env_python_path = {"PYTHONPATH": str(ROOT)}
    import os

    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **env_python_path})
    assert proc.returncode == expected_rc, f"{command}\n{proc.stderr[-2000:]}"


def test_readme_has_examples():
    assert len(readme_commands()) >= 3
