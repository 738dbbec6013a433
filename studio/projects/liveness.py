"""Who owns a running job: the pid, that process's start time (pids are reused) and
a token of this process. A job whose owner is gone was cut short (``kill -9``, a
crash, a power cut) and is shown as interrupted, never as done."""

from __future__ import annotations

import os
import secrets

import psutil

PROCESS_TOKEN = secrets.token_hex(8)


def process_start(pid: int | None = None) -> float:
    try:
        return psutil.Process(pid or os.getpid()).create_time()
    except (psutil.Error, OSError):
        return 0.0


def owner() -> tuple[int, float, str]:
    """(pid, start time, token) of the calling process, as stored in a job row."""
    return os.getpid(), process_start(), PROCESS_TOKEN


def owner_alive(pid: int | None, start: float | None, token: str | None) -> bool:
    """True while the process that opened a job still runs (the same process, not a reused pid)."""
    if token == PROCESS_TOKEN:
        return True
    if not pid:
        return False
    try:
        proc = psutil.Process(int(pid))
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return abs(proc.create_time() - float(start or 0.0)) < 1.0
    except (psutil.Error, OSError, ValueError):
        return False
