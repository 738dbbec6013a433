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
    Its own session and process group, only its pipes, core dumps off, ``RLIMIT_AS``, a scratch
    cwd per job, ``HOME`` in its own folder, an allowlisted environment for user code:
    :mod:`studio.core.sandbox.process`.

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

Configuration
    :func:`default_limits`: defaults, then ``[worker]`` of the first config file found, then
    ``ONNX_STUDIO_TIMEOUT_S`` / ``_MEMORY_GB`` / ``_CPU_THREADS`` (:mod:`studio.core.sandbox.limits`).

Modules (each owns one job; import the public names from this package)
    :mod:`~studio.core.sandbox.limits`    ``Limits`` and ``default_limits`` (config file, environment);
    :mod:`~studio.core.sandbox.messages`  one-line failure texts: ``scrub_message``, exits, memory;
    :mod:`~studio.core.sandbox.process`   one worker process seen from the parent (start, pipes, kill);
    :mod:`~studio.core.sandbox.pool`      pools per ``pool_key``, warm workers, eviction, the job folder;
    :mod:`~studio.core.sandbox.protocol`  ``run_job``: one request and reply, time/memory/cancel enforced.
"""

from __future__ import annotations

from studio.core.sandbox.limits import (GiB, Limits, default_limits, limit_refusal,
                                        require_memory, room_for_weights, scaled_to_model, session_limits,
                                        worker_limit_refusal)
from studio.core.sandbox.messages import scrub_message
from studio.core.sandbox.pool import cancel_all, close_pool, forget_closed, pool_info, shutdown_all, shutdown_pool
from studio.core.sandbox.process import MINIMAL_ENV_NAMES, MINIMAL_ENV_PREFIXES
from studio.core.sandbox.protocol import JobResult, run_job

__all__ = [
    "GiB",
    "JobResult",
    "Limits",
    "MINIMAL_ENV_NAMES",
    "MINIMAL_ENV_PREFIXES",
    "cancel_all",
    "default_limits",
    "limit_refusal",
    "pool_info",
    "require_memory",
    "room_for_weights",
    "run_job",
    "scaled_to_model",
    "scrub_message",
    "session_limits",
    "shutdown_all",
    "shutdown_pool",
    "close_pool",
    "forget_closed",
    "worker_limit_refusal",
]
