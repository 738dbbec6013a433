"""The sandbox's process-wide state: one pool per ``pool_key``, its warm worker, and the job folder.

Owns the pools (a lock, the warm worker, the worker running a job now, the cancel generation),
the per-process job folder that holds every worker's folder (stale ones of killed studios swept),
which idle warm workers are stopped (at most ``ONNX_STUDIO_MAX_WARM``, default 4, each idle at
most ``ONNX_STUDIO_WORKER_IDLE_S``, default 600 s), and the public controls :func:`cancel_all`,
:func:`shutdown_pool`, :func:`shutdown_all` (registered with atexit) and :func:`pool_info`. After
``os.fork()`` a child forgets the parent's pools and workers. Running a job in a pool is
:mod:`studio.core.sandbox.protocol`'s.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from studio.core.sandbox.process import Worker, forget_spawner

_state_lock = threading.RLock()
_base_dir: Path | None = None
_owner_pid = os.getpid()
_atexit_registered = False


def job_root() -> Path:
    """This process's job folder, made on first use (under ``ONNX_STUDIO_JOB_DIR`` or the temp dir): every
    worker's folder is made in it, and :func:`shutdown_all` removes it."""
    global _base_dir, _atexit_registered
    with _state_lock:
        _check_fork()
        if _base_dir is None or not _base_dir.is_dir():
            parent = os.environ.get("ONNX_STUDIO_JOB_DIR") or None
            if parent:
                Path(parent).mkdir(parents=True, exist_ok=True)
            _base_dir = Path(tempfile.mkdtemp(prefix=f"onnx-studio-{os.getpid()}-", dir=parent))
            _sweep_stale(_base_dir.parent)
        if not _atexit_registered:
            atexit.register(shutdown_all)
            _atexit_registered = True
        return _base_dir


_STALE_DIR = re.compile(r"^onnx-studio-(\d+)-[\w-]+$")


def _sweep_stale(parent: Path) -> None:
    """Remove job folders left by studio processes that were killed (no atexit ran)."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    now = time.time()
    for entry in entries:
        match = _STALE_DIR.match(entry.name)
        if not match or int(match.group(1)) == os.getpid():
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if not entry.is_dir(follow_symlinks=False) or st.st_uid != os.getuid() or now - st.st_mtime < 60:
                continue
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(entry.path, ignore_errors=True)
        except OSError:
            continue


class Pool:
    """The jobs of one ``pool_key`` (a browser session, the CLI): served one at a time, by its warm worker."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.lock = threading.Lock()
        self.worker: Worker | None = None      # the warm worker
        self.running: Worker | None = None     # the worker running a job now (warm or one-off)
        self.cancel_gen = 0
        self.cancelled_worker: Worker | None = None
        self.last_used = time.monotonic()


_pools: dict[str, Pool] = {}
_closed: set[str] = set()      # keys no job may start in again (close_pool)


def _check_fork() -> None:
    """After os.fork() the child must not touch the parent's workers."""
    global _owner_pid, _base_dir
    if os.getpid() != _owner_pid:
        _owner_pid = os.getpid()
        _pools.clear()
        _base_dir = None
        forget_spawner()


def get_pool(key: str) -> Pool:
    """The pool of ``key``, made on first use."""
    with _state_lock:
        _check_fork()
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = Pool(key)
        pool.last_used = time.monotonic()  # so evict_idle does not forget it under us
        return pool


def _env_number(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, ""))
        return value if value >= 0 else default
    except ValueError:
        return default


def evict_idle(current: Pool | None = None, reserve: int = 0) -> None:
    """Stop idle warm workers beyond the cap or idle too long; forget empty pools."""
    max_warm = int(_env_number("ONNX_STUDIO_MAX_WARM", 4))
    idle_s = _env_number("ONNX_STUDIO_WORKER_IDLE_S", 600)
    now = time.monotonic()
    to_close: list[Worker] = []
    with _state_lock:
        idle = []
        for key, pool in list(_pools.items()):
            if pool is current or not pool.lock.acquire(blocking=False):
                continue
            try:
                if pool.worker is not None and (not pool.worker.alive() or now - pool.worker.last_used > idle_s):
                    to_close.append(pool.worker)
                    pool.worker = None
                if pool.worker is not None:
                    idle.append(pool)
                elif now - pool.last_used > idle_s:
                    del _pools[key]
            finally:
                pool.lock.release()
        idle.sort(key=lambda p: p.last_used)
        excess = len(idle) + reserve - max_warm
        for pool in idle[:max(0, excess)]:
            if pool.lock.acquire(blocking=False):
                try:
                    if pool.worker is not None:
                        to_close.append(pool.worker)
                        pool.worker = None
                finally:
                    pool.lock.release()
    for worker in to_close:
        worker.close()


def cancel_all(pool_key: str = "default") -> bool:
    """Kill the job running in ``pool_key`` (from any thread) and cancel jobs
    waiting for that pool. The waiting ``run_job`` calls raise
    ``WorkerError(kind="cancelled")``. Returns True when a running job was killed."""
    with _state_lock:
        pool = _pools.get(pool_key)
        if pool is None:
            return False
        pool.cancel_gen += 1
        worker = pool.running
        pool.cancelled_worker = worker
    if worker is None:
        return False
    try:
        os.killpg(worker.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return True


def shutdown_pool(pool_key: str = "default") -> None:
    """Stop the pool's warm worker (a running job is killed)."""
    with _state_lock:
        pool = _pools.pop(pool_key, None)
    if pool is None:
        return
    cancel_all_worker = pool.running
    if cancel_all_worker is not None:
        pool.cancel_gen += 1
        pool.cancelled_worker = cancel_all_worker
        try:
            os.killpg(cancel_all_worker.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    with pool.lock:
        if pool.worker is not None:
            pool.worker.close()
            pool.worker = None


def close_pool(pool_key: str) -> None:
    """:func:`shutdown_pool`, and no job starts in ``pool_key`` again: each later ``run_job`` there raises
    ``WorkerError(kind="cancelled")`` at once. A cancelled batch's task thread goes on to its stage's next job
    (a profile's next variant) in a fresh pool of the same key; that job would run its whole time."""
    with _state_lock:
        _closed.add(pool_key)
    shutdown_pool(pool_key)


def forget_closed(pool_key: str) -> None:
    """Drop ``pool_key`` from the closed keys once nothing can use it again (its batch executor has closed): a
    long-running ``serve`` would otherwise keep every cancelled batch's keys for its whole life."""
    with _state_lock:
        _closed.discard(pool_key)


def pool_closed(pool_key: str) -> bool:
    with _state_lock:
        return pool_key in _closed


def shutdown_all() -> None:
    """Stop every worker and remove the job folders (registered with atexit)."""
    global _base_dir
    if os.getpid() != _owner_pid:
        return
    with _state_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        for worker in (pool.running, pool.worker):
            if worker is not None and worker.proc is not None:
                worker.close(graceful=pool.running is None)
        pool.worker = None
    if _base_dir is not None:
        shutil.rmtree(_base_dir, ignore_errors=True)
        _base_dir = None


def pool_info() -> list[dict[str, Any]]:
    """Warm workers now (for a status page): pool, pid, jobs served, idle seconds."""
    now = time.monotonic()
    with _state_lock:
        return [{"pool": p.key, "pid": p.worker.pid if p.worker else None,
                 "jobs_served": p.worker.jobs_served if p.worker else 0,
                 "busy": p.running is not None,
                 "idle_s": round(now - p.last_used, 1)} for p in _pools.values()]
