"""Keep an engine process near one copy of a model's weights while the engine reads them from a file map.

Why: OpenVINO maps a model's weight files read-only (its ONNX frontend maps the external data, its IR
reader the ``.bin``) and its CPU plugin repacks every ``FullyConnected`` weight into a buffer of its own
while compiling. Every mapped page it read stays resident in the process, so the compiled process held
the weights twice: 12.48 GiB (1.96x) for the 6.36 GiB decoder of ``benchmarks/bench_large.py``, 2.76 GiB
(1.82x) for a 1.48 GiB one, of which 1.58 GiB were the file's pages. Those pages are clean copies of the
file: :class:`ReleasedFilePages` drops them from the process (``madvise(MADV_DONTNEED)``, every
``interval_s``) while the engine works. A page read again (an embedding ``Gather`` reads its rows from
the map at inference) comes back from the page cache; nothing the engine computes changes, only which
pages of the file are counted in the process's resident memory (1.48 GiB decoder: 0.90x).

Only mappings without write or execute permission of files under the given folder are touched:
dropping a read-only file page loses nothing (``madvise(2)``: "repopulating the memory contents from the
up-to-date contents of the underlying mapped file"). Linux only; elsewhere a no-op.

Only for large weights (:func:`released_pages`, from :data:`MIN_WEIGHT_BYTES`): every OpenVINO compile of
the studio (check, verification, profiles, the memory plan) goes through it, and on a small model the
sweep thread (a ``/proc/self/maps`` parse every 20 ms, a join at the end) is cost for nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
import threading
from pathlib import Path

from studio.core.model import model_weight_bytes

MADV_DONTNEED = 4                      # Linux (x86, arm, riscv): asm-generic/mman-common.h
INTERVAL_S = 0.02
# Below this much weight the pages are left alone: the sandbox scales a worker's memory limit to its
# weights only from 512 MiB (studio.core.sandbox.limits); under it the 3 GiB default holds the file's
# pages twice beside OpenVINO itself (2 x 0.5 + ~0.3 GiB), so dropping them changes no outcome. From it a
# worker gets room for the weights once, and the second copy (1.82x on a 1.48 GiB decoder) breaks that.
MIN_WEIGHT_BYTES = 512 * 2**20


def read_only_maps(folder: str | Path) -> list[tuple[int, int, str]]:
    """(start, end, path) of this process's read-only, non-executable mappings of files under ``folder``."""
    root = str(Path(folder).resolve()).rstrip("/") + "/"
    out = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                parts = line.split(maxsplit=5)
                if len(parts) < 6 or not parts[1].startswith("r--"):
                    continue
                path = parts[5].rstrip("\n")
                if path.endswith(" (deleted)") or not path.startswith(root):
                    continue
                start, end = (int(x, 16) for x in parts[0].split("-"))
                out.append((start, end, path))
    except OSError:
        return []
    return out


def mapped_resident_bytes(folder: str | Path) -> int:
    """Resident bytes of this process's read-only mappings of files under ``folder`` (``/proc/self/smaps``)."""
    wanted = {(s, e) for s, e, _ in read_only_maps(folder)}
    total, current = 0, None
    try:
        with open("/proc/self/smaps", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                head = line.split(maxsplit=1)[0]
                if "-" in head and not head.endswith(":"):
                    start, end = (int(x, 16) for x in head.split("-"))
                    current = (start, end) if (start, end) in wanted else None
                elif current is not None and head == "Rss:":
                    total += int(line.split()[1]) * 1024
    except OSError:
        return 0
    return total


def released_pages(model_path: str | Path, *, force: bool | None = None
                   ) -> ReleasedFilePages | contextlib.AbstractContextManager:
    """:class:`ReleasedFilePages` over the model's folder when what OpenVINO maps of it reaches
    :data:`MIN_WEIGHT_BYTES` (``force``: True always, False never), else a context that does nothing."""
    path = Path(model_path).resolve()
    wanted = force if force is not None else model_weight_bytes(path) >= MIN_WEIGHT_BYTES
    return ReleasedFilePages(path.parent) if wanted else contextlib.nullcontext()


class ReleasedFilePages:
    """While inside: every ``interval_s`` drop this process's resident pages of read-only mappings of the
    files under ``folder`` (a thread; the engine keeps working). ``sweeps``: how many sweeps released a
    mapping (0 where nothing was mapped or off Linux); ``released``: each file's largest mapped range
    released, in bytes, by file name (what was dropped, for tests and reports)."""

    def __init__(self, folder: str | Path, interval_s: float = INTERVAL_S) -> None:
        self.folder = Path(folder)
        self.interval_s = interval_s
        self.sweeps = 0
        self.released: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._madvise = None
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                libc.madvise.restype = ctypes.c_int
                self._madvise = libc.madvise
            except (OSError, AttributeError):
                self._madvise = None

    def release(self) -> int:
        """One sweep now; the bytes of mapping it was applied to."""
        if self._madvise is None:
            return 0
        done = 0
        for start, end, path in read_only_maps(self.folder):
            if self._madvise(start, end - start, MADV_DONTNEED) == 0:
                done += end - start
                name = Path(path).name
                self.released[name] = max(self.released.get(name, 0), end - start)
        if done:
            self.sweeps += 1
        return done

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.release()

    def __enter__(self) -> ReleasedFilePages:
        if self._madvise is not None:
            self._thread = threading.Thread(target=self._run, name="studio-release-file-pages", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.release()
