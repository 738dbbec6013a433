"""The README's `onnx-studio check` examples run as written (from the repo root, in a copy
so `fixed.onnx` lands in a temp folder)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys

from tests.conftest import ROOT


def _examples() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Check compatibility", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.strip() for line in section.splitlines() if line.strip().startswith("onnx-studio check")]


def test_readme_check_examples_run(tmp_path):
    shutil.copytree(ROOT / "sample_models", tmp_path / "sample_models")
    examples = _examples()
    assert len(examples) == 3
    for line in examples:
        args = shlex.split(line)[1:]
        res = subprocess.run([sys.executable, "-m", "studio", *args], cwd=tmp_path, capture_output=True, text=True,
                             timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
        assert res.returncode in (0, 1), (line, res.stderr)
        assert re.search(r"onnxruntime|verdicts", res.stdout), line
    assert (tmp_path / "fixed.onnx").is_file()
