"""Start ``onnx-studio serve`` as a user would (tests.servers.StudioServer: its own process group, its
own projects root) and look at the processes it leaves: helpers for the serve reliability tests (R43, R44, R47)."""

from __future__ import annotations

import os
import signal
import socket
import time

import psutil

from tests.servers import StudioServer


Serve = StudioServer          # ``Serve(workspace, *serve_args)``: the suite's one server helper


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
