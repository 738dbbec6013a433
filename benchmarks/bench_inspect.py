"""Inspect a ~1.3 GB BERT-large-like model with external data.

Goal (foundation issue): <= 3 s and <= 0.5 GB peak RSS. Reference, same run:
in-memory ONNX shape inference (onnx.load with weights + infer_shapes).
"""

from __future__ import annotations

import sys

from benchmarks.harness import print_table, run_snippet
from benchmarks.models import BERT_LARGE, cached_bert


def main(reference: bool = True) -> list[list]:
    path = cached_bert(BERT_LARGE)
    size_gb = sum(p.stat().st_size for p in path.parent.iterdir()) / 2**30
    ours = run_snippet("from studio import api",
                       f"""
                       s = api.inspect(api.load({str(path)!r}))
                       result = {{"nodes": s.node_counts.total, "params": s.params.elements}}
                       """)
    rows = [["onnx-studio load + inspect", f"{ours.seconds:.2f}", f"{ours.peak_rss_mb:.0f}",
             f"{ours.peak_rss_mb - ours.baseline_rss_mb:.0f}", ours.result["nodes"], f"{ours.result['params']/1e6:.0f} M"]]
    if reference:
        ref = run_snippet("import onnx",
                          f"""
                          m = onnx.load({str(path)!r})
                          m = onnx.shape_inference.infer_shapes(m, data_prop=True)
                          result = {{"nodes": len(m.graph.node)}}
                          """)
        rows.append(["onnx.load + infer_shapes (in memory)", f"{ref.seconds:.2f}", f"{ref.peak_rss_mb:.0f}",
                     f"{ref.peak_rss_mb - ref.baseline_rss_mb:.0f}", ref.result["nodes"], ""])
        rows.append(["ratio (ours / reference)", f"{ours.seconds / ref.seconds:.3f}",
                     f"{ours.peak_rss_mb / ref.peak_rss_mb:.3f}", "", "", ""])
    print_table(f"Inspect BERT-large-like, {size_gb:.2f} GiB with external data (goal <= 3 s, <= 512 MB)",
                ["run", "seconds", "peak RSS MB", "RSS above imports MB", "nodes", "params"], rows)
    return rows


if __name__ == "__main__":
    main(reference="--no-reference" not in sys.argv)
