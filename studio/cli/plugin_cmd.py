"""onnx-studio plugin MODEL --op DOMAIN::OP --target ort-python|ort-cpp|openvino-python|openvino-cpp|tensorrt|all
-o DIR [--impl FILE.py] [--build] [--json]

Exit codes: 0 packages written (and every run/build asked for matches the reference, or ran with the declared
outputs where the op has no reference to compare with), 1 a Python op or a built library failed or differs from
the reference, 2 usage/input errors.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from studio import api
from studio.cli.common import parse_dims, print_json
from studio.core.fmt import printable
from studio.core.requests import PluginRequest

NAME = "plugin"
HELP = ("Write custom-op plugins for ONNX Runtime, OpenVINO and TensorRT from an op of the model (signature, "
        "sources, build files, captured samples, test harness); run Python ones and build C++ ones against the "
        "reference.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="path to a .onnx file")
    p.add_argument("--op", required=True, help="the op as DOMAIN::OP_TYPE (e.g. mmdeploy::grid_sampler)")
    p.add_argument("--target", default="all",
                   help="ort-python, ort-cpp, openvino-python, openvino-cpp, tensorrt or all (comma-separated)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output folder (packages go to DIR/<op>/)")
    p.add_argument("--impl", metavar="FILE.py",
                   help="your Python implementation (compute(...) for ort-python, convert(node) for openvino-python); "
                        "it replaces the generated body and is run against the reference in a confined worker")
    p.add_argument("--build", action="store_true", help="compile the C++ packages (ort-cpp, openvino-cpp) and run "
                   "them against the reference")
    p.add_argument("--no-run", action="store_true", help="only write the packages")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE", help="value for a symbolic dim when capturing")
    p.add_argument("--json", action="store_true", help="print signature, packages, runs and builds as JSON")


def _verdict(status: str | None) -> bool | None:
    """OK for a match, -- for "ran, not compared (no reference)", FAIL otherwise."""
    return True if status == "ok" else None if status == "unverified" else False


def _line(label: str, ok: bool | None, message: str) -> str:
    mark = "OK  " if ok else "--  " if ok is None else "FAIL"
    return f"{mark}    {label:<18} {printable(message, 220)}"


def request_of(args: argparse.Namespace) -> PluginRequest:
    """The one ``PluginRequest`` these flags ask for (what the Plugins page's hints print); the model and the
    output folder are the call's."""
    return PluginRequest(op=args.op, targets=args.target, impl=args.impl, run=not args.no_run, build=args.build,
                         dims=parse_dims(args.dim))


def run(args: argparse.Namespace) -> int:
    request = request_of(args)
    api.plugin_targets(",".join(request.targets))      # an unknown target is one line before the model is read
    handle = api.load(args.model)
    made = api.make_plugins(handle, request, Path(args.output))
    sig, scaffold, runs, builds = made.signature, made.scaffold, made.runs, made.builds
    # "unverified" (ran, outputs as declared, but no reference output to compare with) is not a failure.
    failed = made.failed
    if args.json:
        print_json(made.to_dict())
        return 1 if failed else 0
    print(f"op      {printable(sig.qualified, 120)}  {len(sig.nodes)} node(s)"
          f"{'  custom' if sig.custom else ''}  reference: {printable(sig.reference.split(':')[0], 60) if sig.reference else 'none'}")
    for p in sig.inputs:
        print(f"  in  {p.index} {printable(p.name, 40):<12} {p.dtype or '?':<9} {[list(s) if s else '?' for s in p.shapes]}")
    for p in sig.outputs:
        print(f"  out {p.index} {printable(p.name, 40):<12} {p.dtype or '?':<9} {[list(s) if s else '?' for s in p.shapes]}")
    for a in sig.attributes:
        print(f"  attr {printable(a.name, 40)} ({a.type}) = {printable(', '.join(map(str, a.values)), 80)}")
    print(f"samples {len(sig.samples)} captured" + (", whole-model reference outputs" if sig.model_outputs else ""))
    for note in sig.notes:
        print(f"note    {printable(note, 240)}")
    for p in scaffold.packages:
        print(f"wrote   {p.folder}/ ({len(p.files)} files){'' if p.complete else '  [skeleton with TODOs]'}")
    for r in runs:
        print(_line(r.target, _verdict(r.status), r.message))
    for b in builds:
        ok = None if b.target == "tensorrt" else _verdict(b.check.status) if b.built and b.check else False
        print(_line(f"{b.target} build", ok, b.message))
    return 1 if failed else 0
