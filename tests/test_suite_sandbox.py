"""The suite leaves nothing behind (tests/sandbox.py): a run that writes under the real home's
onnx-studio folders or leaves a model in the checkout fails, naming the path; a run that keeps to
its sandbox passes; every test server gets its own projects root and workspace."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

LEAK = '''
import os
from pathlib import Path

def test_a_server_that_ignored_the_environment():
    # What the browser tests' module-scoped servers did: the default projects root of the real home.
    leak = Path(os.environ["HOME"]) / ".local" / "share" / "onnx-studio" / "projects" / "hostile-name"
    leak.mkdir(parents=True)
    (leak / "catalog.sqlite").write_bytes(b"x")

def test_the_sandbox_is_in_place():
    for key in ("ONNX_STUDIO_PROJECTS_ROOT", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        assert not os.environ[key].startswith(os.environ["HOME"]), key
'''

CLEAN = '''
import os
from pathlib import Path

from studio import api

def test_projects_and_caches_land_in_the_sandbox():
    p = api.create_project("kept inside")
    assert not str(p.root).startswith(os.environ["HOME"])
    cache = Path(os.environ["XDG_CACHE_HOME"]) / "onnx-studio" / "facts.json"
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text("{}")
'''


def _inner_run(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    """A pytest run of ``source`` with the suite's hooks (tests/conftest.py as a plugin) and a fake home."""
    home = tmp_path / "home"
    home.mkdir()
    test = tmp_path / "inner" / "test_inner.py"
    test.parent.mkdir()
    test.write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "ONNX_STUDIO_"))}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT), ONNX_STUDIO_CI_PRECHECK="0")
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "-q", "--rootdir", str(tmp_path / "inner"), str(test)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_run_that_writes_in_the_real_home_fails(tmp_path):
    proc = _inner_run(tmp_path, LEAK)
    out = proc.stdout + proc.stderr
    assert "2 passed" in out, out[-2000:]                  # every test passed...
    assert proc.returncode == 1, out[-2000:]                # ...and the run fails all the same
    assert "wrote outside its sandbox" in out
    assert ".local/share/onnx-studio/projects/hostile-name" in out


@pytest.mark.slow
def test_a_run_that_keeps_to_its_sandbox_passes(tmp_path):
    proc = _inner_run(tmp_path, CLEAN)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-2000:]
    assert "wrote outside" not in out
    assert not (tmp_path / "home" / ".local").exists() and not (tmp_path / "home" / ".cache").exists()


def test_the_checkout_check_sees_outputs_not_sources(tmp_path):
    from tests import sandbox

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "kept.onnx").write_bytes(b"tracked")
    subprocess.run(["git", "-C", str(repo), "add", "kept.onnx"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"],
                   check=True)
    before = sandbox._checkout_outputs(repo)
    (repo / "new_module.py").write_text("x = 1\n")                  # an engineer's edit: not the suite's
    (repo / "notes.md").write_text("y")
    (repo / "sub").mkdir()
    (repo / "sub" / "out.onnx").write_bytes(b"m")                   # what a test writes
    (repo / "kept.onnx").write_bytes(b"changed")
    (repo / "workspace" / "session-1").mkdir(parents=True)          # gitignored in the real checkout
    after = sandbox._checkout_outputs(repo)
    changed = sorted(k for k in after if before.get(k) != after[k])
    assert changed == ["kept.onnx", "sub/out.onnx", "workspace/session-1/"]


def test_every_server_gets_its_own_projects_root(tmp_path, monkeypatch):
    """A server a module fixture starts sees no per-test environment: it is given its own folders."""
    from tests.servers import StudioServer

    monkeypatch.delenv("ONNX_STUDIO_PROJECTS_ROOT")
    server = StudioServer(tmp_path / "module" / "ws")
    try:
        assert server.env["ONNX_STUDIO_PROJECTS_ROOT"] == str(tmp_path / "module" / "projects")
        assert server.env["ONNX_STUDIO_WORKSPACE"] == str(tmp_path / "module" / "ws")
        child = server.descendants()[0]
        assert child.environ()["ONNX_STUDIO_PROJECTS_ROOT"] == str(tmp_path / "module" / "projects")
    finally:
        server.stop()
