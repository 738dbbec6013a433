"""The registry of job functions a sandbox worker may run (an allowlist).

A *job* is a plain function that runs inside a worker child process
(:mod:`studio.core.sandbox`)::

    from studio.core.jobs import JobContext, JobOutput, job

    @job("engine.run")
    def engine_run_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
        ...
        return JobOutput(data={"version": ort.__version__}, arrays={"y": y})

Rules:

* ``args`` and ``JobOutput.data`` are JSON (no pickled objects ever cross the
  process boundary); arrays travel as ``.npy`` files and are loaded with
  ``allow_pickle=False`` on both sides, so object arrays are refused.
* The child's working directory is ``ctx.scratch``, an empty directory removed
  after the job; ``TMPDIR`` points there too. Files the caller keeps go to
  ``ctx.out_dir``.
* ``ctx.set_stage("OpenVINO compile")`` tells the parent which phase is running,
  so a crash or timeout message names it.

How the worker finds a job: ``run_job(name)`` resolves ``name`` in the parent to
``"module:qualname"`` -- first in :data:`BUILTIN_JOBS` (a static table, so a
job is found even when its module was never imported in the parent), then in
the names registered by ``@job`` decorators imported so far. The worker imports
that module by name, refuses modules outside the studio's own packages
(:data:`ALLOWED_PACKAGES`) and refuses any function that does not carry the
``@job`` mark for exactly that name. So a request can only ever run a function
somebody decorated as a job.

The self-test job ``sandbox.selftest`` (echo, raise, crash, hang, allocate...)
lives here: the sandbox's tests, its benchmark and a ``doctor`` command use it
to prove that a segfault becomes an error message and not a dead studio.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.engines.table import engine_jobs

__all__ = [
    "ALLOWED_PACKAGES",
    "BUILTIN_JOBS",
    "JobContext",
    "JobFunction",
    "JobOutput",
    "job",
    "load_job",
    "registered_jobs",
    "resolve_job",
]

# Packages whose modules may hold jobs. User code never lands here: a custom op
# is loaded by a job of these packages, from a file named in the job's args.
ALLOWED_PACKAGES: tuple[str, ...] = ("studio", "passes", "diagnostics", "profilers")

# Static table: name -> "module:qualname". Jobs listed here are found without
# importing their module in the parent. Others register with @job at import time.
BUILTIN_JOBS: dict[str, str] = {
    "sandbox.selftest": "studio.core.jobs:selftest_job",
    **engine_jobs(),        # every engine's run/convert/probe jobs, from its row (studio.core.engines.table)
}

_JOB_MARK = "__studio_job__"
_REGISTERED: dict[str, str] = {}


@dataclass(frozen=True)
class JobOutput:
    """What a job returns: JSON-able ``data`` and named numpy ``arrays``.

    Array names may be any string (they often come from models); they are never
    used as file names.
    """

    data: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class JobContext:
    """What the worker hands a job besides its arguments."""

    scratch: Path            # empty directory; the child's cwd; removed afterwards
    out_dir: Path            # where the job may leave files the caller keeps
    stage: str = "job"       # the caller's user-facing stage name
    memory_bytes: int | None = None   # the worker's memory limit
    cpu_threads: int | None = None    # thread count the caller asked for (None: engine default)
    _report: Callable[[dict[str, Any]], None] | None = field(default=None, repr=False, compare=False)

    def set_stage(self, stage: str) -> None:
        """Name the phase now running ("OpenVINO compile"); messages about a
        crash or timeout from here on use this name."""
        if self._report is not None:
            self._report({"stage": str(stage)[:200]})


JobFunction = Callable[[dict, dict, JobContext], "JobOutput | None"]


def job(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a function as the job ``name`` (decorator).

    The function must be a module-level function of a module inside
    :data:`ALLOWED_PACKAGES`; a second, different function under the same name
    is an error.
    """
    if not name or not isinstance(name, str):
        raise ValueError("job name must be a non-empty string")

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        module = fn.__module__
        if module == "__main__" or module.split(".")[0] not in ALLOWED_PACKAGES:
            raise ValueError(f"job '{name}': module '{module}' is outside the studio packages "
                             f"{ALLOWED_PACKAGES}")
        if "<locals>" in fn.__qualname__:
            raise ValueError(f"job '{name}' must be a module-level function")
        target = f"{module}:{fn.__qualname__}"
        known = _REGISTERED.get(name) or BUILTIN_JOBS.get(name)
        if known is not None and known != target:
            raise ValueError(f"job '{name}' is already registered as {known}")
        setattr(fn, _JOB_MARK, name)
        _REGISTERED[name] = target
        return fn

    return decorate


def registered_jobs() -> dict[str, str]:
    """All job names known in this process (static table plus decorators)."""
    return {**BUILTIN_JOBS, **_REGISTERED}


