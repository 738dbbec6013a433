"""Generation profile of the LLaMA-style sample (``profile --generate``): ONNX Runtime (I/O binding) and
OpenVINO interleaved in one worker, prompt lengths 16 and 64, 32 new tokens, batch 1: time to first token,
decode p50/p99, tokens/s, peak memory with the KV cache, and the paired OpenVINO / ORT ratios.
Reference, same run: ORT without I/O binding (the cache through numpy each step), timed in its own profile.
Then fp32 against int4 weight-only (the ``quantize-weight-only`` pass: MatMulNBits, block 16) on ONNX Runtime,
interleaved in one worker: the tokens/s ratio and whether both generate the same tokens. OpenVINO's int4
(NNCF ``compress_weights``) is an IR, judged by ``precision --variants int4-ov``, not timed here.
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
    int4_rows = _int4_rows(api, handle)
    return rows + ratio_rows + int4_rows


def _int4_rows(api, handle) -> list[list]:
    """fp32 vs int4 weight-only on ONNX Runtime, one interleaved generation profile."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="bench-int4-") as tmp:
        built = api.optimize(handle, passes=["quantize-weight-only"],
                             pass_options={"quantize-weight-only": {"bits": 4, "block_size": 16}},
                             out_path=Path(tmp) / "llama_int4.onnx", pool_key="bench")
        if not built.ok or built.output is None:
            rows = [["int4 weight-only", "", f"FAILED: {built.summary()[:80]}", "", "", "", "", ""]]
            print_table("fp32 vs int4 weight-only (ONNX Runtime)", ["variant", "", "error", "", "", "", "", ""], rows)
            return rows
        int4 = api.load(built.output)
        options = api.GenerationOptions(prompt_lengths=(16, 64), new_tokens=32, batch_sizes=(1,), generations=7,
                                        memory=False)
        result = api.profile_generation([("fp32", handle), ("int4", int4)], ["ort"], options, pool_key="bench")
    cases = {v.id: v for v in result.variants}
    errors = [[v.id, "", f"FAILED: {v.error[:80]}", "", "", ""] for v in result.variants if v.error]
    rows = []
    for r in result.ratios:
        fp32, q = (cases[i].case(r.prompt_length, r.batch) if i in cases else None for i in (r.baseline_id, r.other_id))
        rows.append([r.prompt_length, f"{fp32.tokens_per_s:.0f}" if fp32 else "-", f"{q.tokens_per_s:.0f}" if q else "-",
                     f"{r.decode.ratio:.2f} ({r.decode.interval_text()})" if r.decode else "-",
                     f"{r.ttft.ratio:.2f}" if r.ttft else "-",
                     "yes" if r.tokens_agree else f"no (from token {r.first_difference})"])
    rows += errors
    print_table("int4 weight-only / fp32 on ONNX Runtime, paired by round (random weights: tokens may differ)",
                ["prompt", "fp32 tokens/s", "int4 tokens/s", "decode ratio", "TTFT ratio", "same tokens"], rows)
    return rows


if __name__ == "__main__":
    main()
