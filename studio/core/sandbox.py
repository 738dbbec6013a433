"""Run engine calls and other risky code in a child process (the worker).

OpenVINO can segfault, onnxsim can die with SIGFPE, a custom Python op can
abort the interpreter, an ``Expand`` can ask for 8 GiB and a ``Loop`` can run
2^62 times. In a Streamlit server any of these would kill every user, so each
such call is a *job* (:mod:`studio.core.jobs`) run by :func:`run_job` in a
worker child with a wall-clock timeout and a memory limit. The caller gets a
:class:`JobResult` or a one-line :class:`~studio.core.errors.WorkerError` whose
``kind`` is ``crashed``, ``timeout``, ``memory``, ``cancelled`` or ``error``.

Workers
    One warm worker per ``pool_key`` (a browser session, the CLI) serves jobs
    one at a time over pipes: one JSON line per request and reply, arrays as
    ``.npy`` files in a per-job folder, loaded with ``allow_pickle=False``.
    A worker is replaced after a crash, timeout, memory kill or cancel, when
    the limits change, and never reused for ``fresh=True`` jobs (custom-op
    code, kernel registration), which get a one-off worker. Different pools
    run concurrently. At most ``ONNX_STUDIO_MAX_WARM`` (default 4) idle warm
    workers are kept, each for at most ``ONNX_STUDIO_WORKER_IDLE_S`` (default
    600) seconds; all are stopped at exit, and a worker dies with the studio
    (stdin EOF watch, plus ``PR_SET_PDEATHSIG`` on Linux).

Child process
    New session (its own process group, killed as a whole), no inherited file
    descriptors beyond its pipes, core dumps off, ``RLIMIT_AS`` set, and its
    cwd/``TMPDIR`` an empty scratch folder per job, removed afterwards. The
    environment is the parent's (``OMP_NUM_THREADS`` etc. untouched unless
    :attr:`Limits.cpu_threads` is set) plus ``MALLOC_ARENA_MAX=2`` (see below),
    with ``HOME`` and ``XDG_CACHE_HOME`` in the worker's own folder: engines'
    per-user files (ONNX Runtime's device id and database, OpenVINO's telemetry
    id) stay there and go with the worker (RELIABILITY (c)). With
    :attr:`Limits.minimal_env` (user custom-op code) only the allowlisted
    :data:`MINIMAL_ENV_NAMES` / :data:`MINIMAL_ENV_PREFIXES` pass (plus that HOME).

Memory limit
    ``Limits.memory_bytes`` (default 3 GiB) bounds the child twice:

    * ``RLIMIT_AS = memory_bytes + 16 MiB x threads``: the address-space limit
      makes an allocation bomb fail at once (``MemoryError``, ORT "Failed to
      allocate memory", ``std::bad_alloc``), reported as kind ``memory``. The
      allowance covers thread-stack reservations (8 MiB each; ORT and
      OpenVINO each start about one thread per core), which are address space
      but not memory; without it a 128-core server would spend ~2 GiB of the
      limit on untouched stacks. ``MALLOC_ARENA_MAX=2`` stops glibc from
      reserving 64 MiB of address space per thread (measured: 64 ORT threads
      took 1.6 GiB of address space without it, 0.8 GiB with it).
    * the parent samples the child's resident memory every 0.1 s and kills it
      above ``memory_bytes`` (a backstop where ``RLIMIT_AS`` is not enforced).

    Measured here (2 cores; onnxruntime 1.32, openvino 2026.4, OpenVINO CPU
    plugin included): a worker that has imported both engines and run a small
    model uses ~0.42 GiB of address space and ~130 MiB resident; both engines
    initialise and run under every limit from the 512 MiB minimum up to the
    3 GiB default. Without ``MALLOC_ARENA_MAX`` the same worker used ~0.9 GiB.

Platforms
    POSIX. Linux is the target (``PR_SET_PDEATHSIG``, ``/proc`` peak-RSS per
    job). On macOS ``RLIMIT_AS`` is not enforced, so only the RSS watchdog
    bounds memory. Windows is not supported.

Configuration (:func:`default_limits`), later sources win:

    1. defaults: ``timeout_s = 120``, ``memory_gb = 3``, ``cpu_threads`` unset;
    2. the first config file found of: ``$ONNX_STUDIO_CONFIG``,
       ``./onnx-studio.toml``, ``$XDG_CONFIG_HOME/onnx-studio/config.toml``
       (``~/.config/onnx-studio/config.toml``)::

           [worker]
           timeout_s = 300
           memory_gb = 4
           cpu_threads = 4

    3. environment: ``ONNX_STUDIO_TIMEOUT_S``, ``ONNX_STUDIO_MEMORY_GB``,
       ``ONNX_STUDIO_CPU_THREADS``.

    Other knobs (environment only): ``ONNX_STUDIO_MAX_WARM``,
    ``ONNX_STUDIO_WORKER_IDLE_S``, ``ONNX_STUDIO_JOB_DIR`` (parent folder of
    the per-process job folders; default the system temp dir).
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.errors import StudioError, WorkerError
from studio.core.jobs import resolve_job

__all__ = [
    "JobResult",
    "Limits",
    "cancel_all",
    "default_limits",
    "pool_info",
    "run_job",
    "scrub_message",
    "shutdown_all",
    "shutdown_pool",
]

log = logging.getLogger(__name__)

GiB = 2**30
_MIN_MEMORY_BYTES = 512 * 2**20
_STACK_ALLOWANCE_PER_THREAD = 16 * 2**20
_TICK_S = 0.1
_STARTUP_TIMEOUT_S = 60.0


# ============================================================================ limits

@dataclass(frozen=True)
class Limits:
    """Resource limits of one job (and of the worker that runs it)."""

    timeout_s: float = 120.0            # wall clock per job, from request to reply
    memory_bytes: int = 3 * GiB         # the worker's memory limit (see module docs)
    cpu_threads: int | None = None      # None: engines' defaults; else OMP/MKL/OpenBLAS env + engine threads
    address_space_limit: bool = True    # RLIMIT_AS on; False for CUDA jobs (CUDA reserves huge address ranges)
    minimal_env: bool = False           # user code (custom ops): start the worker with an allowlisted environment

    def __post_init__(self) -> None:
        if not (isinstance(self.timeout_s, (int, float)) and math.isfinite(self.timeout_s)
                and self.timeout_s > 0):
            raise ValueError(f"timeout_s must be a positive number of seconds, got {self.timeout_s!r}")
        if not isinstance(self.memory_bytes, int) or self.memory_bytes < _MIN_MEMORY_BYTES:
            raise ValueError(f"memory_bytes must be an int of at least {_MIN_MEMORY_BYTES} (512 MiB), "
                             f"got {self.memory_bytes!r}")
        if self.cpu_threads is not None and (not isinstance(self.cpu_threads, int) or self.cpu_threads < 1):
            raise ValueError(f"cpu_threads must be a positive int or None, got {self.cpu_threads!r}")

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GiB

    @property
    def address_space_bytes(self) -> int:
        """The child's ``RLIMIT_AS``: memory plus thread-stack reservations."""
        threads = self.cpu_threads or os.cpu_count() or 1
        return self.memory_bytes + _STACK_ALLOWANCE_PER_THREAD * max(threads, 4)

    def worker_key(self) -> tuple[Any, ...]:
        """What the warm worker was started with; a job with another key needs a new one."""
        return (self.memory_bytes, self.cpu_threads, self.address_space_limit, self.minimal_env)


