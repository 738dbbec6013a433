"""Child entry point of the sandbox: ``python -m studio.core.worker``.

Started only by :mod:`studio.core.sandbox`. Protocol (all JSON, one object per
line, ASCII):

* requests arrive on **stdin**; EOF on stdin means the parent is gone (or is
  closing this worker) and the worker exits at once, even mid-job;
* replies go to the pipe whose number is given by ``--resp-fd``: first
  ``{"ready": true, "pid": ...}``, then per job zero or more
  ``{"stage": "..."}`` progress lines and one final
  ``{"ok": true|false, ...}``;
* stdout and stderr are a log file the parent reads after a crash; ``print``
  from jobs or engines cannot corrupt the protocol.

Start-up order matters: resource limits first (``RLIMIT_AS``, ``RLIMIT_CORE=0``),
then the parent-death signal, then numpy and the job registry. Jobs run on the
main thread; a reader thread owns stdin.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable
from studio.core.errors import engine_message

# Engines call these "Failed to allocate memory", "std::bad_alloc"...; they mean
# the address-space limit was hit, which the parent reports as kind "memory".
_MEMORY_MARKERS = ("bad_alloc", "failed to allocate", "cannot allocate memory",
                   "unable to allocate", "out of memory", "memoryerror")


def _engine_message(message: str) -> str:
    """The failed job's one line (``studio.core.errors.engine_message``, imported late: the
    worker sets its resource limits before importing anything of the studio)."""
    return engine_message(message)


def _parse_argv(argv: list[str]) -> dict[str, str]:
    opts: dict[str, str] = {}
    it = iter(argv)
    for token in it:
        if token.startswith("--"):
            opts[token[2:]] = next(it, "")
    return opts


def _apply_limits(address_space: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if address_space > 0:
        try:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        except (ValueError, OSError):
            # The hard limit is already lower (container policy): keep it.
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            if hard != resource.RLIM_INFINITY:
                resource.setrlimit(resource.RLIMIT_AS, (min(address_space, hard), hard))


def _set_parent_death_signal(parent_pid: int) -> None:
    """Linux: SIGKILL this worker when the parent's spawner thread dies.

    The sandbox spawns from one long-lived thread (the 'parent' of PDEATHSIG is
    a thread, not a process), so this fires only when the studio process dies.
    The stdin-EOF watch below covers other platforms.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    except Exception:  # pragma: no cover - best effort
        return
    if parent_pid and os.getppid() != parent_pid:  # parent died before prctl
        os._exit(0)


def _is_memory_error(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    text = f"{type(exc).__name__} {exc}".lower()
    if "cuda" in text or "gpu" in text:
        return False  # device memory is not the worker's limit
    return any(marker in text for marker in _MEMORY_MARKERS)


def main(argv: list[str] | None = None) -> int:
    opts = _parse_argv(sys.argv[1:] if argv is None else argv)
    resp_fd = int(opts["resp-fd"])
    _apply_limits(int(opts.get("address-space", "0")))
    _set_parent_death_signal(int(opts.get("parent-pid", "0")))
    os.set_inheritable(resp_fd, False)  # grandchildren must not hold our reply pipe

    import faulthandler

    faulthandler.enable()  # a fatal signal leaves a Python stack in the log

    home = os.getcwd()
    memory_bytes = int(opts.get("memory-bytes", "0")) or None
    cpu_threads = int(opts.get("cpu-threads", "0")) or None
    write_lock = threading.Lock()

    def send(message: dict) -> None:
        payload = (json.dumps(message, separators=(",", ":"), default=_json_default) + "\n").encode("ascii")
        view = memoryview(payload)
        with write_lock:
            while view:
                written = os.write(resp_fd, view)
                view = view[written:]

    import numpy  # noqa: F401  - loaded before "ready" so the first job is not charged for it

    from studio.core import jobs  # noqa: F401 - start-up: loaded under the limits just applied, before "ready"

    requests: queue.Queue[bytes] = queue.Queue()

    def read_stdin() -> None:
        stdin = sys.stdin.buffer
        while True:
            line = stdin.readline()
            if not line:
                os._exit(0)  # parent closed the pipe or died: stop, even mid-job
            requests.put(line)

    threading.Thread(target=read_stdin, name="studio-worker-stdin", daemon=True).start()
    send({"ready": True, "pid": os.getpid()})

    while True:
        request = json.loads(requests.get())
        send(_handle(request, send=send, home=home, memory_bytes=memory_bytes, cpu_threads=cpu_threads))


def _json_default(obj: Any) -> Any:  # numpy scalars in job data are common and harmless
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"{type(obj).__name__} is not JSON-serialisable")


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def reset_peak_rss() -> bool:
    """Reset this process's ``VmHWM`` to its current resident memory (a job measuring the peak of one
    phase, as the generation profile does per case); False where Linux's ``clear_refs`` is not there."""
    return _reset_peak_rss()


