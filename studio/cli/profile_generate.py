"""``onnx-studio profile MODEL [MODEL2 ...] [IR.xml ...] --generate [--prompt-lengths 16,64] [--new-tokens 32] [--batch 1]
[--generations 5] [--engine ort,ov] [--target NAME] [--json]``: a KV-cache decoder's generation profile (greedy decoding
with the cache fed back): time to first token, decode p50/p99, tokens/s and peak memory per prompt length
and batch, the variants interleaved, with ratios against the first one. An OpenVINO IR (``.xml`` beside its
``.bin``, e.g. NNCF int4) is run on OpenVINO bound to the first ONNX model given (its decoder contract)."""

from __future__ import annotations

import contextlib

import argparse
import sys
from pathlib import Path

from studio import api
from studio.batch import facade as batch_api
from studio.cli import remote_args
from studio.cli.common import positive_ints, print_json
from studio.cli.project_args import keep_json
from studio.core import outputs
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.fmt import human_bytes, printable
from studio.core.requests import GenerationRequest


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("generation (KV-cache decoders; --batch gives the batch sizes)")
    g.add_argument("--generate", action="store_true",
                   help="profile a greedy generation loop with the KV cache: TTFT, decode p50/p99, tokens/s, "
                        "peak memory per prompt length and batch")
    g.add_argument("--prompt-lengths", type=positive_ints, metavar="16,64", help="with --generate: prompt lengths "
                                                                         "(default 16,64)")
    g.add_argument("--new-tokens", type=int, default=32, metavar="N",
                   help="with --generate: tokens generated per sequence, the first by the prefill (default 32)")
    g.add_argument("--generations", type=int, default=5, metavar="N",
                   help="with --generate: timed generations per variant and case, one per interleaved round "
                        "(default 5)")
    g.add_argument("--no-io-binding", action="store_true",
                   help="with --generate: ONNX Runtime copies the cache through numpy each step (default: I/O "
                        "binding keeps it as OrtValues)")
    g.add_argument("--no-generation-memory", action="store_true",
                   help="with --generate: skip the peak-memory pass (a fresh worker per variant)")


def request_of(args: argparse.Namespace) -> GenerationRequest:
    """The one ``GenerationRequest`` these flags ask for, run here or on a ``--target`` alike."""
    return GenerationRequest(engines=tuple(args.engine or ["ort"]), prompt_lengths=tuple(args.prompt_lengths or (16, 64)),
                             new_tokens=args.new_tokens, batch_sizes=tuple(args.batch or (1,)),
                             generations=args.generations, seed=args.seed, io_binding=not args.no_io_binding,
                             memory=not args.no_generation_memory, timeout_s=args.timeout, memory_gb=args.memory_gb)


def _options(args: argparse.Namespace):  # noqa: ANN202 - profilers.generation_profile.GenerationOptions
    return api.GenerationOptions(**request_of(args).options)   # its checks, before any model loads


# profile flags a generation profile does not use: refused rather than silently ignored
_NOT_WITH_GENERATE = (("inputs", "--inputs"), ("images", "--images"), ("dataset", "--dataset"), ("trace", "--trace"),
                      ("per_op", "--per-op"), ("memory", "--memory"), ("threads", "--threads"),
                      ("concurrency", "--concurrency"), ("nsys", "--nsys"), ("duration", "--duration"),
                      ("iterations", "--iterations"))


