"""The suite's one place for the processes it starts and the ports they hold: ``onnx-studio serve``
started as a user would (``StudioServer``: its own process group, ``python -m studio serve``, with the
test's own projects root and workspace in its environment -- named explicitly, so a server started by a
module- or session-scoped fixture, before any per-test environment exists, never lands in the user's
real ~/.local/share/onnx-studio), any other ``onnx-studio`` command as a user starts it
(``start_studio``), and the polls that check what they leave behind (children, process groups, ports).
Every wait polls a condition under a bound that only guards a hang."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import psutil

from tests.conftest import ROOT

START_TIMEOUT_S = 90         # a generous bound that only guards a hang at start-up
PORT_ATTEMPTS = 3            # fresh free ports tried when the one picked was taken before serve bound it

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def reserved_port() -> Iterator[int]:
    """A 127.0.0.1 port held for the block, for a command that only checks it can bind it (serve's check binds
    with SO_REUSEADDR, as this socket does, so it passes): bound and not listening, it is never handed to
    another process's bind(0) or outgoing connection in the meantime, as a port from :func:`free_port` can be."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def port_bindable(port: int) -> bool:
    """Nothing listens on 127.0.0.1:``port`` any more."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def wait_until(check: Callable[[], T], seconds: float) -> T:
    """Poll ``check`` for ``seconds`` (the spec's bound, not a performance budget); its first truthy
    value, or its last (falsy) one when the bound passes."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    return check()


def start_studio(args: list[str], log) -> subprocess.Popen:
    """``python -m studio ARGS`` as a user starts it: its own process group (a signal to it goes to it
    alone), output to ``log``."""
    return subprocess.Popen([sys.executable, "-m", "studio", *args], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=_default_sigint)


def _default_sigint() -> None:
    """In the child: SIGINT at its default, as a user's terminal gives it. pytest-xdist's workers ignore SIGINT,
    and an ignored SIGINT is inherited through exec (Python then keeps ignoring it): R54's Ctrl-C test ran on a
    batch that could not see it, in full runs only."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def descendants(proc: subprocess.Popen) -> list[psutil.Process]:
    try:
        return psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def all_gone(procs: list[psutil.Process]) -> bool:
    """Every one of ``procs`` has ended (a zombie counts as ended: its parent has not reaped it yet)."""
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            pass
    return True


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


GONE_BOUND_S = 30            # the worker is killed and reaped before the job returns: this only guards a hang


def assert_group_gone(pid: int, seconds: float = GONE_BOUND_S) -> None:
    """The process ``pid`` (a sandbox worker, the leader of its group) and every child of this test
    process in its group are gone, not even a zombie, within ``seconds`` (a bound for a hang, not a speed:
    on a loaded 2-core box the kernel may take a while to tear down a worker that held gigabytes)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [p for p in psutil.Process().children(recursive=True) if p.pid == pid or _pgid(p.pid) == pid]
        if not alive and not psutil.pid_exists(pid):
            return
        time.sleep(0.05)
    raise AssertionError(f"worker {pid} or its group is still alive")


class StudioServer:
    """``onnx-studio serve [MODEL] [ARGS]`` on a free 127.0.0.1 port; ``stop()`` ends it and its children.

    ``projects_root`` defaults to ``<workspace's folder>/projects``: never the environment's (which a
    fixture outside the test may not have set yet), never the user's home."""

    def __init__(self, workspace: Path, *args: str, model: Path | None = None, projects_root: Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        workspace = Path(workspace)
        workspace.mkdir(parents=True, exist_ok=True)
        self.workspace = workspace
        self.projects_root = Path(projects_root) if projects_root else workspace.parent / "projects"
        self.projects_root.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, **(env or {}), "ONNX_STUDIO_PROJECTS_ROOT": str(self.projects_root),
                    "ONNX_STUDIO_WORKSPACE": str(workspace)}
        # A free port is free when picked, not when serve binds it: another process (a second xdist worker's
        # server, any outgoing connection) can take it in between, and serve then refuses it as in use (R47):
        # start again on a fresh one.
        self._start(args, model)
        attempts = 1
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.close()
                log = self.log_path.read_text(errors="replace")
                if self.proc.returncode == 2 and "in use" in log and attempts < PORT_ATTEMPTS:
                    self._start(args, model)
                    attempts += 1
                    continue
                raise RuntimeError(f"serve exited: {log[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"serve did not start within {START_TIMEOUT_S} s")

    def _start(self, args: tuple[str, ...], model: Path | None) -> None:
        """``serve`` on a port free now, its output to its own log."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.workspace.parent / f"serve-{self.port}.log"
        self.log = open(self.log_path, "wb")
        cmd = [sys.executable, "-m", "studio", "serve", "--port", str(self.port), "--workspace", str(self.workspace),
               *args, *([str(model)] if model else [])]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def descendants(self) -> list[psutil.Process]:
        return descendants(self.proc)

    def send(self, sig: int) -> None:
        """The signal to the serve process only (as ``kill PID`` does), not its group."""
        os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        """SIGTERM to the server's group, then SIGKILL to whatever of it (and its children) is left."""
        procs = [psutil.Process(self.proc.pid), *self.descendants()] if self.proc.poll() is None else []
        if procs:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        if self.proc.poll() is None:
            self.proc.wait(10)
        if not self.log.closed:
            self.log.close()