def _config_files() -> list[Path]:
    files = []
    explicit = os.environ.get("ONNX_STUDIO_CONFIG")
    if explicit:
        files.append(Path(explicit))
    files.append(Path.cwd() / "onnx-studio.toml")
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    files.append(Path(xdg) / "onnx-studio" / "config.toml")
    return files


def _number(value: Any, source: str, *, integer: bool = False) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        number = int(value) if integer else float(value)
        if integer and isinstance(value, float) and not value.is_integer():
            raise ValueError
    except (TypeError, ValueError):
        raise StudioError(f"{source} must be a{'n integer' if integer else ' number'}, got {str(value)[:40]!r}",
                          code="BAD-CONFIG") from None
    if not math.isfinite(number) or number <= 0:
        raise StudioError(f"{source} must be positive, got {str(value)[:40]!r}", code="BAD-CONFIG")
    return number


def default_limits() -> Limits:
    """Limits from defaults, the first config file found, then the environment.

    See the module docstring for the sources. Invalid values raise
    :class:`StudioError` (code ``BAD-CONFIG``) naming the setting.
    """
    import tomllib

    values: dict[str, tuple[Any, str]] = {}
    for path in _config_files():
        try:
            if not path.is_file():
                continue
            with open(path, "rb") as fh:
                table = tomllib.load(fh).get("worker", {})
        except OSError:
            continue
        except tomllib.TOMLDecodeError as exc:
            raise StudioError(f"config file {path.name} is not valid TOML: {exc}", code="BAD-CONFIG") from None
        if not isinstance(table, dict):
            raise StudioError(f"config file {path.name}: [worker] must be a table", code="BAD-CONFIG")
        for key in ("timeout_s", "memory_gb", "cpu_threads"):
            if key in table:
                values[key] = (table[key], f"{path.name} [worker] {key}")
        break
    for key, env in (("timeout_s", "ONNX_STUDIO_TIMEOUT_S"), ("memory_gb", "ONNX_STUDIO_MEMORY_GB"),
                     ("cpu_threads", "ONNX_STUDIO_CPU_THREADS")):
        raw = os.environ.get(env)
        if raw not in (None, ""):
            values[key] = (raw, env)
    kwargs: dict[str, Any] = {}
    if "timeout_s" in values:
        kwargs["timeout_s"] = _number(*values["timeout_s"])
    if "memory_gb" in values:
        gib = _number(*values["memory_gb"])
        if gib * GiB < _MIN_MEMORY_BYTES:
            raise StudioError(f"{values['memory_gb'][1]} must be at least 0.5 (GiB)", code="BAD-CONFIG")
        kwargs["memory_bytes"] = int(gib * GiB)
    if "cpu_threads" in values:
        kwargs["cpu_threads"] = int(_number(*values["cpu_threads"], integer=True))
    return Limits(**kwargs)


