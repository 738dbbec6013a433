"""``onnx-studio merge-decoders DECODER WITH_PAST -o MERGED.onnx [--no-verify] [--dim NAME=VALUE] [--json]``:
one model from a decoder and its decoder-with-past under an ``If`` on ``use_cache_branch`` (optimum's
merged convention), verified on a prefill and a decode step before it is written; a pair from two exports, or a
merged model whose outputs differ, is refused in one line (exit 2) and nothing is written."""

from __future__ import annotations

import argparse

from studio import api
from studio.cli.common import parse_dims, print_json
from studio.core.fmt import human_bytes, printable

NAME = "merge-decoders"
HELP = ("Merge a decoder and its decoder-with-past into one model (If on use_cache_branch, weights shared), "
        "verified on a prefill and a decode step before it is written; two exports (vocabulary, sizes, weights) "
        "or outputs that differ are refused, nothing written.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("decoder", help="the decoder without past (optimum's decoder_model.onnx); either order works")
    p.add_argument("with_past", help="the decoder with past (decoder_with_past_model.onnx)")
    p.add_argument("-o", "--output", required=True, help="where to write the merged model (.onnx)")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE",
                   help="sizes of the verification steps, e.g. sequence_length=4 past_sequence_length=16")
    p.add_argument("--no-verify", action="store_true", help="skip the prefill/decode verification (not recommended)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    result = api.merge_decoders(args.decoder, args.with_past, args.output, verify=not args.no_verify,
                                dims=parse_dims(args.dim))
    if args.json:
        print_json(result.to_dict())
        return 0 if result.ok or not result.verified else 1
    print(f"merged     {printable(result.output, 200)} ({result.convention})")
    print(f"weights    {result.initializers_before} initializers -> {result.initializers} "
          f"({human_bytes(result.bytes_saved)} deduplicated)")
    for s in result.steps:
        print(f"{s.name:<10} {'equal' if s.ok else 'DIFFERS'} vs the {s.against}: {printable(s.summary, 200)} "
              f"[{printable(s.label, 80)}]")
    if not result.verified:
        print("verify     skipped (--no-verify)")
        return 0
    return 0 if result.ok else 1
