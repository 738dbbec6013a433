"""The suite leaves nothing behind: a session sandbox and the check that it held.

``configure`` (at pytest_configure, before any fixture or server starts) points every place the
studio writes by default at one temporary folder per run: the projects root, the workspace and the
XDG data/cache/config homes (the studio's per-user cache and ``config.toml`` live there), inherited by
xdist workers, test servers and every subprocess. Per-test fixtures narrow that further
(tests/conftest.py); module-scoped servers name their own folders (tests/servers.py).

``finish`` (at pytest_sessionfinish, once per run) fails the run when the suite nevertheless wrote
under the user's real onnx-studio folders (~/.local/share/onnx-studio, ~/.cache/onnx-studio,
~/.config/onnx-studio) or left files a test writes (models, arrays, archives, reports, a
``workspace/`` folder...) in the checkout. The checkout check looks only at files of the kinds
tests write, so engineers editing sources while a run is going never fail it.
``ONNX_STUDIO_SANDBOX_CHECK=warn`` reports without failing (for a run beside another process
that writes there legitimately), ``=0`` turns the check off.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

MARKER = "ONNX_STUDIO_TEST_SANDBOX"
# Files of the kinds the suite writes; a new or changed one in the checkout is the suite's.
WRITTEN_SUFFIXES = frozenset({".onnx", ".data", ".npz", ".npy", ".zip", ".sqlite", ".sqlite-wal", ".sqlite-shm",
                              ".xml", ".bin", ".mnn", ".tflite", ".png", ".jpg", ".log", ".pb", ".engine",
                              ".plan", ".csv", ".jsonl", ".tmp", ".partial"})
IGNORED_OUTPUT_DIRS = ("workspace", "artifacts")          # gitignored, so `git status` alone would not show them

_state: dict = {}


def _real_user_dirs() -> list[Path]:
    home = Path.home()
    return [Path(os.environ.get("XDG_DATA_HOME") or home / ".local" / "share") / "onnx-studio",
            Path(os.environ.get("XDG_CACHE_HOME") or home / ".cache") / "onnx-studio",
            Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "onnx-studio"]


def _tree(folder: Path) -> dict[str, tuple[int, int]]:
    """Every entry under ``folder``: relative path -> (size, mtime_ns); folders as (-1, 0)."""
    out: dict[str, tuple[int, int]] = {}
    if not folder.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames:
            out[os.path.relpath(os.path.join(dirpath, name), folder) + "/"] = (-1, 0)
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            out[os.path.relpath(path, folder)] = (st.st_size, st.st_mtime_ns)
    return out


def _checkout_outputs(root: Path) -> dict[str, tuple[int, int]]:
    """Files of the kinds tests write that git does not know or sees changed, and the ignored output folders."""
    try:
        res = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "-z"], cwd=root,
                             capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found: dict[str, tuple[int, int]] = {}
    for entry in res.stdout.split("\0"):
        if len(entry) < 4:
            continue
        rel = entry[3:]
        if Path(rel).suffix.lower() in WRITTEN_SUFFIXES:
            try:
                st = os.lstat(root / rel)
                found[rel] = (st.st_size, st.st_mtime_ns)
            except OSError:
                found[rel] = (-2, 0)                 # deleted
    for name in IGNORED_OUTPUT_DIRS:
        for rel, stat in _tree(root / name).items():
            found[f"{name}/{rel}"] = stat
    return found


def configure(config, root: Path) -> None:
    """Set up the run's sandbox (the controller; xdist workers inherit it) and take the 'before' picture."""
    mode = os.environ.get("ONNX_STUDIO_SANDBOX_CHECK", "1")
    if os.environ.get(MARKER):                      # an xdist worker, or a suite run inside a test
        return
    _state["before"] = {str(d): _tree(d) for d in _real_user_dirs()} if mode != "0" else None
    _state["checkout"] = _checkout_outputs(root) if mode != "0" else None
    _state["user_dirs"] = _real_user_dirs()
    sandbox = Path(tempfile.mkdtemp(prefix="onnx-studio-suite-"))
    _state["sandbox"] = sandbox
    headers = _real_user_dirs()[1] / "ort-headers"
    env = {MARKER: str(sandbox),
           "ONNX_STUDIO_PROJECTS_ROOT": str(sandbox / "projects"),
           "ONNX_STUDIO_WORKSPACE": str(sandbox / "workspace"),
           "XDG_DATA_HOME": str(sandbox / "data"),
           "XDG_CACHE_HOME": str(sandbox / "cache"),
           "XDG_CONFIG_HOME": str(sandbox / "config")}
    if not os.environ.get("ONNX_STUDIO_CORPUS"):
        # The real-model corpus `make corpus` fetched into the real cache (benchmarks/corpus): read there, never written.
        env["ONNX_STUDIO_CORPUS"] = str(_real_user_dirs()[1] / "corpus")
    if headers.is_dir() and not os.environ.get("ONNX_STUDIO_ORT_INCLUDE"):
        # The ONNX Runtime headers `make test-deps` fetched into the real cache: read there, never written.
        versions = sorted((p for p in headers.iterdir() if p.is_dir()), reverse=True)
        if versions:
            env["ONNX_STUDIO_ORT_INCLUDE"] = str(versions[0])
    os.environ.update(env)


def finish(session, root: Path) -> None:
    """Compare with the 'before' picture; fail the run (or warn) naming what the suite wrote outside."""
    sandbox = _state.pop("sandbox", None)
    if sandbox is None:
        return
    try:
        mode = os.environ.get("ONNX_STUDIO_SANDBOX_CHECK", "1")
        if mode == "0" or _state.get("before") is None:
            return
        problems: list[str] = []
        for folder in _state["user_dirs"]:
            before = _state["before"].get(str(folder), {})
            for rel, stat in sorted(_tree(folder).items()):
                if before.get(rel) != stat and not (rel.endswith("/") and rel in before):
                    problems.append(f"{folder}/{rel}")
        before = _state["checkout"]
        for rel, stat in sorted(_checkout_outputs(root).items()):
            if before.get(rel) != stat:
                problems.append(f"{root}/{rel}")
        if not problems:
            return
        shown = problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])
        lines = ["the suite wrote outside its sandbox (every test server and subprocess must get the test's own "
                 "projects root and workspace; see tests/sandbox.py):", *(f"  {p}" for p in shown)]
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        for line in lines:
            if reporter is not None:
                reporter.write_line(line, red=mode != "warn", yellow=mode == "warn")
            else:  # pragma: no cover - run without the terminal plugin
                print(line)
        if mode != "warn" and session.exitstatus == 0:
            session.exitstatus = 1
    finally:
        shutil.rmtree(sandbox, ignore_errors=True)