# ============================================================================ results

@dataclass(frozen=True)
class JobResult:
    data: dict[str, Any]
    arrays: dict[str, np.ndarray]
    seconds: float                   # request to reply, as the parent saw it
    worker_reused: bool              # served by an already-warm worker
    peak_rss_bytes: int | None       # the worker's peak resident memory during this job
    worker_pid: int | None = None


# ============================================================================ messages

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


def _fmt_seconds(seconds: float) -> str:
    return f"{seconds:g}" if seconds < 10 else f"{seconds:.0f}"


def _memory_message(stage: str, limits: Limits) -> str:
    return (f"{stage} exceeded the worker memory limit ({limits.memory_gib:.1f} GiB); "
            "raise --memory-gb or use smaller inputs")


def _looks_like_memory(log_tail: str) -> bool:
    text = log_tail.lower()
    return any(m in text for m in ("bad_alloc", "failed to allocate", "cannot allocate memory",
                                   "memoryerror", "unable to allocate", "out of memory"))


# ============================================================================ worker process

_state_lock = threading.RLock()
_base_dir: Path | None = None
_owner_pid = os.getpid()
_spawn_queue: Any = None
_atexit_registered = False


def _job_root() -> Path:
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

    with _state_lock:
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
    import studio

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


class _Worker:
    """One child process and its pipes (parent side)."""

    def __init__(self, limits: Limits) -> None:
        self.key = limits.worker_key()
        self.limits = limits
        self.dir = Path(tempfile.mkdtemp(prefix="w", dir=_job_root()))
        self.log_path = self.dir / "worker.log"
        self.jobs_served = 0
        self.last_used = time.monotonic()
        self.proc: subprocess.Popen | None = None
        self.buf = b""
        self.last_rss = 0
        self.peak_rss_seen = 0
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
            rss = int(self._ps.memory_info().rss)
        except Exception:
            return self.last_rss
        self.last_rss = rss
        self.peak_rss_seen = max(self.peak_rss_seen, rss)
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
            lines, eof = self.read_lines(_TICK_S)
            for line in lines:
                if line.get("ready"):
                    return
            elapsed = time.monotonic() - start
            if eof or not self.alive():
                tail = scrub_message(self.log_tail(600), (self.dir,))
                code = self.reap()
                raise WorkerError(f"{stage} could not start its worker process (it {_describe_exit(code)}): "
                                  f"{tail[-300:] or 'no output'}", kind="crashed", stage=stage)
            if elapsed > timeout:
                self.kill()
                raise WorkerError(f"{stage} could not start its worker process within {timeout:.0f} s",
                                  kind="timeout", stage=stage)
            if on_tick is not None:
                on_tick(elapsed)