def resolve_job(name: str) -> str:
    """``name`` -> ``"module:qualname"``; KeyError names the known jobs."""
    target = BUILTIN_JOBS.get(name) or _REGISTERED.get(name)
    if target is None:
        raise KeyError(f"unknown job '{name}'; known jobs: {', '.join(sorted(registered_jobs()))}")
    return target


def load_job(name: str, target: str) -> Callable[..., Any]:
    """Import and return the job function (worker side), enforcing the allowlist."""
    module_name, sep, qualname = target.partition(":")
    if not sep or not module_name or not qualname:
        raise PermissionError(f"job '{name}': malformed target")
    if module_name.split(".")[0] not in ALLOWED_PACKAGES:
        raise PermissionError(f"job '{name}': module '{module_name}' is not an allowed job module")
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise PermissionError(f"job '{name}': '{qualname}' not found in {module_name}")
    if not callable(obj) or getattr(obj, _JOB_MARK, None) != name:
        raise PermissionError(f"job '{name}': '{module_name}:{qualname}' is not registered as that job")
    return obj


# --------------------------------------------------------------------------- self-test

def _selftest_action(action: str, args: Mapping[str, Any], arrays: dict[str, np.ndarray],
                     ctx: JobContext) -> JobOutput:
    import signal
    import time

    if action == "echo":
        return JobOutput(data={"data": args.get("data")}, arrays=dict(arrays))
    if action == "info":
        import resource

        fds = {}
        for fd in sorted(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else []:
            try:
                fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                pass
        return JobOutput(data={
            "pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0), "sid": os.getsid(0),
            "cwd": os.getcwd(), "scratch": str(ctx.scratch), "out_dir": str(ctx.out_dir),
            "tmpdir": os.environ.get("TMPDIR"), "rlimit_as": resource.getrlimit(resource.RLIMIT_AS)[0],
            "rlimit_core": resource.getrlimit(resource.RLIMIT_CORE)[0], "fds": fds,
            "scratch_entries": sorted(os.listdir(ctx.scratch)),
            "env": {k: os.environ.get(k) for k in args.get("env", [])},
        })
    if action == "raise":
        raise ValueError(str(args.get("message", "selftest failure")))
    if action == "memory_message":
        raise RuntimeError(str(args.get("message", "std::bad_alloc")))
    if action == "exit":
        os._exit(int(args.get("code", 3)))
    if action == "signal":
        sig = getattr(signal, str(args.get("signal", "SIGSEGV")))
        if args.get("stage"):
            ctx.set_stage(str(args["stage"]))
        if args.get("reserve_to_limit"):
            # native code that segfaults when RLIMIT_AS refuses its next allocation: the address space
            # is reserved up to ``reserve_to_limit`` bytes short of the limit (untouched: no RSS), then the signal
            import resource

            import psutil

            room = resource.getrlimit(resource.RLIMIT_AS)[0] - psutil.Process().memory_info().vms
            reserved = np.empty(max(0, room - int(args["reserve_to_limit"])) // 8, np.float64)
            time.sleep(0.5)        # the parent samples the worker every TICK_S
            del reserved
        os.kill(os.getpid(), sig)
        time.sleep(5)
        raise RuntimeError("signal did not kill the worker")
    if action == "abort":
        os.abort()
    if action == "sleep":
        time.sleep(float(args.get("seconds", 1.0)))
        return JobOutput(data={"slept": float(args.get("seconds", 1.0))})
    if action == "spin":
        if args.get("stage"):
            ctx.set_stage(str(args["stage"]))
        while True:
            pass
    if action == "alloc":
        nbytes = int(args.get("bytes", 8 * 2**30))
        block = np.ones(nbytes // 8, dtype=np.float64)
        return JobOutput(data={"allocated": int(block.nbytes)})
    if action == "write":
        name = str(args.get("name", "relative.txt"))
        with open(name, "w") as fh:  # relative: lands in the scratch dir (the cwd)
            fh.write("scratch")
        kept = ctx.out_dir / "kept.txt"
        kept.write_text("kept")
        return JobOutput(data={"written": os.path.abspath(name), "cwd": os.getcwd()})
    if action == "object_array":
        return JobOutput(arrays={"bad": np.array([{"a": 1}, None], dtype=object)})
    if action == "bad_data":
        return JobOutput(data={"x": object()})
    if action == "stages":
        ctx.set_stage(str(args.get("stage", "second stage")))
        return JobOutput(data={"ok": True})
    raise ValueError(f"unknown selftest action '{action}'")


@job("sandbox.selftest")
def selftest_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    """Sandbox self-test: ``args["action"]`` is one of echo, info, raise,
    memory_message, exit, signal, abort, sleep, spin, alloc, write,
    object_array, bad_data, stages."""
    return _selftest_action(str(args.get("action", "echo")), args, arrays, ctx)
