"""What a sandbox failure says: one line, no absolute paths, the exit named.

Owns :func:`scrub_message` (every message that leaves the sandbox goes through it: known folders
removed, the home folder as ``~``, any other absolute path cut to its last component), the
wording of a worker's exit status and signal, of the memory limit, and the log-tail markers
that mean an allocation failed. No process or pool state here.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

from studio.core.sandbox.limits import Limits

_ABS_PATH = re.compile(r"(?<![\w.~:/\\-])/(?:[^\s/'\"`:,;()\[\]<>|]+/)+([^\s/'\"`:,;()\[\]<>|]*)")
_SIGNAL_WORDS = {
    "SIGSEGV": "segmentation fault", "SIGFPE": "floating-point exception", "SIGABRT": "abort",
    "SIGKILL": "killed", "SIGBUS": "bus error", "SIGILL": "illegal instruction", "SIGTERM": "terminated",
}


def scrub_message(text: str, extra_dirs: tuple[str | Path, ...] = ()) -> str:
    """One line, no absolute paths: known folders become ``~``/nothing, and any
    other absolute path becomes its last component."""
    out = " ".join(str(text).split())
    for folder in sorted({str(d) for d in extra_dirs if d}, key=len, reverse=True):
        out = out.replace(folder.rstrip("/") + "/", "").replace(folder, ".")
    home = os.path.expanduser("~")
    if home and home != "/":
        out = out.replace(home.rstrip("/") + "/", "~/")
    return _ABS_PATH.sub(lambda m: m.group(1) or "/", out)


def fmt_seconds(seconds: float) -> str:
    return f"{seconds:g}" if seconds < 10 else f"{seconds:.0f}"


def memory_message(stage: str, limits: Limits) -> str:
    return (f"{stage} exceeded the worker memory limit ({limits.memory_gib:.1f} GiB); "
            "raise --memory-gb or use smaller inputs")


def looks_like_memory(log_tail: str) -> bool:
    text = log_tail.lower()
    return any(m in text for m in ("bad_alloc", "failed to allocate", "cannot allocate memory",
                                   "memoryerror", "unable to allocate", "out of memory"))


def folders_to_scrub(*dirs: Path) -> tuple[str, ...]:
    """The folders a job's messages are scrubbed of, each also as its real path where that differs."""
    out: list[str] = []
    for d in dirs:
        out.append(str(d))
        real = os.path.realpath(d)
        if real != str(d):
            out.append(real)
    return tuple(out)


def describe_exit(code: int | None) -> str:
    """A worker's exit status in words: "exited with code 3", "was killed by SIGSEGV (segmentation fault)"."""
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        word = _SIGNAL_WORDS.get(name)
        return f"was killed by {name}" + (f" ({word})" if word else "")
    return f"exited with code {code}"
