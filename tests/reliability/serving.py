"""Start ``onnx-studio serve`` as a user would (its own process group) and look at the
processes it leaves: helpers for the serve reliability tests (R43, R44, R47)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

from tests.conftest import ROOT
from tests.e2e.conftest import free_port

START_TIMEOUT_S = 90         # a generous bound that only guards a hang at start-up


class Serve:
    def __init__(self, workspace: Path, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        workspace.mkdir(parents=True, exist_ok=True)
        self.log_path = workspace.parent / f"serve-{self.port}.log"
        self.log = open(self.log_path, "wb")
        cmd = [sys.executable, "-m", "studio", "serve", "--port", str(self.port), "--workspace", str(workspace),
               *args]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited: {self.log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError("serve did not start")

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def stop(self) -> None:
        procs = [psutil.Process(self.proc.pid), *self.descendants()] if self.proc.poll() is None else []
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        if self.proc.poll() is None:
            self.proc.wait(10)
        self.log.close()


def port_bindable(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def wait_until(check, seconds: float) -> bool:
    """Poll ``check`` for ``seconds`` (the spec's bound, not a performance budget)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


def all_gone(procs: list[psutil.Process]) -> bool:
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            pass
    return True


def send(serve: Serve, sig: int) -> None:
    """The signal to the serve process only (as ``kill PID`` does), not its group."""
    os.kill(serve.proc.pid, sig)


__all__ = ["Serve", "all_gone", "port_bindable", "send", "signal", "wait_until"]