def _describe_exit(code: int | None) -> str:
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


# ============================================================================ pools

class _Pool:
    def __init__(self, key: str) -> None:
        self.key = key
        self.lock = threading.Lock()
        self.worker: _Worker | None = None      # the warm worker
        self.running: _Worker | None = None     # the worker running a job now (warm or one-off)
        self.cancel_gen = 0
        self.cancelled_worker: _Worker | None = None
        self.last_used = time.monotonic()


_pools: dict[str, _Pool] = {}


def _check_fork() -> None:
    """After os.fork() the child must not touch the parent's workers."""
    global _owner_pid, _base_dir, _spawn_queue
    if os.getpid() != _owner_pid:
        _owner_pid = os.getpid()
        _pools.clear()
        _base_dir = None
        _spawn_queue = None


def _get_pool(key: str) -> _Pool:
    with _state_lock:
        _check_fork()
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = _Pool(key)
        pool.last_used = time.monotonic()  # so _evict_idle does not forget it under us
        return pool


def _env_number(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, ""))
        return value if value >= 0 else default
    except ValueError:
        return default


def _evict_idle(current: _Pool | None = None, reserve: int = 0) -> None:
    """Stop idle warm workers beyond the cap or idle too long; forget empty pools."""
    max_warm = int(_env_number("ONNX_STUDIO_MAX_WARM", 4))
    idle_s = _env_number("ONNX_STUDIO_WORKER_IDLE_S", 600)
    now = time.monotonic()
    to_close: list[_Worker] = []
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


# ============================================================================ run_job

def _prepare_inputs(arrays: Mapping[str, Any] | None, in_dir: Path, stage: str) -> list[list[str]]:
    manifest: list[list[str]] = []
    for index, (key, value) in enumerate((arrays or {}).items()):
        if not isinstance(key, str):
            raise WorkerError(f"{stage}: array names must be strings, got {type(key).__name__}",
                              kind="error", stage=stage)
        array = np.asarray(value)
        if array.dtype.hasobject:
            raise WorkerError(f"{stage}: input array {scrub_message(key[:80])!r} has dtype object; only "
                              "numeric, bool and fixed-width string arrays can be sent to the worker",
                              kind="error", stage=stage)
        fname = f"a{index}.npy"
        np.save(in_dir / fname, array, allow_pickle=False)
        manifest.append([key, fname])
    return manifest


_RESULT_NAME = re.compile(r"^r\d+\.npy$")


def _load_outputs(manifest: list, res_dir: Path, stage: str) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for key, fname in manifest:
        if not isinstance(key, str) or not isinstance(fname, str) or not _RESULT_NAME.match(fname):
            raise WorkerError(f"{stage}: the worker returned a malformed array list", kind="error", stage=stage)
        try:
            out[key] = np.load(res_dir / fname, allow_pickle=False)
        except ValueError as exc:
            raise WorkerError(f"{stage} returned array {key[:80]!r} that cannot be loaded without pickle "
                              f"({scrub_message(str(exc))})", kind="error", stage=stage) from None
    return out


