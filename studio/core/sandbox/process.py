"""A sandbox worker process, seen from the parent: how it is started, talked to and ended.

Owns :class:`Worker` (one child ``python -m studio.core.worker`` and its pipes: start-up, reply
lines, resident-memory samples, log tail, kill and close), the environment a child gets
(:data:`MINIMAL_ENV_NAMES` / :data:`MINIMAL_ENV_PREFIXES` for user code) and the long-lived
thread that forks every child. Which worker serves which job is :mod:`studio.core.sandbox.pool`'s;
what is said over the pipes is :mod:`studio.core.sandbox.protocol`'s.

Child process
    New session (its own process group, killed as a whole), no inherited file
    descriptors beyond its pipes, core dumps off, ``RLIMIT_AS`` set, and its
    cwd/``TMPDIR`` an empty scratch folder per job, removed afterwards. The
    environment is the parent's (``OMP_NUM_THREADS`` etc. untouched unless
    :attr:`Limits.cpu_threads` is set) plus ``MALLOC_ARENA_MAX=2`` (see the package docs),
    with ``HOME`` and ``XDG_CACHE_HOME`` in the worker's own folder: engines'
    per-user files (ONNX Runtime's device id and database, OpenVINO's telemetry
    id) stay there and go with the worker (RELIABILITY (c)). With
    :attr:`Limits.minimal_env` (user custom-op code) only the allowlisted
    :data:`MINIMAL_ENV_NAMES` / :data:`MINIMAL_ENV_PREFIXES` pass (plus that HOME).
"""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from studio.core.errors import WorkerError
from studio.core.sandbox.limits import Limits
from studio.core.sandbox.messages import describe_exit, scrub_message
import studio

log = logging.getLogger(__name__)

TICK_S = 0.1   # how often the parent looks at a worker while it waits (replies, memory, deadline, cancel)

_spawn_lock = threading.Lock()
_spawn_queue: Any = None


def forget_spawner() -> None:
    """After os.fork(): the parent's spawner thread does not exist in the child; start a new one on demand."""
    global _spawn_queue, _spawn_lock
    _spawn_queue = None
    _spawn_lock = threading.Lock()


def _spawner_loop(q: Any) -> None:
    while True:
        fn, fut = q.get()
        if fut.set_running_or_notify_cancel():
            try:
                fut.set_result(fn())
            except BaseException as exc:  # noqa: BLE001
                fut.set_exception(exc)