def run(args: argparse.Namespace) -> int:
    given = [flag for name, flag in _NOT_WITH_GENERATE if getattr(args, name, None)]
    if given:
        raise StudioError(f"{given[0]} does not apply to --generate (a generation profile draws seeded prompts, "
                          "and reports its own memory); drop it or profile without --generate",
                          code=ErrorCode.BAD_OPTION)
    options = _options(args)
    irs = [m for m in args.models if str(m).lower().endswith(".xml")]
    models = [m for m in args.models if m not in irs]
    if irs and not models:
        raise StudioError("an OpenVINO IR (.xml) is profiled bound to the ONNX decoder it came from: list that "
                          ".onnx first, e.g. profile decoder.onnx decoder_int4.xml --generate --engine ov",
                          code=ErrorCode.BAD_OPTION)
    handles = [api.load(m) for m in models]
    names = [h.name for h in handles] + [Path(m).name for m in irs]
    labels = [f"{i}:{printable(n, 40)}" if names.count(n) > 1 else printable(n, 60) for i, n in enumerate(names)]
    chosen = list(zip(labels, handles)) + [api.openvino_ir_target(m, handles[0], labels[len(handles) + i])
                                           for i, m in enumerate(irs)]
    progress = None
    if not args.json and sys.stderr.isatty():
        def progress(fraction: float, message: str) -> None:
            sys.stderr.write(f"\r{fraction:4.0%} {printable(message, 90):<100}")
            sys.stderr.flush()
    targets = remote_args.targets_of(args)
    if targets and irs:
        raise StudioError("an OpenVINO IR (.xml) is profiled on this machine only; drop --target or the .xml",
                          code=ErrorCode.BAD_OPTION)
    if targets:                     # --target/--targets: the same generation profile on each machine
        measured = batch_api.generate_on(targets, list(zip(labels, handles)), request_of(args),
                                         cluster=args.cluster, tls=remote_args.tls_of(args), pool_key="cli")
        if args.json:
            print_json({"targets": [m.to_dict() for m in measured]})
        else:
            for i, m in enumerate(measured):
                print(("\n" if i else "") + remote_args.measured_line(m))
                _print(m.result)
        return 0 if all(m.result.ok for m in measured) else 1
    keep = Path(args.out_dir) if args.out_dir else None
    # --out-dir on a full or read-only disk or past `ulimit -f`: one line naming it, and what this run wrote
    # there goes again (as profile --out-dir does).
    with outputs.writing_folder(keep) if keep is not None else contextlib.nullcontext():
        result = api.profile_generation(chosen, args.engine or ["ort"], options, out_dir=keep,
                                        pool_key="cli", on_progress=progress)
        if progress is not None:
            sys.stderr.write("\r" + " " * 106 + "\r")
        data = result.to_dict()
        keep_json(args, "generation.json", data, "profile")
        if keep is not None:
            outputs.write_json(keep / "generation.json", data, indent=1, default=None)
    if args.json:
        print_json(data)
    else:
        _print(result)
    return 0 if result.ok else 1


def _ms(x: float | None) -> str:
    return "-" if x is None else (f"{x:.3f}" if x < 100 else f"{x:.1f}")


def _print(result) -> None:  # noqa: ANN001 - profilers.generation_profile.GenerationProfile
    o = result.options
    print(f"generate {len(result.variants)} variant(s), {o.new_tokens} new tokens, {o.generations} timed generations "
          f"each, {'interleaved' if result.interleaved else 'not interleaved'}; greedy, KV cache fed back")
    for d in result.decoders:
        print(f"decoder  {printable(d['target'], 60)}: {d['convention']}, {d['layers']} layers, KV "
              f"{d['kv_bytes_per_token']} B per token, context {d['context'] or '?'}")
    m = result.machine
    print(f"machine  {printable(m.cpu, 60)}, {m.cpu_count} CPUs"
          + (f", load {m.load_before[0]:.2f} -> {m.load_after[0]:.2f}" if m.load_before and m.load_after else ""))
    for w in result.warnings:
        print(f"warning  {printable(w, 300)}")
    print(f"\n{'variant':<34} {'prompt':>6} {'batch':>5} {'TTFT':>8} {'dec p50':>8} {'dec p99':>8} {'tok/s':>9} "
          f"{'peak RSS':>10} {'KV cache':>9}   (ms)")
    for v in result.variants:
        name = printable(v.id, 34)
        if v.error:
            print(f"{name:<34} FAILED ({v.error_kind}): {printable(v.error, 300)}")
            continue
        for c in v.cases:
            if not c.ok:
                print(f"{name:<34} {c.prompt_length:>6} {c.batch:>5} FAILED: {printable(c.error or '', 200)}")
                continue
            print(f"{name:<34} {c.prompt_length:>6} {c.batch:>5} {_ms(c.ttft.p50_ms):>8} {_ms(c.decode.p50_ms):>8} "
                  f"{_ms(c.decode.p99_ms):>8} {c.tokens_per_s or 0:>9.1f} "
                  f"{human_bytes(c.peak_rss) if c.peak_rss else '-':>10} "
                  f"{human_bytes(c.kv_cache_bytes) if c.kv_cache_bytes else '-':>9}")
        for note in v.notes:
            print(f"  {v.id}: {printable(note, 300)}")
        if v.details.get("io_binding"):
            print(f"  {v.id}: ONNX Runtime I/O binding (the cache stays in OrtValues between steps)")
    if result.ratios:
        print(f"\nratios vs {result.ratios[0].baseline_id} (median of per-round ratios, 95 % CI; < 1 is faster)")
        for r in result.ratios:
            parts = []
            for what, est in (("TTFT", r.ttft), ("decode", r.decode)):
                if est is not None:
                    parts.append(f"{what} {est.ratio:.3f} ({printable(est.interval_text(), 60)})")
            same = "same tokens" if r.tokens_agree else f"tokens differ from index {r.first_difference}"
            print(f"  {r.other_id:<24} prompt {r.prompt_length} batch {r.batch}: {'; '.join(parts)}; {same}")
