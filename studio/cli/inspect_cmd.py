"""onnx-studio inspect MODEL [--json] [--dim NAME=VALUE ...] [--decoder [--kv-length N --batch B --memory 16GiB]]"""

from __future__ import annotations

import argparse

from studio import api
from studio.cli.project_args import add_project_argument, keep_json, with_project
from studio.cli.common import parse_dims, print_json
from studio.core.fmt import human_bytes, human_count, printable
from studio.core.requests import InspectRequest
from studio.core.types import shape_text
from studio.cli import inspect_decoder
from studio.cli.dims_args import model_dims

NAME = "inspect"
HELP = "Summarize a model: opsets, node counts, ops, I/O, params, FLOPs, memory, custom ops."


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_project_argument(p)
    p.add_argument("model", help="path to a .onnx file (external data next to it)")
    p.add_argument("--json", action="store_true", help="print the full summary as JSON (docs/inspect-json.md)")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE",
                   help="value for a symbolic dim, used for FLOPs and memory (repeatable)")
    p.add_argument("--no-nodes", action="store_true", help="with --json: leave out the node and edge lists")

    inspect_decoder.add_arguments(p)


def request_of(args: argparse.Namespace, dims: dict[str, int] | None = None) -> InspectRequest:
    """The one ``InspectRequest`` these flags ask for (``dims``: ``--dim`` merged with the project's)."""
    return InspectRequest(dims=parse_dims(args.dim) if dims is None else dims, decoder=args.decoder,
                          kv_length=args.kv_length, batch=args.batch,
                          memory_gib=api.parse_memory(args.memory) / 2**30 if args.memory else None,
                          kv_dtype=args.kv_dtype)


def _run(args: argparse.Namespace) -> int:
    if args.decoder:
        return inspect_decoder.run(args, request_of(args))
    request = request_of(args, model_dims(args))
    handle = api.load(args.model)
    summary = api.inspect(handle, request)
    keep_json(args, "summary.json", summary.to_dict(include_nodes=not args.no_nodes), "inspect")
    if args.json:
        print_json(summary.to_dict(include_nodes=not args.no_nodes))
        return 0
    s = summary
    nc = s.node_counts
    print(f"model      {printable(s.name)}  sha256 {s.sha256[:16]}  {human_bytes(s.total_bytes)}")
    print(f"producer   {printable(s.producer)} {printable(s.producer_version)}   IR {s.ir_version}")
    print("opsets     " + ", ".join(f"{printable(o.domain) or 'ai.onnx'} {o.version}{'' if o.used else ' (unused)'}"
                                    for o in s.opsets))
    print(f"nodes      {nc.total} ({nc.main} main, {nc.subgraph_nodes} in {nc.subgraphs} subgraphs, "
          f"{nc.function_nodes} in {nc.functions} functions)")
    print(f"params     {human_count(s.params.elements)} ({human_bytes(s.params.bytes)})  "
          + ", ".join(f"{d.dtype}: {human_bytes(d.bytes)}" for d in s.params.by_dtype))
    counted = s.flops.assumed_dims or s.flops.unresolved_dims     # input dims unset: those, not what follows
    names = printable(", ".join(printable(d) for d in counted), 400)
    assumed = f"  (unresolved, counted as 1: {names}; set them with --dim NAME=VALUE)" if counted else ""
    if s.flops.unknown_nodes:
        assumed += f"  ({s.flops.unknown_nodes} node(s) not counted: shapes unknown)"
    ge = "≥ " if s.flops.lower_bound else ""          # a figure with unresolved dims is a lower bound, said so
    print(f"FLOPs      {ge}{human_count(s.flops.flops)}  MACs {ge}{human_count(s.flops.macs)}{assumed}")
    for b in s.flops.branches[:5]:
        print(f"           If {printable(b.node, 120)}: per branch then {human_count(b.then_flops)} / else "
              f"{human_count(b.else_flops)} (the total counts the {b.counted.removesuffix('_branch')} branch)")
    if len(s.flops.branches) > 5:
        print(f"           ... and {len(s.flops.branches) - 5} more If nodes (see --json)")
    mem_ge = "≥ " if counted or s.memory.unknown_tensors else ""
    print(f"memory     weights {human_bytes(s.memory.weights_bytes)}, peak activations "
          f"{mem_ge}{human_bytes(s.memory.peak_activation_bytes)}")
    for label, items in (("inputs", s.inputs), ("outputs", s.outputs)):
        for t in items:
            print(f"{label:<10} {printable(t.name)}  {t.dtype} {printable(shape_text(t.shape))}")
            label = ""
    print("ops        " + ", ".join(f"{printable((o.domain + '::') if o.domain else '')}{printable(o.op_type)} {o.count}"
                                    for o in s.op_histogram[:20]))
    if s.custom_ops:
        print("custom ops " + ", ".join(f"{printable(o.domain)}::{printable(o.op_type)} ({o.count})" for o in s.custom_ops))
    if not s.check_ok:
        print(f"checker    FAILED: {printable(s.check_message or '', 400)}")
    for h in s.dim_hints:
        print(f"dim hint   {printable(h.key, 60)}={h.value} ({h.origin}: {printable(h.source, 80)})")
    if counted and s.dim_hints:
        flags = " ".join(f"--dim {printable(h.key, 60)}={h.value}" for h in s.dim_hints)
        print(f"           the model's own size: onnx-studio inspect {printable(str(args.model), 120)} {flags}")
    for m in s.formula_mismatches[:10]:
        print(f"shapes     wrong exporter formula: {printable(m.text(), 300)}")
    if s.formula_mismatch_count > 10:
        print(f"           ... and {s.formula_mismatch_count - 10} more (see --json)")
    if s.shape_note:
        print(f"shapes     {printable(s.shape_note, 200)}")
    if s.shape_inference_error:
        print(f"shapes     inference incomplete: {printable(s.shape_inference_error, 400)}")
    decoder = inspect_decoder.hint_line(handle)
    if decoder:
        print(decoder)
    return 0


run = with_project(NAME, _run)
