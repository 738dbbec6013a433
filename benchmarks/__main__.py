"""`python -m benchmarks [NAME ...]`: run the benchmarks and print their tables."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = ["bench_inspect", "bench_decoder_inspect", "bench_worker", "bench_graphview", "bench_graph_viewer", "bench_viewers", "bench_graph_page",
              "bench_passes",
              "bench_profile", "bench_generation", "bench_precision", "bench_precision_data", "bench_digits", "bench_engines", "bench_export",
              "bench_batch", "bench_optimizer_strength", "bench_edit", "bench_memory_plan", "bench_large"]


def main(argv: list[str]) -> int:
    from benchmarks.harness import cpu_banner

    names = argv or BENCHMARKS
    print(cpu_banner(), flush=True)
    for name in names:
        module = importlib.import_module(f"benchmarks.{name}")
        module.main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