def run_job(name: str, args: dict[str, Any] | None = None, arrays: Mapping[str, np.ndarray] | None = None, *,
            stage: str, limits: Limits | None = None, out_dir: Path | None = None, fresh: bool = False,
            pool_key: str = "default", on_tick: Callable[[float], None] | None = None) -> JobResult:
    """Run the registered job ``name`` in a worker and return its result.

    ``stage`` names the step for messages ("ONNX Runtime session creation").
    ``out_dir`` (created if missing) is where the job may leave files; without
    it the job's ``ctx.out_dir`` is a temporary folder removed afterwards.
    ``fresh=True`` runs the job in a one-off worker that is never reused.
    ``on_tick(elapsed_s)`` is called about every 0.1 s while waiting; if it
    raises, the worker's process group is killed and the exception propagates.

    Raises ``WorkerError`` with ``kind`` crashed / timeout / memory / cancelled /
    error; messages are one line without absolute paths.
    """
    limits = limits or default_limits()
    try:
        target = resolve_job(name)
    except KeyError as exc:
        raise WorkerError(f"{stage}: {exc.args[0]}", kind="error", stage=stage) from None
    try:
        request_args = json.loads(json.dumps(args or {}))
    except (TypeError, ValueError) as exc:
        raise WorkerError(f"{stage}: job arguments must be JSON ({exc})", kind="error", stage=stage) from None
    if out_dir is not None:
        out_dir = Path(out_dir).resolve()
        out_dir.mkdir(parents=True, exist_ok=True)

    pool = _get_pool(pool_key)
    entry_gen = pool.cancel_gen
    waited = time.monotonic()
    while not pool.lock.acquire(timeout=_TICK_S):
        if pool.cancel_gen != entry_gen:
            raise WorkerError(f"{stage} was cancelled", kind="cancelled", stage=stage)
        if on_tick is not None:
            on_tick(time.monotonic() - waited)
    try:
        if pool.cancel_gen != entry_gen:
            raise WorkerError(f"{stage} was cancelled", kind="cancelled", stage=stage)
        pool.last_used = time.monotonic()
        return _run_locked(pool, name, target, request_args, arrays, stage=stage, limits=limits,
                           out_dir=out_dir, fresh=fresh, on_tick=on_tick, entry_gen=entry_gen)
    finally:
        pool.last_used = time.monotonic()
        pool.lock.release()
        _evict_idle()


def _run_locked(pool: _Pool, name: str, target: str, args: dict, arrays: Mapping[str, Any] | None, *,
                stage: str, limits: Limits, out_dir: Path | None, fresh: bool,
                on_tick: Callable[[float], None] | None, entry_gen: int) -> JobResult:
    key = limits.worker_key()
    worker: _Worker | None = None
    reused = False
    if not fresh:
        warm = pool.worker
        if warm is not None and warm.alive() and warm.key == key:
            worker, reused = warm, True
        elif warm is not None:
            pool.worker = None
            warm.close()
    if worker is None:
        _evict_idle(current=pool, reserve=0 if fresh else 1)
        worker = _Worker(limits)
        try:
            pool.running = worker
            worker.wait_ready(_STARTUP_TIMEOUT_S, on_tick, stage)
        except WorkerError:
            pool.running = None
            worker.close(graceful=False)
            if pool.cancel_gen != entry_gen:
                raise WorkerError(f"{stage} was cancelled", kind="cancelled", stage=stage) from None
            raise
        except BaseException:
            pool.running = None
            worker.close(graceful=False)
            raise
        if not fresh:
            pool.worker = worker
    keep = False
    replied = False
    job_dir = Path(tempfile.mkdtemp(prefix="job-", dir=worker.dir))
    try:
        for sub in ("in", "scratch", "res"):
            (job_dir / sub).mkdir()
        job_out = out_dir if out_dir is not None else job_dir / "out"
        job_out.mkdir(exist_ok=True)
        scrub_dirs = _scrub_dirs(job_dir / "scratch", job_out, job_dir, worker.dir)
        manifest = _prepare_inputs(arrays, job_dir / "in", stage)
        pool.running = worker
        worker.truncate_log()
        reply, seconds, stage = _exchange(pool, worker, {
            "job": name, "target": target, "args": args, "arrays": manifest, "dir": str(job_dir),
            "out_dir": str(job_out), "stage": stage}, stage=stage, limits=limits, on_tick=on_tick,
            entry_gen=entry_gen, scrub_dirs=scrub_dirs)
        replied = True
        worker.jobs_served += 1
        worker.last_used = time.monotonic()
        if not reply.get("ok"):
            kind = reply.get("kind", "error")
            detail = scrub_message(f"{reply.get('type', 'Error')}: {reply.get('message', '')}", scrub_dirs)
            log.debug("job %s failed in the worker: %s", name,
                      scrub_message(reply.get("traceback", ""), scrub_dirs))
            if kind == "memory":
                raise WorkerError(_memory_message(stage, limits), kind="memory", stage=stage)
            keep = not fresh
            raise WorkerError(f"{stage} failed: {detail[:400]}", kind="error", stage=stage)
        outputs = _load_outputs(reply.get("arrays", []), job_dir / "res", stage)
        data = reply.get("data")
        keep = not fresh
        return JobResult(data=data if isinstance(data, dict) else {"value": data}, arrays=outputs,
                         seconds=seconds, worker_reused=reused, peak_rss_bytes=reply.get("peak_rss"),
                         worker_pid=worker.pid)
    finally:
        pool.running = None
        if pool.cancelled_worker is worker:
            pool.cancelled_worker = None
        if not keep:
            if pool.worker is worker:
                pool.worker = None
            worker.close(graceful=replied and worker.alive())
        else:
            shutil.rmtree(job_dir, ignore_errors=True)


