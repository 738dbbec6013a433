"""Generation profile of the LLaMA-style sample (``profile --generate``): ONNX Runtime (I/O binding) and
OpenVINO interleaved in one worker, prompt lengths 16 and 64, 32 new tokens, batch 1: time to first token,
decode p50/p99, tokens/s, peak memory with the KV cache, and the paired OpenVINO / ORT ratios.
Reference, same run: ORT without I/O binding (the cache through numpy each step), timed in its own profile.
The sample carries random weights: the figures are about speed and memory, not text."""

from __future__ import annotations

from benchmarks.harness import print_table


def _rows(result, label_suffix: str = "") -> list[list]:
    rows = []
    for v in result.variants:
        if v.error:
            rows.append([v.variant.engine.label + label_suffix, "", f"FAILED: {v.error[:80]}", "", "", "", "", ""])
            continue
        for c in v.cases:
            rows.append([v.variant.engine.label + label_suffix, c.prompt_length, f"{c.ttft.p50_ms:.3f}",
                         f"{c.decode.p50_ms:.3f}", f"{c.decode.p99_ms:.3f}", f"{c.tokens_per_s:.0f}",
                         f"{c.peak_rss / 2**20:.0f}" if c.peak_rss else "-",
                         f"{c.kv_cache_bytes / 2**10:.1f}" if c.kv_cache_bytes else "-"])
    return rows


def main() -> list[list]:
    from studio import api
    from sample_models.catalog import SAMPLE_DIR

    handle = api.load(SAMPLE_DIR / "llama_optimum.onnx")
    options = api.GenerationOptions(prompt_lengths=(16, 64), new_tokens=32, batch_sizes=(1,), generations=7)
    result = api.profile_generation([handle], ["ort", "ov"], options, pool_key="bench")
    plain = api.profile_generation([handle], ["ort"], api.GenerationOptions(
        prompt_lengths=(16, 64), new_tokens=32, generations=7, io_binding=False, memory=False), pool_key="bench")
    rows = _rows(result) + _rows(plain, " (no I/O binding, separate run)")
    print_table("Generation, llama_optimum sample (3 layers, GQA 6/2 heads, random weights), 32 new tokens, batch 1",
                ["engine", "prompt", "TTFT ms", "decode p50 ms", "decode p99 ms", "tokens/s", "peak RSS MB",
                 "KV cache KiB"], rows)
    ratio_rows = [[r.other_id, r.prompt_length, f"{r.ttft.ratio:.2f} ({r.ttft.interval_text()})" if r.ttft else "-",
                   f"{r.decode.ratio:.2f} ({r.decode.interval_text()})" if r.decode else "-",
                   "yes" if r.tokens_agree else f"no (from {r.first_difference})"] for r in result.ratios]
    print_table("OpenVINO / ONNX Runtime, paired by round (< 1: OpenVINO faster)",
                ["variant", "prompt", "TTFT ratio", "decode ratio", "same tokens"], ratio_rows)
    return rows + ratio_rows


if __name__ == "__main__":
    main()
