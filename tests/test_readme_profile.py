"""The README's Profile section runs: every `onnx-studio profile` line and the Python block."""

from __future__ import annotations

import json
import re
import shlex

from studio.cli import main
from tests.conftest import ROOT, SAMPLES


def _section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Profile")
    end = text.index("\n## ", start + 5)
    return text[start:end]


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", _section(), flags=re.S)


def test_readme_profile_commands(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    lines = [ln for block in _blocks("bash") for ln in block.splitlines() if ln.startswith("onnx-studio profile")]
    assert len(lines) == 3
    for line in lines:
        argv = [a.replace("sample_models/", f"{SAMPLES}/") for a in shlex.split(line)[1:]]
        assert main(argv) == 0, line
        out = capsys.readouterr().out
        if "--json" in argv:
            assert json.loads(out)["ok"]
        else:
            assert "p50" in out
    # --trace trace.json with two variants: one file per variant, where asked.
    traces = sorted(p.name for p in tmp_path.iterdir())
    assert traces == ["trace-t0-ort.json", "trace-t0-ov_default.json"], traces


def test_readme_profile_python(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    (block,) = _blocks("python")
    exec(compile(block, "README.md", "exec"), {})  # noqa: S102 - the README's own example
    out = capsys.readouterr().out
    assert "than" in out or "no significant difference" in out
