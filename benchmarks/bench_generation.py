"""Generation profile of the LLaMA-style sample (``profile --generate``): ONNX Runtime (I/O binding) and
OpenVINO interleaved in one worker, prompt lengths 16 and 64, 32 new tokens, batch 1: time to first token,
decode p50/p99, tokens/s, peak memory with the KV cache, and the paired OpenVINO / ORT ratios.
Reference, same run: ORT without I/O binding (the cache through numpy each step), timed in its own profile.
Then fp32 against int4 weight-only, block (group) 16, per engine: ONNX Runtime fp32 vs MatMulNBits, OpenVINO
fp32 vs the NNCF ``compress_weights`` IR (bound to its ONNX source), each pair interleaved in one worker: tokens/s
ratio, TTFT, decode p50, peak memory at both prompt lengths, next-token agreement with fp32 and whether the
greedy tokens are the same.
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
    """fp32 vs int4 weight-only on ONNX Runtime (MatMulNBits) and on OpenVINO (NNCF ``compress_weights`` IR),
    block / group 16: both int4 models built by one ``precision`` run, which also judges each one's next-token
    agreement with fp32 (teacher-forced greedy, :mod:`studio.precision.generation_agreement`); then one
    interleaved generation profile per engine (fp32 and int4 of that engine in the same worker), with the
    peak-memory pass."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="bench-int4-") as tmp:
        report = api.precision(handle, variants=["fp32", "int4", "int4-ov"], weight_options={"block_size": 16},
                               out_dir=Path(tmp) / "variants", latency_budget_s=3.0, generation_steps=16,
                               pool_key="bench")
        options = api.GenerationOptions(prompt_lengths=(16, 64), new_tokens=32, batch_sizes=(1,), generations=7)
        rows: list[list] = []
        for engine, name, label in (("ort", "int4", "ONNX Runtime (MatMulNBits)"),
                                    ("ov", "int4-ov", "OpenVINO (NNCF IR)")):
            v = report.variant(name)
            if v is None or v.status != "ok" or v.path is None:
                rows.append([label, "", f"FAILED: {(v.error if v else 'not built') or v.status}"[:90]] + [""] * 8)
                continue
            agree = (v.generation or {}).get("next_token_agreement")
            q = (api.openvino_ir_target(v.path, handle, "int4") if engine == "ov" else ("int4", api.load(v.path)))
            result = api.profile_generation([("fp32", handle), q], [engine], options, pool_key="bench")
            rows += _pair_rows(label, result, agree)
    print_table("int4 weight-only / fp32, per engine, paired by round in one interleaved run (block 16; random "
                "weights: agreement measures quantization error, not quality)",
                ["engine", "prompt", "fp32 tok/s", "int4 tok/s", "tok/s ratio", "TTFT ms fp32 / int4",
                 "decode p50 ms fp32 / int4", "decode ratio (95 % CI)", "peak RSS MB fp32 / int4",
                 "next-token agreement (4 prompts x 16 steps)", "same greedy tokens"], rows)
    return rows


def _pair_rows(label: str, result, agree: float | None) -> list[list]:
    cases = {v.id: v for v in result.variants}
    rows = [[label, "", f"FAILED {v.id}: {v.error[:80]}"] + [""] * 8 for v in result.variants if v.error]
    for r in result.ratios:
        a, b = (cases[i].case(r.prompt_length, r.batch) for i in (r.baseline_id, r.other_id))
        mb = "/".join(f"{c.peak_rss / 2**20:.0f}" if c.peak_rss else "-" for c in (a, b))
        rows.append([label, r.prompt_length, f"{a.tokens_per_s:.0f}", f"{b.tokens_per_s:.0f}",
                     f"{b.tokens_per_s / a.tokens_per_s:.2f}", f"{a.ttft.p50_ms:.2f} / {b.ttft.p50_ms:.2f}",
                     f"{a.decode.p50_ms:.3f} / {b.decode.p50_ms:.3f}",
                     f"{r.decode.ratio:.2f} ({r.decode.interval_text()})" if r.decode else "-", mb,
                     f"{agree:.3f}" if agree is not None else "-",
                     "yes" if r.tokens_agree else f"no (from token {r.first_difference})"])
    return rows


if __name__ == "__main__":
    main()
