"""Capture what a converter's C++ code prints (worker side).

MNN's converter and onnx2tf report unsupported ops only on stdout/stderr; the worker's
own stdout/stderr is a crash log, so the file descriptors are pointed at a file for the
duration of the conversion and read back.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["captured_output", "strip_ansi"]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


@contextmanager
def captured_output(path: Path) -> Iterator[Path]:
    """Redirect fds 1 and 2 (and Python's streams) to ``path`` inside the block."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    _flush_c_stdio()            # what was printed before the block stays out of the file
    saved = (os.dup(1), os.dup(2))
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield path
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        _flush_c_stdio()        # what C++ printed into stdio's buffer belongs in this file, not after it
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (*saved, fd):
            os.close(f)


def _flush_c_stdio() -> None:
    """``fflush(NULL)``: C stdio buffers stdout fully when it is not a terminal (sandbox workers set
    PYTHONUNBUFFERED, which also unbuffers C stdio; other callers need not), so a converter's last lines
    (MNN's "Quantize model done!") would otherwise reach the file only after it was read."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):   # no C library to ask (not on Linux/macOS)
        pass


def read_log(path: Path, limit: int = 20_000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    text = strip_ansi(text)
    return text if len(text) <= limit else text[-limit:]
