"""Every `onnx-studio ...` example in the README runs (so the docs cannot rot).

Each ```bash block runs top to bottom in one temp folder (where
``sample_models`` points at the repo's samples), as a user would paste it, so
a later line may use what an earlier one wrote. Lines with placeholders
(``[...]`` or an UPPERCASE word such as ``MODEL`` or ``BEFORE.onnx``) and
`serve` are skipped. A trailing comment ``# exit N: why`` documents a non-zero
exit code the example must give.

The README's first command runs as a user runs it, in its own interpreter (``python -m studio``);
the rest call the CLI's ``main()`` in this process (tests/clirun.py: the same argv, working folder and
environment, output captured), which keeps the sandbox's warm workers between commands: a subprocess
per command re-imported the studio and started fresh workers 64 times (the exit codes are the same).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from tests.clirun import run_cli
from tests.conftest import ROOT

_BLOCK = re.compile(r"```bash\n(.*?)```", re.S)
_EXIT = re.compile(r"#\s*exit\s+(\d+)")
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]{2,}(\.\w+)?$")
_REAL_VALUES = {"RGB", "BGR", "GRAY", "NCHW", "NHWC"}      # option values written in capitals, not placeholders


def _runnable(line: str) -> bool:
    tokens = shlex.split(line)
    return (line.startswith("onnx-studio ") and "[" not in line and tokens[1] != "serve"
            and not any(_PLACEHOLDER.match(t) and t not in _REAL_VALUES for t in tokens[1:]))


def readme_blocks() -> list[list[tuple[str, int]]]:
    """Per bash block: (command, expected exit code) for each runnable line."""
    blocks = []
    for block in _BLOCK.findall((ROOT / "README.md").read_text()):
        cmds = []
        for raw in block.replace("\\\n", " ").splitlines():   # a shell line continuation joins two lines
            line = raw.split("  #")[0].strip()
            if _runnable(line):
                rc = _EXIT.search(raw)
                cmds.append((line, int(rc.group(1)) if rc else 0))
        if cmds:
            blocks.append(cmds)
    return blocks


def _in_subprocess(command: str, cwd) -> tuple[int, str]:
    argv = [sys.executable, "-m", "studio", *shlex.split(command)[1:]]
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    return proc.returncode, proc.stderr


def _in_process(command: str, cwd, capfd) -> tuple[int, str]:
    res = run_cli(capfd, shlex.split(command)[1:], cwd)
    return res.returncode, res.stderr


@pytest.mark.parametrize("block", readme_blocks(), ids=lambda b: b[0][0][:60])
def test_readme_block_runs(block, tmp_path, capfd):
    (tmp_path / "sample_models").symlink_to(ROOT / "sample_models")
    first = readme_blocks()[0][0]
    for command, expected_rc in block:
        rc, stderr = _in_subprocess(command, tmp_path) if (command, expected_rc) == first \
            else _in_process(command, tmp_path, capfd)
        assert rc == expected_rc, f"{command}\n{stderr[-2000:]}"


def test_readme_has_examples():
    assert sum(len(b) for b in readme_blocks()) >= 6