def _in_spawner_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` (a Popen) on one long-lived thread.

    Linux's PR_SET_PDEATHSIG fires when the *thread* that forked the child
    exits; Streamlit runs each script run on a short-lived thread, so workers
    must be forked from a thread that lives as long as the process.
    """
    global _spawn_queue
    import queue

    with _spawn_lock:
        if _spawn_queue is None:
            _spawn_queue = queue.SimpleQueue()
            threading.Thread(target=_spawner_loop, args=(_spawn_queue,), name="studio-worker-spawner",
                             daemon=True).start()
        q = _spawn_queue
    fut: Future = Future()
    q.put((fn, fut))
    try:
        return fut.result()
    except BaseException:
        # Interrupted while waiting (Ctrl-C, Stop): kill whatever gets started.
        def _kill_late(done: Future) -> None:
            proc = None if done.cancelled() or done.exception() else done.result()
            if isinstance(proc, subprocess.Popen):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                proc.wait()

        fut.add_done_callback(_kill_late)
        raise


def _studio_root() -> str:
    return str(Path(studio.__file__).resolve().parent.parent)


# What a worker started with ``Limits(minimal_env=True)`` (user custom-op code) sees of the
# parent's environment: locale, search path, thread and BLAS settings. Tokens, keys, proxies,
# HOME and the studio's own settings are not passed (/proc/self/environ shows only these).
MINIMAL_ENV_NAMES = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHASHSEED",
                               "MALLOC_ARENA_MAX", "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"})
MINIMAL_ENV_PREFIXES = ("LC_", "OMP_", "KMP_", "MKL_", "OPENBLAS_", "GOMP_")


def _child_env(limits: Limits) -> dict[str, str]:
    env = dict(os.environ)
    if limits.minimal_env:
        env = {k: v for k, v in env.items() if k in MINIMAL_ENV_NAMES or k.startswith(MINIMAL_ENV_PREFIXES)}
    env.setdefault("MALLOC_ARENA_MAX", "2")
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONSTARTUP", None)
    root = _studio_root()
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        env["PYTHONPATH"] = os.pathsep.join([root, *paths])
    if limits.cpu_threads:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS"):
            env[var] = str(limits.cpu_threads)
    return env


class Worker:
    """One child process and its pipes (parent side); its folder is made under ``root``."""

    def __init__(self, limits: Limits, root: Path) -> None:
        self.key = limits.worker_key()
        self.limits = limits
        self.dir = Path(tempfile.mkdtemp(prefix="w", dir=root))
        self.log_path = self.dir / "worker.log"
        self.jobs_served = 0
        self.last_used = time.monotonic()
        self.proc: subprocess.Popen | None = None
        self.buf = b""
        self.last_rss = 0
        self.peak_rss_seen = 0
        self.peak_vms_seen = 0     # address space: what RLIMIT_AS counts (a failed reservation can segfault)
        read_fd, write_fd = os.pipe()
        self.resp_fd = read_fd
        cmd = [sys.executable, "-m", "studio.core.worker", "--resp-fd", str(write_fd),
               "--address-space", str(limits.address_space_bytes if limits.address_space_limit else 0),
               "--memory-bytes", str(limits.memory_bytes), "--cpu-threads", str(limits.cpu_threads or 0),
               "--parent-pid", str(os.getpid())]
        env = _child_env(limits)
        # Engines write per-user files (ONNX Runtime's ~/.cache/Microsoft/DeveloperTools device id and
        # database, OpenVINO's ~/intel telemetry id): they go to the worker's own folder, removed with it.
        env["HOME"] = str(self.dir)
        env["XDG_CACHE_HOME"] = str(self.dir / ".cache")
        try:
            with open(self.log_path, "ab") as log_file:
                self.proc = _in_spawner_thread(lambda: subprocess.Popen(
                    cmd, stdin=subprocess.PIPE, stdout=log_file, stderr=log_file, pass_fds=(write_fd,),
                    cwd=self.dir, env=env, start_new_session=True, close_fds=True))
        except BaseException:
            os.close(read_fd)
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        finally:
            os.close(write_fd)
        os.set_blocking(read_fd, False)
        self.pid = self.proc.pid
        self._ps: Any = None

    # -- I/O ----------------------------------------------------------------
    def read_lines(self, timeout: float) -> tuple[list[dict], bool]:
        """Wait up to ``timeout`` s; return complete reply lines and whether EOF was seen."""
        poller = select.poll()
        poller.register(self.resp_fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        eof = False
        if poller.poll(max(0, int(timeout * 1000))):
            while True:
                try:
                    chunk = os.read(self.resp_fd, 1 << 20)
                except BlockingIOError:
                    break
                except OSError:
                    eof = True
                    break
                if not chunk:
                    eof = True
                    break
                self.buf += chunk
        lines = []
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            if line.strip():
                try:
                    lines.append(json.loads(line))
                except ValueError:
                    lines.append({"ok": False, "kind": "crashed", "type": "ProtocolError",
                                  "message": "the worker sent an unreadable reply"})
        return lines, eof

    def send(self, message: dict) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message, separators=(",", ":")) + "\n").encode("ascii"))
        self.proc.stdin.flush()

    def sample_rss(self) -> int:
        try:
            import psutil

            if self._ps is None:
                self._ps = psutil.Process(self.pid)
            info = self._ps.memory_info()
            rss, vms = int(info.rss), int(info.vms)
        except Exception:
            return self.last_rss
        self.last_rss = rss
        self.peak_rss_seen = max(self.peak_rss_seen, rss)
        self.peak_vms_seen = max(self.peak_vms_seen, vms)
        return rss

    def log_tail(self, nbytes: int = 4096) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - nbytes))
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def truncate_log(self) -> None:
        try:
            os.truncate(self.log_path, 0)
        except OSError:
            pass

    def reap(self) -> int | None:
        """Exit status of a worker that closed its reply pipe (killing it if it lingers)."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- ending -------------------------------------------------------------
    def kill(self) -> None:
        """SIGKILL the whole process group and reap it."""
        if self.proc is None:
            return
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
            log.warning("worker %s did not exit after SIGKILL", self.pid)

    def close(self, graceful: bool = True) -> None:
        """Stop the worker (stdin EOF first when ``graceful``) and remove its folder."""
        if self.proc is not None:
            if graceful and self.proc.poll() is None:
                try:
                    assert self.proc.stdin is not None
                    self.proc.stdin.close()
                    self.proc.wait(timeout=1.0)
                except (OSError, subprocess.TimeoutExpired, AssertionError):
                    pass
            if self.proc.poll() is None:
                self.kill()
            else:  # the worker is gone; its grandchildren may not be
                try:
                    os.killpg(self.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
            except OSError:
                pass
        try:
            os.close(self.resp_fd)
        except OSError:
            pass
        self.resp_fd = -1
        shutil.rmtree(self.dir, ignore_errors=True)

    def wait_ready(self, timeout: float, on_tick: Callable[[float], None] | None, stage: str) -> None:
        start = time.monotonic()
        while True:
            lines, eof = self.read_lines(TICK_S)
            for line in lines:
                if line.get("ready"):
                    return
            elapsed = time.monotonic() - start
            if eof or not self.alive():
                tail = scrub_message(self.log_tail(600), (self.dir,))
                code = self.reap()
                raise WorkerError(f"{stage} could not start its worker process (it {describe_exit(code)}): "
                                  f"{tail[-300:] or 'no output'}", kind="crashed", stage=stage)
            if elapsed > timeout:
                self.kill()
                raise WorkerError(f"{stage} could not start its worker process within {timeout:.0f} s",
                                  kind="timeout", stage=stage)
            if on_tick is not None:
                on_tick(elapsed)