def _scrub_dirs(*dirs: Path) -> tuple[str, ...]:
    out: list[str] = []
    for d in dirs:
        out.append(str(d))
        real = os.path.realpath(d)
        if real != str(d):
            out.append(real)
    return tuple(out)


def _exchange(pool: _Pool, worker: _Worker, request: dict, *, stage: str, limits: Limits,
              on_tick: Callable[[float], None] | None, entry_gen: int,
              scrub_dirs: tuple[str, ...]) -> tuple[dict, float, str]:
    """Send one request and wait for its reply, enforcing time, memory and cancel."""
    start = time.monotonic()
    worker.peak_rss_seen = 0
    try:
        worker.send(request)
    except (BrokenPipeError, OSError):
        pass  # the worker died; the EOF below tells how
    deadline = start + limits.timeout_s
    next_sample = start
    while True:
        lines, eof = worker.read_lines(_TICK_S)
        for line in lines:
            if "stage" in line and "ok" not in line:
                stage = str(line["stage"])[:200] or stage
                continue
            if "ok" in line:
                return line, time.monotonic() - start, stage
        now = time.monotonic()
        if pool.cancel_gen != entry_gen or pool.cancelled_worker is worker:
            worker.kill()
            raise WorkerError(f"{stage} was cancelled", kind="cancelled", stage=stage)
        if eof or not worker.alive():
            code = worker.reap()
            if pool.cancel_gen != entry_gen:
                raise WorkerError(f"{stage} was cancelled", kind="cancelled", stage=stage)
            raise _crash_error(worker, code, stage, limits, scrub_dirs, _size_note(request))
        if now >= deadline:
            worker.kill()
            raise WorkerError(f"{stage} timed out after {_fmt_seconds(limits.timeout_s)} s{_size_note(request)}; "
                              "raise --timeout or simplify the model", kind="timeout", stage=stage)
        if now >= next_sample:
            next_sample = now + _TICK_S
            if worker.sample_rss() > limits.memory_bytes:
                worker.kill()
                raise WorkerError(_memory_message(stage, limits), kind="memory", stage=stage)
        if on_tick is not None:
            on_tick(now - start)


def _size_note(request: dict) -> str:
    """" on a model of N nodes" for a job that was given a model: a timeout or crash then says
    what was large (R46). Only computed on that failure path."""
    path = (request.get("args") or {}).get("model_path")
    if not path:
        return ""
    from studio.core.expansion import model_size_note

    return model_size_note(Path(str(path)))


def _crash_error(worker: _Worker, code: int | None, stage: str, limits: Limits,
                 scrub_dirs: tuple[str, ...], size_note: str = "") -> WorkerError:
    tail = worker.log_tail()
    log.debug("worker %s ended (%s); log tail: %s", worker.pid, _describe_exit(code),
              scrub_message(tail[-1000:], scrub_dirs))
    near_limit = worker.peak_rss_seen > 0.8 * limits.memory_bytes
    signalled = code is not None and code < 0 and -code in (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT,
                                                             signal.SIGBUS)
    if _looks_like_memory(tail) or (signalled and near_limit):
        return WorkerError(_memory_message(stage, limits), kind="memory", stage=stage)
    return WorkerError(f"{stage} crashed{size_note}: the worker process {_describe_exit(code)}", kind="crashed",
                       stage=stage)
