"""Inspect a ~1.1 G-parameter LLaMA-shaped decoder (TinyLlama sizes, onnxruntime-genai convention,
4.4 GB of float32 external data) as a decoder: architecture, KV budget, without reading its weights.

The data file is written sparse (all zeros, instantly): ``inspect --decoder`` never opens it
(tests/inspect/test_decoder.py watches it with inotify), so its contents do not change the figures.
Reference, same run: parsing the model file alone (``onnx.load(load_external_data=False)``), the floor.
"""

from __future__ import annotations

from benchmarks.harness import print_table, run_snippet
from benchmarks.models import CACHE


def main(reference: bool = True) -> list[list]:
    from sample_models.decoders import write_large_decoder

    folder = CACHE / "decoder-1b-genai-sparse"
    path = folder / "model.onnx"
    if not path.exists():
        write_large_decoder(folder, fill="zeros")
    data_gb = (folder / "model.onnx.data").stat().st_size / 2**30
    ours = run_snippet("from studio import api; import studio.inspect.kv_cache  # imports not timed",
                       f"""
                       r = api.inspect_decoder({str(path)!r}, memory="16GiB", batch=4)
                       result = {{"layers": r.spec.layers, "params": r.params, "kv": r.spec.kv_bytes_per_token(),
                                  "max_tokens": r.budget.max_tokens}}
                       """)
    rows = [["onnx-studio inspect --decoder", f"{ours.seconds:.3f}", f"{ours.peak_rss_mb:.0f}",
             f"{ours.peak_rss_mb - ours.baseline_rss_mb:.0f}", ours.result["layers"],
             f"{ours.result['params'] / 1e9:.2f} G", ours.result["kv"]]]
    if reference:
        ref = run_snippet("import onnx",
                          f"""
                          m = onnx.load({str(path)!r}, load_external_data=False)
                          result = {{"nodes": len(m.graph.node)}}
                          """)
        rows.append(["onnx.load without external data (floor)", f"{ref.seconds:.3f}", f"{ref.peak_rss_mb:.0f}",
                     f"{ref.peak_rss_mb - ref.baseline_rss_mb:.0f}", "", "", ""])
    print_table(f"Inspect a 1.1 G-parameter decoder as a decoder, {data_gb:.2f} GiB of external data never read",
                ["run", "seconds", "peak RSS MB", "RSS above imports MB", "layers", "params", "KV B/token"], rows)
    return rows


if __name__ == "__main__":
    import sys

    main(reference="--no-reference" not in sys.argv)
