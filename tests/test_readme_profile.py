"""The README's Profile section: its Python example runs (tests/test_readme.py runs the bash lines)."""

from __future__ import annotations

import re

from tests.conftest import ROOT


def _section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Profile")
    end = text.index("\n## ", start + 5)
    return text[start:end]


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", _section(), flags=re.S)


def test_readme_profile_python(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    (block,) = _blocks("python")
    exec(compile(block, "README.md", "exec"), {})  # noqa: S102 - the README's own example
    out = capsys.readouterr().out
    assert "than" in out or "no significant difference" in out
