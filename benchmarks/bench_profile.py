"""Profiler harness overhead: the studio's timing loop (``profilers.latency.runner_loop``,
what the latency job runs) against a bare ``session.run`` loop on the same session,
per iteration. Target: <= 5 % on a tiny model (the worst case: the model
itself takes a few microseconds).

Measured side by side in one process, interleaved: each round runs a block of the
bare loop and a block of the harness in shuffled order, and the ratio is the median
of the per-round ratios with a 95 % bootstrap interval (``profilers.stats``), so the
machine's drift cancels. Run with ``python -m benchmarks.bench_profile``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import print_table
from benchmarks.models import tiny_relu
from profilers.latency import runner_loop
from profilers.runners import open_runner
from profilers.stats import paired_ratio
from profilers.variants import parse_engine

ROUNDS = 200
TARGET = 1.05


def _bare(engine: str, runner) -> callable:  # noqa: ANN001
    """The loop a user would write by hand, on the same session / request."""
    if engine == "onnxruntime":
        run, feeds = runner.session.run, dict(runner.feeds)  # noqa: F841

        def loop(n: int) -> None:
            for _ in range(n):
                run(None, feeds)
    else:
        infer = runner.request.infer

        def loop(n: int) -> None:
            for _ in range(n):
                infer()
    return loop


def measure(model: Path, feeds: dict, key: str, block: int) -> list:
    spec = parse_engine(key).with_threads(1)   # one intra-op thread: the harness cost, not thread-pool jitter
    with tempfile.TemporaryDirectory() as tmp:
        runner = open_runner(str(model), spec.to_args(), feeds, out_dir=Path(tmp))
        bare = _bare(spec.engine, runner)
        harness = lambda n: runner_loop(runner, n)  # noqa: E731 - exactly what the latency job runs
        bare(block)
        harness(block)
        rng = np.random.default_rng(0)
        per_iter = {"bare": [], "harness": []}
        for _ in range(ROUNDS):
            for name in rng.permutation(["bare", "harness"]):
                fn = bare if name == "bare" else harness
                start = time.perf_counter_ns()
                fn(block)
                per_iter[name].append((time.perf_counter_ns() - start) / block)
        runner.close()
    ratio = paired_ratio(per_iter["bare"], per_iter["harness"])
    bare_ns, harness_ns = float(np.median(per_iter["bare"])), float(np.median(per_iter["harness"]))
    verdict = "ok" if ratio.ratio <= TARGET else "OVER TARGET"
    return [f"{spec.label}, {model.stem}", f"{bare_ns / 1000:.2f}", f"{harness_ns / 1000:.2f}",
            f"{harness_ns - bare_ns:+.0f}", f"{ratio.ratio:.3f} [{ratio.ci_low:.3f}–{ratio.ci_high:.3f}]",
            f"{ROUNDS} x {block}", verdict]


def main() -> list[list]:
    import onnx

    from studio.core.feeds import input_specs, random_feeds

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tiny = tiny_relu(Path(tmp) / "relu16.onnx")
        cnn = Path(__file__).resolve().parents[1] / "sample_models" / "cnn_unfused.onnx"
        for model, block in ((tiny, 300), (cnn, 30)):
            feeds = random_feeds(input_specs(onnx.load(str(model), load_external_data=False)))
            for key in ("ort", "ov"):
                rows.append(measure(model, feeds, key, block))
    print_table("Profiler harness overhead per iteration (interleaved, same process)",
                ["engine, model", "bare us/iter", "harness us/iter", "overhead ns", "ratio [95% CI]",
                 "rounds x block", f"target <= {TARGET}"], rows)
    return rows


if __name__ == "__main__":
    main()
    sys.exit(0)
