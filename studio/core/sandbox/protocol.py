"""The job protocol: run one registered job in a pool's worker and bring back its result.

Owns :func:`run_job` and :class:`JobResult`. A job's request is one JSON line (the job's name and
import target, its arguments, the stage name, its folders); its arrays travel as ``.npy`` files in
a per-job folder (``in/``, ``res/``, loaded with ``allow_pickle=False``), next to an empty
``scratch/`` cwd and the job's ``out/``. While waiting for the reply the parent enforces the
timeout, the resident-memory limit and cancellation, and turns every way a job can end into a
:class:`JobResult` or a one-line ``WorkerError`` (``crashed``, ``timeout``, ``memory``,
``cancelled``, ``error``). The child side of the protocol is :mod:`studio.core.worker`.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.errors import WorkerError
from studio.core import jobs   # a module: studio.core.jobs reads the engine table, whose package imports this
from studio.core.sandbox.limits import Limits, default_limits
from studio.core.sandbox.messages import (
    describe_exit,
    fmt_seconds,
    folders_to_scrub,
    looks_like_memory,
    memory_message,
    scrub_message,
)
from studio.core.sandbox.pool import Pool, evict_idle, get_pool, job_root, pool_closed
from studio.core.sandbox.process import TICK_S, Worker
from studio.core.expansion import model_size_note

log = logging.getLogger(__name__)

_STARTUP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class JobResult:
    """What a job returned (its JSON ``data`` and arrays) and how it ran."""

    data: dict[str, Any]
    arrays: dict[str, np.ndarray]
    seconds: float                   # request to reply, as the parent saw it
    worker_reused: bool              # served by an already-warm worker
    peak_rss_bytes: int | None       # the worker's peak resident memory during this job
    worker_pid: int | None = None


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
        target = jobs.resolve_job(name)
    except KeyError as exc:
        raise WorkerError(f"{stage}: {exc.args[0]}", kind="error", stage=stage) from None
    try:
        request_args = json.loads(json.dumps(args or {}))
    except (TypeError, ValueError) as exc:
        raise WorkerError(f"{stage}: job arguments must be JSON ({exc})", kind="error", stage=stage) from None
    if out_dir is not None:
        out_dir = Path(out_dir).resolve()
        out_dir.mkdir(parents=True, exist_ok=True)

    if pool_closed(pool_key):
        raise WorkerError(f"{stage} was cancelled", kind="cancelled", stage=stage)
    pool = get_pool(pool_key)
    entry_gen = pool.cancel_gen
    waited = time.monotonic()
    while not pool.lock.acquire(timeout=TICK_S):
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
        evict_idle()


def _run_locked(pool: Pool, name: str, target: str, args: dict, arrays: Mapping[str, Any] | None, *,
                stage: str, limits: Limits, out_dir: Path | None, fresh: bool,
                on_tick: Callable[[float], None] | None, entry_gen: int) -> JobResult:
    key = limits.worker_key()
    worker: Worker | None = None
    reused = False
    if not fresh:
        warm = pool.worker
        if warm is not None and warm.alive() and warm.key == key:
            worker, reused = warm, True
        elif warm is not None:
            pool.worker = None
            warm.close()
    if worker is None:
        evict_idle(current=pool, reserve=0 if fresh else 1)
        worker = Worker(limits, job_root())
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
        scrub_dirs = folders_to_scrub(job_dir / "scratch", job_out, job_dir, worker.dir)
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
                raise WorkerError(memory_message(stage, limits), kind="memory", stage=stage)
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


def _exchange(pool: Pool, worker: Worker, request: dict, *, stage: str, limits: Limits,
              on_tick: Callable[[float], None] | None, entry_gen: int,
              scrub_dirs: tuple[str, ...]) -> tuple[dict, float, str]:
    """Send one request and wait for its reply, enforcing time, memory and cancel."""
    start = time.monotonic()
    worker.peak_rss_seen = 0
    worker.peak_vms_seen = 0
    try:
        worker.send(request)
    except (BrokenPipeError, OSError):
        pass  # the worker died; the EOF below tells how
    deadline = start + limits.timeout_s
    next_sample = start
    while True:
        lines, eof = worker.read_lines(TICK_S)
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
            raise WorkerError(f"{stage} timed out after {fmt_seconds(limits.timeout_s)} s{_size_note(request)}; "
                              "raise --timeout or simplify the model", kind="timeout", stage=stage)
        if now >= next_sample:
            next_sample = now + TICK_S
            if worker.sample_rss() > limits.memory_bytes:
                worker.kill()
                raise WorkerError(memory_message(stage, limits), kind="memory", stage=stage)
        if on_tick is not None:
            on_tick(now - start)


def _size_note(request: dict) -> str:
    """" on a model of N nodes" for a job that was given a model: a timeout or crash then says
    what was large (R46). Only computed on that failure path."""
    path = (request.get("args") or {}).get("model_path")
    if not path:
        return ""

    return model_size_note(Path(str(path)))


def _crash_error(worker: Worker, code: int | None, stage: str, limits: Limits,
                 scrub_dirs: tuple[str, ...], size_note: str = "") -> WorkerError:
    tail = worker.log_tail()
    log.debug("worker %s ended (%s); log tail: %s", worker.pid, describe_exit(code),
              scrub_message(tail[-1000:], scrub_dirs))
    # Native code (onnxslim's numpy folding, protobuf) often segfaults instead of raising when RLIMIT_AS
    # refuses an allocation; its address space seen near that limit says so (RSS may still be far below).
    near_limit = worker.peak_rss_seen > 0.8 * limits.memory_bytes or (
        limits.address_space_limit and worker.peak_vms_seen > 0.8 * limits.address_space_bytes)
    signalled = code is not None and code < 0 and -code in (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT,
                                                             signal.SIGBUS)
    if looks_like_memory(tail) or (signalled and near_limit):
        return WorkerError(memory_message(stage, limits), kind="memory", stage=stage)
    return WorkerError(f"{stage} crashed{size_note}: the worker process {describe_exit(code)}", kind="crashed",
                       stage=stage)
