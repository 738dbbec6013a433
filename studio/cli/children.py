"""A command that runs a child process stops it too (RELIABILITY R44, R54).

The child gets its own session (a Ctrl-C at the terminal reaches only the wrapper, which
decides) and ``PR_SET_PDEATHSIG`` (so even a SIGKILL of the wrapper ends it). While the
wrapper waits, SIGTERM/SIGINT/SIGHUP are forwarded to the child's process group as
SIGTERM; after ``grace_s`` the group gets SIGKILL. The wrapper then exits with the child's
status, so nothing keeps running or holding a port after the wrapper is gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def die_with_parent() -> None:
    """In the child, before exec: SIGTERM when this process dies, however it dies."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG


def signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def supervise(proc: subprocess.Popen, grace_s: float) -> tuple[int, bool]:
    """Wait for the child; on SIGTERM/SIGINT/SIGHUP stop it (SIGTERM, SIGKILL after ``grace_s``).
    Returns its exit code and whether a signal asked us to stop."""
    stop_at: list[float] = []

    def on_signal(signum, frame) -> None:
        if not stop_at:
            stop_at.append(time.monotonic() + grace_s)
        signal_group(proc, signal.SIGTERM)

    previous = {s: signal.signal(s, on_signal) for s in HANDLED}
    try:
        while True:
            try:
                return proc.wait(timeout=0.1), bool(stop_at)
            except subprocess.TimeoutExpired:
                if stop_at and time.monotonic() > stop_at[0]:
                    signal_group(proc, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            signal_group(proc, signal.SIGKILL)
            proc.wait()
        signal_group(proc, signal.SIGKILL)     # whatever the child left in its group
        for s, h in previous.items():
            signal.signal(s, h)


def run_child(cmd: Sequence[str], env: Mapping[str, str] | None = None, *, grace_s: float) -> tuple[int, bool]:
    """Start ``cmd`` as a supervised child (own session, dies with us) and wait for it."""
    proc = subprocess.Popen(list(cmd), env=dict(env) if env is not None else None, preexec_fn=die_with_parent,
                            start_new_session=True)
    return supervise(proc, grace_s)


def exit_status(code: int) -> int:
    """The shell's convention for a child that a signal ended: 128 + the signal's number."""
    return 128 - code if code < 0 else code
