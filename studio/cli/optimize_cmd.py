"""onnx-studio optimize MODEL -o OUT [--preset NAME | --passes a,b,c] [--dim NAME=VALUE] [--set PASS.KEY=VALUE]
[--on-failure stop|revert] [--no-verify] [--keep-partial] [--report report.json] [--json] [--compare-peers]
[--target NAME --cluster ADDR];  onnx-studio optimize --list"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from studio import api
from studio.batch import facade as batch_api
from studio.cli import remote_args
from studio.cli.project_args import add_project_argument, keep_json, kept, with_project
from studio.cli.common import parse_dims, parse_options, print_json
from studio.core import outputs
from studio.core.error_codes import ErrorCode
from studio.core.errors import SameContentError, StudioError
from studio.core.requests import OptimizeRequest
from studio.core.fmt import human_count, printable
from studio.cli.dims_args import model_dims

NAME = "optimize"
HELP = "Run verified optimization passes (a preset or a list) and save the result."


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_project_argument(p)
    p.add_argument("model", nargs="?", help="path to a .onnx file (external data next to it)")
    p.add_argument("-o", "--output", help="where to write the optimized model (.onnx; weights go next to it)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--preset", help="a preset: safe (default); ort (for ONNX Runtime: its result may be slower "
                       "in OpenVINO, hard-swish as HardSigmoid*x below opset 14); openvino (peer results judged by "
                       "OpenVINO's compiled op count); tensorrt (see --list)")
    group.add_argument("--passes", help="comma-separated pass names, run in this order (see --list)")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE",
                   help="value for a symbolic dim: used for verification inputs, and fixed by fix-input-shapes "
                        "(INPUT[AXIS]=VALUE sets an unnamed dim of the verification inputs)")
    p.add_argument("--set", action="append", metavar="PASS.KEY=VALUE", dest="options",
                   help="a pass option, e.g. convert-opset.target=17 or fold-constants.max_growth=2 (repeatable)")
    p.add_argument("--on-failure", choices=("stop", "revert"), default="stop",
                   help="when a pass fails verification: stop there (default) or undo that pass and go on")
    p.add_argument("--inputs", metavar="X.npz", help="real inputs for verification (keys = input names, or "
                   "NAME/0, NAME/1... for several samples) instead of seeded ones")
    p.add_argument("--dump-dir", metavar="DIR", help="save the model after every pass in DIR/NN-pass/model.onnx")
    p.add_argument("--no-verify", action="store_true", help="skip verification (not recommended)")
    p.add_argument("--keep-partial", action="store_true",
                   help="when the pipeline does not finish (a pass failed, was reverted or skipped), write the last "
                        "verified model as OUT.partial.onnx (default: nothing is written)")
    p.add_argument("--time-budget", type=float, metavar="SECONDS",
                   help="skip the passes that would start after this many seconds")
    p.add_argument("--report", help="also write the full report (JSON) to this file")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--list", action="store_true", help="list passes and presets with their descriptions")
    p.add_argument("--compare-peers", action="store_true",
                   help="also run onnxsim and onnxslim (sandboxed, with a timeout) and print their node counts "
                        "beside ours (in the report under 'peers')")
    remote_args.add_arguments(p, many=False)


def _print_list() -> None:
    cat = api.list_passes()
    print("presets")
    for p in cat["presets"]:
        print(f"  {p['name']:<10} {p['description']}")
        print(f"  {'':<10} passes: {', '.join(p['passes'])}")
        sets = [f"{n}.{k}={v}" for n, o in p.get("options", {}).items() for k, v in o.items()]
        if sets:
            print(f"  {'':<10} options: {', '.join(sets)}")
    print("passes")
    for p in cat["passes"]:
        flags = [f for f, on in (("worker", p["runs_in_worker"]), ("changes interface", p["changes_interface"])) if on]
        print(f"  {p['name']:<20} {p['summary']}" + (f"  [{', '.join(flags)}]" if flags else ""))


def request_of(args: argparse.Namespace, dims: dict[str, int] | None = None) -> OptimizeRequest:
    """The one ``OptimizeRequest`` these flags ask for (``dims``: ``--dim`` merged with the project's)."""
    names = [n.strip() for n in args.passes.split(",") if n.strip()] if args.passes else None
    if args.passes is not None and not names:
        raise StudioError("--passes is empty; give pass names separated by commas (see --list)")
    return OptimizeRequest(preset=args.preset, passes=names, dims=parse_dims(args.dim) if dims is None else dims,
                           pass_options=parse_options(args.options), on_failure=args.on_failure,
                           verify=not args.no_verify, time_budget_s=args.time_budget, inputs=args.inputs)


def _run(args: argparse.Namespace) -> int:
    if args.list:
        if args.json:
            print_json(api.list_passes())
        else:
            _print_list()
        return 0
    if not args.model or not args.output:
        raise StudioError("optimize needs MODEL and -o OUT (or --list)")

    request = request_of(args, model_dims(args))
    names = request.passes
    handle = api.load(args.model)
    out = Path(args.output)
    if out.suffix != ".onnx":
        raise StudioError("-o must name a .onnx file")
    if args.report:
        outputs.register_input(*filter(None, [args.inputs]))
        outputs.check_destination(args.report)          # before the run: not the input, no link/FIFO/folder
    partial = out.with_name(out.stem + ".partial.onnx")
    targets = remote_args.targets_of(args)
    if len(targets) > 1:
        raise StudioError("optimize runs on one --target at a time", code=ErrorCode.BAD_OPTION)
    measured = None
    if targets:          # the same request, run on the target ('local': here, after the same trip); the model comes back
        measured = batch_api.optimize_on(targets[0], handle, request, out_path=out,
                                         partial=partial if args.keep_partial else None, dump_dir=args.dump_dir,
                                         cluster=args.cluster, tls=remote_args.tls_of(args), pool_key="cli")
        result = measured.result
    else:
        result = api.optimize(handle, request, out_path=out, partial=partial if args.keep_partial else "none",
                              dump_dir=args.dump_dir)
    report = result.to_dict()
    peers = api.compare_peers(handle) if args.compare_peers else ()
    if peers:
        report["peers"] = [p.to_dict() for p in peers]
    # A run that did not finish never leaves a file at -o that looks like success.
    report["output"] = str(out if result.ok else partial) if result.output is not None else None
    report["partial"] = not result.ok
    keep_json(args, "optimize.json", report, "optimize")
    if kept(args) is not None and result.ok and result.output is not None:
        try:
            api.add_optimized_version(kept(args).model, kept(args).version.id, result, preset=args.preset,
                                      label=args.preset or ("passes" if names else "safe"))
        except SameContentError as exc:     # R63: the project has this result already; -o is still the result
            print(f"note: {printable(str(exc), 300)}", file=sys.stderr)
    if args.report:
        try:
            outputs.write_json(args.report, report)
        except StudioError as exc:          # a full or read-only disk at the report, the model already saved
            raise (outputs.side_output_failed(exc, outputs.shown_path(args.report),
                                              f"the model ({outputs.shown_path(out if result.ok else partial)})")
                   if result.output is not None else None) or exc from None
    if args.json:
        print_json({"target": measured.target, "measured_by": dict(measured.measured_by), "result": report}
                   if measured is not None else report)
    else:
        if measured is not None:
            print(remote_args.measured_line(measured))
        _print_report(result, out if result.ok else result.output)
        if peers:
            _print_peers(result, peers)
    if not result.ok:
        print(f"error: {printable(result.summary(), 400)}", file=sys.stderr)
        if result.output is None:
            print(f"error: nothing written to {printable(str(out), 200)} (the pipeline did not finish; "
                  "--keep-partial writes the last verified model as "
                  f"{printable(partial.name, 100)})", file=sys.stderr)
        return 1
    return 0


def _print_peers(result, peers) -> None:
    ours = sum(result.ops_after.values()) if result.ok else None
    print("peers      " + "; ".join([f"onnx-studio {ours if ours is not None else '-'} nodes"] + [
        f"{p.tool} {p.all_nodes} nodes" if p.ok else f"{p.tool}: {printable(p.error, 120)}" for p in peers])
        + " (all nodes, subgraphs included; peers' results not verified)")


def _print_report(result, out: Path | None) -> None:
    print(f"{'pass':<20} {'status':<10} {'nodes':>13} {'params':>15} {'time s':>7}  verification")
    for r in result.records:
        nodes = f"{r.nodes_before}->{r.nodes_after}"
        params = f"{human_count(r.params_before)}->{human_count(r.params_after)}"
        verified = r.verification.message if r.verification else (r.message or "-")
        print(f"{r.name:<20} {r.status:<10} {nodes:>13} {params:>15} {r.seconds + r.verify_seconds:>7.2f}  "
              f"{printable(verified, 120)}")
        for warning in r.warnings[:3]:
            print(f"{'':<20} warning: {printable(warning, 300)}")
        for note in r.notes[:3]:
            print(f"{'':<20} note: {printable(note, 300)}")
    diff = api.op_count_diff(result.ops_before, result.ops_after)
    if diff:
        print("ops        " + ", ".join(f"{printable(op)} {a}->{b}" for op, a, b in diff[:15]))
    print(f"verified   {printable(result.reference, 500)}")   # with the preset engine's reason, when it has one
    if out is None:
        where = "nothing written"
    elif result.ok:
        where = f"written to {printable(str(out), 200)}"
    else:
        where = f"the last verified model (partial) written to {printable(str(out), 200)}"
    print(f"result     {printable(result.summary(), 200)}; {where}")


run = with_project(NAME, _run)
