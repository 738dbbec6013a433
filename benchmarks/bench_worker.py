"""Sandbox worker costs: cold start, warm round trip, array transfer, engine start-up.

Run with ``python -m benchmarks.bench_worker`` (prints a table; not a test).
Target: a warm trivial job round trip under 20 ms.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import print_table
from benchmarks.models import tiny_relu
from studio.core.sandbox import Limits, run_job, shutdown_pool

LIMITS = Limits(timeout_s=120, memory_bytes=3 * 2**30)


def _timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.1f}"


def main() -> list[list]:
    rows: list[list] = []
    echo = {"action": "echo"}

    cold = _timed(lambda: run_job("sandbox.selftest", echo, stage="bench", limits=LIMITS, fresh=True,
                                  pool_key="bench-cold"), 5)
    rows.append(["cold spawn -> first trivial job (numpy only)", _ms(cold), "median of 5", ""])

    for job_name, label in (("ort.info", "import onnxruntime"), ("ov.info", "import openvino")):
        first = _timed(lambda: run_job(job_name, {}, stage="bench", limits=LIMITS, fresh=True,
                                       pool_key="bench-cold"), 3)
        rows.append([f"cold spawn + {label} + job", _ms(first), "median of 3", ""])

    run_job("sandbox.selftest", echo, stage="bench", limits=LIMITS, pool_key="bench-warm")
    warm = _timed(lambda: run_job("sandbox.selftest", echo, stage="bench", limits=LIMITS, pool_key="bench-warm"), 200)
    rows.append(["warm trivial job round trip", _ms(warm), "median of 200",
                 f"p90 {sorted(warm)[int(len(warm) * 0.9)] * 1000:.1f} ms"])

    for mb in (4, 100):
        array = np.random.default_rng(0).standard_normal(mb * 2**20 // 8)
        times = _timed(lambda: run_job("sandbox.selftest", echo, {"a": array}, stage="bench", limits=LIMITS,
                                       pool_key="bench-warm"), 5 if mb > 10 else 20)
        rate = 2 * mb / statistics.median(times)  # in and out
        rows.append([f"echo {mb} MB array (to worker and back)", _ms(times), "median", f"{rate:.0f} MB/s"])

    with tempfile.TemporaryDirectory() as tmp:
        from studio.core.engines import get_engine

        model = tiny_relu(Path(tmp) / "relu.onnx")
        feeds = {"x": np.ones((1, 16), np.float32)}
        for engine in ("ort", "ov"):
            adapter = get_engine(engine)
            shutdown_pool(f"bench-{engine}")
            first = _timed(lambda: adapter.run(model, feeds, limits=LIMITS, pool_key=f"bench-{engine}"), 1)
            again = _timed(lambda: adapter.run(model, feeds, limits=LIMITS, pool_key=f"bench-{engine}"), 20)
            rows.append([f"{adapter.label}: tiny model, cold worker", _ms(first), "1 run", ""])
            rows.append([f"{adapter.label}: tiny model, warm worker", _ms(again), "median of 20",
                         "session created each run"])

    for key in ("bench-cold", "bench-warm", "bench-ort", "bench-ov"):
        shutdown_pool(key)
    print_table("Sandbox worker", ["what", "ms", "samples", "note"], rows)
    return rows


if __name__ == "__main__":
    main()
    sys.exit(0)