def vm_hwm_bytes() -> int | None:
    """This process's peak resident memory since start (or since a reset through ``/proc/self/clear_refs``):
    Linux's ``VmHWM``; None where ``/proc`` does not say."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _peak_rss(reset_ok: bool) -> int | None:
    hwm = vm_hwm_bytes()
    if hwm is not None:
        return hwm
    if not reset_ok:
        try:
            import resource

            return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
        except Exception:
            return None
    return None


def _handle(request: dict, *, send: Callable[[dict], None], home: str,
            memory_bytes: int | None, cpu_threads: int | None) -> dict[str, Any]:
    import numpy as np

    from studio.core import jobs  # start-up: main() loads it under the worker's limits, before "ready"

    job_dir = Path(request["dir"])
    scratch = job_dir / "scratch"
    out_dir = Path(request["out_dir"])
    old_tmp = os.environ.get("TMPDIR")
    reset_ok = _reset_peak_rss()
    started = time.perf_counter()
    reply: dict[str, Any]
    try:
        os.chdir(scratch)
        os.environ["TMPDIR"] = str(scratch)
        tempfile.tempdir = None
        arrays = {key: np.load(job_dir / "in" / fname, allow_pickle=False)
                  for key, fname in request.get("arrays", [])}
        fn = jobs.load_job(request["job"], request["target"])
        ctx = jobs.JobContext(scratch=scratch, out_dir=out_dir, stage=request.get("stage", "job"),
                              memory_bytes=memory_bytes, cpu_threads=cpu_threads, _report=send)
        output = fn(request.get("args") or {}, arrays, ctx)
        del arrays
        if output is None:
            output = jobs.JobOutput()
        if not isinstance(output, jobs.JobOutput):
            raise TypeError(f"job returned {type(output).__name__}, expected JobOutput")
        try:
            data_text = json.dumps(output.data, default=_json_default)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"job data is not JSON: {exc}") from None
        manifest = []
        for index, (key, value) in enumerate(output.arrays.items()):
            if not isinstance(key, str):
                raise TypeError(f"array names must be strings, got {type(key).__name__}")
            array = np.asarray(value)
            if array.dtype.hasobject:
                raise TypeError(f"output array {key[:80]!r} has dtype object; return numeric, bool "
                                "or fixed-width string arrays")
            fname = f"r{index}.npy"
            np.save(job_dir / "res" / fname, array, allow_pickle=False)
            manifest.append([key, fname])
        reply = {"ok": True, "data": json.loads(data_text), "arrays": manifest}
    except BaseException as exc:  # noqa: BLE001 - everything becomes a reply
        message = str(exc).strip()
        reply = {
            "ok": False,
            "kind": "memory" if _is_memory_error(exc) else "error",
            "type": type(exc).__name__,
            "message": _engine_message(message),
            "traceback": "".join(traceback.format_exception(exc))[-4000:],
        }
    finally:
        os.chdir(home)  # so the parent can delete the job folder
        if old_tmp is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old_tmp
        tempfile.tempdir = None
    reply["seconds"] = time.perf_counter() - started
    reply["peak_rss"] = _peak_rss(reset_ok)
    return reply


if __name__ == "__main__":
    sys.exit(main())
