"""``onnx-studio inspect MODEL --decoder [--kv-length N] [--batch B] [--memory 16GiB] [--kv-dtype fp16]``:
the decoder's architecture, convention, parameters per block, KV-cache sizes and KV budget, read
without the weights (the model file is parsed, never hashed: a 4 GB decoder answers at once)."""

from __future__ import annotations

import argparse
import sys

from studio import api
from studio.cli.common import bounded, print_json
from studio.cli.project_args import keep_json
from studio.core.fmt import human_bytes, human_count, printable
from studio.core.requests import KV_DTYPES, InspectRequest



def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("decoders (KV cache)")
    g.add_argument("--decoder", action="store_true",
                   help="the KV-cache decoder view: convention, layers, heads, KV bytes per token, KV budget "
                        "(reads no weights)")
    g.add_argument("--kv-length", type=bounded(), metavar="N",
                   help="with --decoder: tokens per sequence, 1 to 2^31-1 (default: context)")
    g.add_argument("--batch", type=bounded(), default=1, metavar="B",
                   help="with --decoder: sequences, 1 to 2^31-1 (default: 1)")
    g.add_argument("--memory", metavar="SIZE", help="with --decoder: memory for weights + KV cache, e.g. 16GiB, "
                                                     "16GB, 512MiB (default: this machine's RAM)")
    g.add_argument("--kv-dtype", choices=sorted(KV_DTYPES), help="with --decoder: budget at this KV dtype "
                                                                   "(default: the model's)")


def hint_line(handle) -> str | None:
    """One line for the plain ``inspect`` output when the model is a decoder."""
    try:
        spec = api.decoder_spec(handle)
    except Exception as exc:   # noqa: BLE001 -- a broken cache is reported, the summary still prints
        return f"decoder    {printable(str(exc), 300)}"
    if spec is None:
        return None
    return (f"decoder    {spec.convention}: {spec.layers} layers, {_heads(spec)}, KV {spec.kv_bytes_per_token()} B "
            "per token (inspect --decoder for the KV budget)")


def _heads(spec) -> str:
    heads = "?" if spec.heads is None else str(spec.heads)
    return f"{heads} heads / {spec.kv_heads} KV heads of {spec.head_dim} ({spec.attention_kind})"


def run(args: argparse.Namespace, request: InspectRequest) -> int:
    report = api.inspect_decoder(args.model, request)
    keep_json(args, "decoder.json", report.to_dict(), "inspect")
    if args.json:
        print_json(report.to_dict())
        return 0
    s, b = report.spec, report.budget
    print(f"decoder    {s.convention}, {s.attention}, {_heads(s)}")
    ctx = next((f.source for f in s.facts if f.name == "context"), "")
    print(f"           layers {s.layers}, hidden {s.hidden or '?'}, vocab {s.vocab or '?'}, context "
          f"{s.context or '?'}{f' ({printable(ctx, 80)})' if ctx else ''}")
    print(f"           positions {s.positions}, norm {s.norm}, weights {printable(s.weights, 80)}, KV {s.kv_dtype} "
          f"{s.cache_layout}")
    first, last = s.cache[0], s.cache[-1]
    past = f"{printable(first.input or '-', 60)} .. {printable(last.input or '-', 60)}" if s.has_past else "none"
    print(f"cache      past {past} -> present {printable(first.output, 60)} .. {printable(last.output, 60)}")
    if s.use_cache_branch:
        print(f"           branch input {printable(s.use_cache_branch, 60)} (true: with past)")
    layers = report.layer_blocks
    others = ", ".join(f"{x.block} {human_count(x.params)}" for x in report.blocks if x.layer is None)
    per = (f"per layer {human_count(layers[0].params)} ({human_bytes(layers[0].bytes)})"
           if layers and len({x.params for x in layers}) == 1 else f"{len(layers)} layers")
    print(f"params     {human_count(report.params)} ({human_bytes(report.weights_bytes)}): {per}; {others}")
    print("KV/token   " + ", ".join(f"{k.dtype} {human_bytes(k.bytes_per_token)}" for k in report.kv))
    print(f"KV at      length {report.length} x batch {report.batch}: "
          + ", ".join(f"{k.dtype} {human_bytes(k.bytes)}" for k in report.kv))
    print(f"budget     {human_bytes(b.memory_bytes)} ({b.memory_source}) - weights {human_bytes(b.weights_bytes)}: "
          f"{human_count(b.max_tokens)} tokens of {b.kv_dtype} KV (batch x length); batch {b.batch} up to length "
          f"{b.max_length}, length {b.length} up to batch {b.max_batch}")
    print("           " + ", ".join(f"length {r.length}: batch {r.max_batch}" for r in b.rows[-6:]))
    if b.preallocation is not None:
        pa = b.preallocation
        print(f"prealloc   {pa.runtime}: {pa.max_length} tokens x batch {b.batch} = {human_bytes(pa.bytes)} "
              f"({printable(pa.source, 160)})")
    for w in b.warnings:
        print(f"warning: {printable(w, 400)}", file=sys.stderr)
    for n in s.notes:
        print(f"note       {printable(n, 300)}")
    for f in s.facts:
        print(f"from       {f.name}={printable(f.value, 20)}: {printable(f.source, 120)}")
    return 0
