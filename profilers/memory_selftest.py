"""Self-test of the leak check (tests only): the memory measurement of
:mod:`profilers.memory` on a synthetic numpy workload that, when asked, keeps
a new buffer alive every iteration (a planted leak).

No CLI or UI path builds this job and no user input reaches its arguments; it
exists so tests can prove, through the real worker path, that the leak check
flags a leak and passes a clean run. It lives in its own module so that the
profiler's filter (which hides :mod:`profilers.memory`'s own bookkeeping from
the allocation sites) does not hide the planted leak.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from profilers.memory import measure_memory
from studio.core.jobs import JobContext, JobOutput, job

_planted: list[bytearray] = []   # the self-test's "leak" lives here, in the worker only


@job("profile.memory_selftest")
def memory_selftest_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    """Self-test (tests only): a numpy workload; ``leak_bytes`` > 0 keeps a new
    buffer alive every iteration. Not reachable from the CLI or the UI."""
    leak = max(0, int(args.get("leak_bytes", 0)))
    sleep_s = max(0.0, float(args.get("sleep_s", 0.0)))   # a slow model: the RSS sampler runs many times per inference
    _planted.clear()
    x = np.linspace(0, 1, 4096, dtype=np.float32)

    def open_fn() -> Callable[[], Any]:
        def infer() -> Any:
            y = np.tanh(x) * 2.0
            if leak:
                _planted.append(bytearray(leak))
            if sleep_s:
                time.sleep(sleep_s)
            return y
        return infer

    data = measure_memory(open_fn, warmup=int(args.get("warmup", 10)), iterations=int(args.get("iterations", 200)),
                          sample_interval_s=float(args.get("sample_interval_s", 0.005)))
    _planted.clear()
    return JobOutput(data=data)
