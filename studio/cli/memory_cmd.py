"""onnx-studio memory MODEL [--dim NAME=VALUE ...] [--json] [--no-measure] [--reorder [-o OUT]] [--top N]

The memory plan: every tensor's lifetime in ORT's execution order, the peak with its op and tensors,
the best-fit arena beside what ORT and OpenVINO really allocate, the KV cache's share for a decoder (its past
length is a dim: --dim past_sequence_length=128), and with --reorder the memory-aware node order as a
verified pass, with the peak before and after."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from studio import api
from studio.cli.common import bounded, parse_dims, print_json
from studio.cli.dims_args import model_dims
from studio.core.errors import StudioError
from studio.core.fmt import human_bytes, printable
from studio.core.requests import MemoryRequest

NAME = "memory"
HELP = ("The memory plan: tensor lifetimes, the peak and its tensors, ORT's and OpenVINO's measured "
        "activation memory, the reorder what-if.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="path to a .onnx file (external data next to it)")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE",
                   help="value for a symbolic dim (repeatable; INPUT[AXIS]=VALUE for an unnamed one); a decoder's "
                        "KV cache is sized by its past length, e.g. --dim past_sequence_length=128")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--no-measure", action="store_true",
                   help="skip the measurement of what ORT and OpenVINO allocate (a child process each; needs a "
                        "C compiler)")
    p.add_argument("--reorder", action="store_true",
                   help="also run reorder-for-memory (a verified pass) and show the peak before and after")
    p.add_argument("-o", "--output", help="with --reorder: where to keep the reordered model (default: not kept)")
    p.add_argument("--top", type=int, default=8, metavar="N", help="tensors at the peak to list (default 8)")
    p.add_argument("--measure-timeout", type=bounded(1, 86_400), default=120, metavar="S",
                   help="seconds each engine's measurement (and ORT's optimized graph) may take before it is "
                        "stopped as too large to measure (default 120; the engines run side by side)")
    p.add_argument("--no-engine-graph", action="store_true",
                   help="skip the plan over ORT's optimized graph (ORT as users run it: ORT_ENABLE_ALL)")


def _mib(n: int | None) -> str:
    return human_bytes(n) if n is not None else "?"


def _print_report(r, top: int, title: str = "") -> None:
    d = r.to_dict()
    ge = "≥ " if d["lower_bound"] else ""
    dims = ", ".join(f"{printable(k, 60)}={v}" for k, v in d["dims"].items())
    print(f"{title}model      {printable(d['model'])}" + (f"  at {printable(dims, 300)}" if dims else ""))
    print(f"{title}peak       {ge}{_mib(d['peak_bytes'])} at step {d['peak_step'] + 1} of {len(d['order'])}: "
          f"{printable(d['peak_node'] or '-', 160)}")
    print(f"{title}arena      {ge}{_mib(d['arena_bytes'])} best-fit for intermediates (max live "
          f"{_mib(d['activation_peak_bytes'])}); weights {_mib(d['weights_bytes'])}")
    for e in r.engine_plans:
        if e.engine == "openvino":
            print(f"{title}compiled   " + (f"openvino: not planned ({printable(e.error or '', 200)})" if e.plan is None
                  else f"{printable(e.what, 300)}: workspace {_mib(e.plan.arena_bytes)}, peak {_mib(e.plan.peak_bytes)} "
                       f"at {printable(e.plan.peak_node or '-', 80)}"))
            continue
        if e.plan is None:
            print(f"{title}as run     {e.engine} (ORT_ENABLE_ALL): not planned ({printable(e.error or '', 200)})")
            continue
        changed = ", ".join(f"{printable(op, 40)} {a}->{b}" for op, a, b in e.op_changes[:5])
        print(f"{title}as run     {e.engine} (ORT_ENABLE_ALL, its optimized graph of {e.nodes} nodes, {e.source_nodes} "
              f"as written): arena {_mib(e.plan.arena_bytes)}, peak {_mib(e.plan.peak_bytes)} at "
              f"{printable(e.plan.peak_node or '-', 80)}" + (f"; ops {changed}" if changed else ""))
    for m in r.measured:
        if m.measured_bytes is None:
            print(f"{title}measured   {m.engine}: not measured ({printable(m.error or '', 200)})")
        else:
            as_run = r.engine_plans and m.engine == "onnxruntime"
            compiled = any(e.engine == "openvino" and e.plan is not None for e in r.engine_plans)
            extra = " by the plan over ORT's optimized graph (default options)" if as_run else \
                " by the plan of OpenVINO's compiled graph" if compiled and m.engine == "openvino" else "" \
                if m.predicted_bytes == r.plan.arena_bytes else \
                " for that run: optimizations off, the nodes computed from weights run too"
            err = f"{m.relative_error * 100:+.1f} %" if m.relative_error is not None else "error n/a"
            if m.predicted_bytes is None:
                extra, err = "; no plan of ORT's optimized graph to compare it with", "error n/a"
            print(f"{title}measured   {m.engine}: {_mib(m.measured_bytes)} (predicted {_mib(m.predicted_bytes)}"
                  f"{extra}, {err})")
    if r.kv_cache:
        kv = r.kv_cache
        print(f"{title}KV cache   past {_mib(kv.past_bytes)} ({len(kv.past_inputs)} inputs at "
              f"{printable(kv.past_length_dim, 60)}={kv.past_length}), present {_mib(kv.present_bytes)}")
    for name, nbytes in r.plan.peak_tensors[:top]:
        print(f"{title}  at peak  {_mib(nbytes):>10}  {printable(name, 160)}")
    if len(r.plan.peak_tensors) > top:
        print(f"{title}           ... and {len(r.plan.peak_tensors) - top} more (--top N, or --json)")
    for note in r.notes:
        print(f"{title}note       {printable(note, 600)}")


def request_of(args: argparse.Namespace, dims: dict[str, int] | None = None) -> MemoryRequest:
    """The one ``MemoryRequest`` these flags ask for (``dims``: ``--dim`` merged with the model's setting)."""
    return MemoryRequest(dims=parse_dims(args.dim) if dims is None else dims, measure=not args.no_measure,
                         engine_graph=not args.no_engine_graph, reorder=args.reorder,
                         measure_timeout_s=args.measure_timeout)


def run(args: argparse.Namespace) -> int:
    if args.top < 0:
        raise StudioError("--top must be 0 or more")
    if args.output and not args.reorder:
        raise StudioError("-o/--output keeps the reordered model: give it with --reorder")
    request = request_of(args, model_dims(args))
    handle = api.load(args.model)
    if not request.reorder:
        report = api.memory_plan(handle, request)
        if args.json:
            print_json(report.to_dict())
        else:
            _print_report(report, args.top)
        return 0
    with tempfile.TemporaryDirectory(prefix="studio-reorder-") as tmp:
        out = Path(args.output) if args.output else Path(tmp, "reordered.onnx")
        r = api.memory_reorder(handle, request, out)
        if args.json:
            d = r.to_dict()
            if not args.output:
                d["output"] = None          # the temporary copy is gone when the command ends
            print_json(d)
        else:
            _print_report(r.before, args.top)
            if r.modified:
                print(f"reorder    {'verified' if r.verified else 'NOT verified'}: {printable(r.verification, 200)}")
            for note in r.notes:
                print(f"reorder    {printable(note, 300)}")
            if r.after is not None:
                b, a = r.before, r.after
                print(f"reorder    predicted peak {_mib(b.peak_bytes)} -> {_mib(a.peak_bytes)}, arena "
                      f"{_mib(b.plan.arena_bytes)} -> {_mib(a.plan.arena_bytes)}")
                for mb, ma in zip(b.measured, a.measured):
                    if mb.measured_bytes is not None and ma.measured_bytes is not None:
                        print(f"reorder    measured {mb.engine} {_mib(mb.measured_bytes)} -> {_mib(ma.measured_bytes)}")
                if args.output:
                    print(f"reorder    written to {printable(str(out), 200)}")
            else:
                print("reorder    no lower-peak order found: the model is left as it is")
    return 0 if (r.after is not None or not r.modified) else 1
