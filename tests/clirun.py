"""``onnx-studio ARGS`` through the CLI's ``main()`` in the test's own process, for tests of what a command
does rather than of its process: the same argv, working folder and environment, stdout/stderr captured at the
file descriptors, the exit code ``main`` returns (or argparse's ``SystemExit``). The sandbox's warm workers
serve every call, where a ``python -m studio`` per call re-imported the studio and started fresh ONNX Runtime /
OpenVINO / TensorFlow workers each time. What ``main`` puts in the environment (``--timeout``,
``--projects-root``) and the working folder are restored after the call. The console script's own process
is still run by tests/test_readme.py (the README's first command) and the other CLI tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path


def run_cli(capfd, argv: Sequence[str | os.PathLike], cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """``main(argv)`` from ``cwd`` (default: the current folder); ``capfd`` is pytest's fixture (None: the
    output is left to pytest's own capture, and ``stdout``/``stderr`` are empty)."""
    from studio.cli import main

    args = [str(a) for a in argv]
    if capfd is not None:
        capfd.readouterr()                              # what the test printed before is not the command's
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        try:
            rc = main(args)
        except SystemExit as exc:                       # argparse's own usage errors, --help, --version
            rc = exc.code if isinstance(exc.code, int) else (1 if exc.code else 0)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    out = capfd.readouterr() if capfd is not None else None
    return subprocess.CompletedProcess(args, rc, out.out if out else "", out.err if out else "")
