"""Run ``onnx-studio ARGV`` in a process of its own without paying a cold interpreter each time.

A fresh ``python -m studio`` spends ~0.5-1 s importing numpy, onnx and the CLI before the command starts;
tests that run dozens of commands only to read their exit code, message and files paid that each time
(tests/reliability/test_write_failures_every_command.py: 48 runs). :func:`run_forked` forks each run from a
``multiprocessing`` forkserver that has imported those once (:data:`PRELOAD`): the child is a new process
with its own argv, cwd, environment, limits (``preexec``), stdin from /dev/null, stdout and stderr on pipes,
atexit handlers run at its end, and an exit code as a process's (a signal reads as ``-N``). What the child
inherits from the server is the imported modules, imported once in a fresh ``python`` (not a fork of pytest:
no test's threads, fixtures or patches); no preloaded module reads the environment or the working folder at
import, so the first caller's environment, which the server started with, reaches no run.

Use it where a separate process is what is tested (resource limits, Landlock, a hang that must not block
pytest) but a cold interpreter is not; where no process of its own is needed, tests/clirun.py runs ``main()``
in the test's process (cheaper still). Keep a real subprocess (``sys.executable -m studio``) where the test is
about the installed entry point or start-up itself (tests/cli/test_inspect_cli.py's console entry,
tests/cli/test_cli_startup.py's ``sys.modules``), about another user (tests/projects/test_project_states.py
runs under setpriv), about environment read at import, or about concurrent processes racing from a cold start.
"""

from __future__ import annotations

import atexit
import functools
import multiprocessing
import os
import resource
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from studio import api, cli

# Imported once by the server, each paid by every cold start: numpy and onnx (~0.3 s), the CLI and its command
# modules (~0.3 s), the facade's rooms (~1.3 s: plotly, onnx_ir, onnxscript; the CLI imports only its room).
# None of them starts a thread, opens a file or reads the environment at import (the sandbox's pool notes its
# owner's pid and forgets it in a child). onnxruntime and openvino are left to the run (and its workers).
PRELOAD = ["numpy", "onnx", "studio.api", "studio.cli", *(f"studio.cli.{name}_cmd" for name in cli.COMMANDS),
           *(f"studio.facade.{room}" for room in api._ROOMS), "tests.forked_cli",
           "pytest"]      # a child re-imports the parent's __main__ (pytest's, under `python -m pytest`)

_context: multiprocessing.context.ForkServerContext | None = None


def _server() -> multiprocessing.context.ForkServerContext:
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def file_size_limit(limit: int) -> Callable[[], None]:
    """``ulimit -f``: RLIMIT_FSIZE, SIGXFSZ ignored (as a shell leaves it, and as Python's own start-up sets it:
    a write past the limit fails EFBIG)."""
    return functools.partial(_file_size_limit, limit)


def _file_size_limit(limit: int) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def writable_only(folders: Sequence[Path], refused_exit: int = 97) -> Callable[[], None]:
    """Permission denied for root too: a Landlock domain in which only ``folders`` (and /dev/null) can be
    written; exits ``refused_exit`` where Landlock cannot be applied."""
    return functools.partial(_writable_only, [Path(f) for f in folders], refused_exit)


def _writable_only(folders: list[Path], refused_exit: int) -> None:
    from studio.plugins.confine import _landlock

    if not _landlock(folders, [Path("/dev/null")]):
        os._exit(refused_exit)


def _child(argv: list[str], cwd: str, env: dict[str, str], preexec: Callable[[], None] | None,
           out_w, err_w) -> None:
    os.dup2(out_w.fileno(), 1)
    os.dup2(err_w.fileno(), 2)
    out_w.close()
    err_w.close()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = [sys.executable, "-m", "studio", *argv]
    code: object = 0
    try:
        if preexec is not None:
            preexec()
        from studio.cli import main

        code = main(argv)
    except SystemExit as e:                      # argparse, or a command's own sys.exit
        code = e.code
    except BaseException:                        # noqa: BLE001 - as the interpreter: the traceback, exit 1
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()                  # the sandbox pool's shutdown_all, as at a real exit
    finally:
        if code is None:
            rc = 0
        elif isinstance(code, int):
            rc = code
        else:
            print(code, file=sys.stderr)
            rc = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(rc & 0xFF)


def _drain(fd: int, into: list[bytes]) -> None:
    with os.fdopen(fd, "rb", closefd=True) as f:
        into.append(f.read())


def run_forked(argv: Sequence[str], *, cwd: Path | str, env: Mapping[str, str] | None = None,
            preexec: Callable[[], None] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``subprocess.run([sys.executable, "-m", "studio", *argv], cwd=, env=, capture_output=True, text=True,
    timeout=, preexec_fn=)`` in a forked child; ``preexec`` must pickle (a module-level function or partial)."""
    ctx = _server()
    out_r, out_w = ctx.Pipe(duplex=False)
    err_r, err_w = ctx.Pipe(duplex=False)
    child_env = dict(os.environ if env is None else env)
    proc = ctx.Process(target=_child, args=(list(argv), str(cwd), child_env, preexec, out_w, err_w), daemon=False)
    proc.start()
    out_w.close()
    err_w.close()
    out: list[bytes] = []
    err: list[bytes] = []
    readers = [threading.Thread(target=_drain, args=(os.dup(c.fileno()), into), daemon=True)
               for c, into in ((out_r, out), (err_r, err))]
    out_r.close()
    err_r.close()
    for t in readers:
        t.start()
    proc.join(timeout)
    if proc.exitcode is None:
        proc.kill()
        proc.join()
        raise subprocess.TimeoutExpired([sys.executable, "-m", "studio", *argv], timeout)
    for t in readers:
        t.join(timeout)
    code = proc.exitcode
    proc.close()
    text = [b"".join(chunks).decode("utf-8", errors="replace") for chunks in (out, err)]
    return subprocess.CompletedProcess([sys.executable, "-m", "studio", *argv], code, text[0], text[1])
