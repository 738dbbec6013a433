"""A third-party module patched in the studio's worker processes, for tests that need an oracle or a fault
inside an engine the studio runs in a child: a ``sitecustomize`` on the workers' PYTHONPATH installs an import
hook that, once ``module`` is imported, calls ``patch(module)`` (the test's own source text). The hook acts only
when the environment variable ``switch`` is set, so the same worker path serves nothing else by accident."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

_HOOK = '''
import importlib.abc, importlib.util, json, os, sys

{patch}


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != {module!r}:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            patch(module)
        spec.loader.exec_module = exec_module
        return spec


if os.environ.get({switch!r}):
    sys.meta_path.insert(0, _PatchOnImport())
'''


def patch_in_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, patch: str, switch: str) -> None:
    """Put a ``sitecustomize`` that runs ``patch`` (source defining ``def patch(module): ...``) on ``module`` once
    it is imported, on the PYTHONPATH of the processes started from now on (the studio's workers)."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(_HOOK.format(patch=textwrap.dedent(patch).strip(), module=module,
                                                        switch=switch))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p))
