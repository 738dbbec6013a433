"""Every `onnx-studio ...` example in the README runs (so the docs cannot rot).

Each ```bash block runs top to bottom in one temp folder (where
``sample_models`` points at the repo's samples), as a user would paste it, so
a later line may use what an earlier one wrote. Lines with placeholders
(``[...]`` or an UPPERCASE word such as ``MODEL`` or ``BEFORE.onnx``) and
`serve` are skipped. A trailing comment ``# exit N: why`` documents a non-zero
exit code the example must give.
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


@pytest.mark.parametrize("block", readme_blocks(), ids=lambda b: b[0][0][:60])
def test_readme_block_runs(block, tmp_path):
    import os

    (tmp_path / "sample_models").symlink_to(ROOT / "sample_models")
    for command, expected_rc in block:
        argv = [sys.executable, "-m", "studio", *shlex.split(command)[1:]]
        proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.returncode == expected_rc, f"{command}\n{proc.stderr[-2000:]}"


def test_readme_has_examples():
    assert sum(len(b) for b in readme_blocks()) >= 6
