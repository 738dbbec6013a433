"""onnx-studio check MODEL [--engines ort,openvino,tensorrt] [--ep cpu,cuda] [--trt-version 10|11] [--json]
[--target NAME --cluster ADDR]

Exit codes: 0 no error finding for a requested engine (a "not run" verdict -- the model compiles but
needs real inputs -- is not an error), 1 at least one, 2 usage/input errors.
"""

from __future__ import annotations

import argparse
from contextlib import nullcontext
from pathlib import Path

from studio import api
from studio.batch import facade as batch_api
from studio.cli import remote_args, task_args
from studio.cli.project_args import add_project_argument, keep_json, kept, with_project
from studio.cli.common import parse_dims, parse_options, print_json
from studio.core.fmt import printable
from studio.cli.dims_args import model_dims
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.requests import CheckRequest

NAME = "check"
HELP = ("Will the model run on ONNX Runtime, OpenVINO and TensorRT? Per-node verdicts, custom ops, lint and "
        "the fix for each finding (exit 1 when a requested engine has an error).")

_MARK = {"runs": "OK  ", "runs with warnings": "WARN", "not run": "NRUN", "fails": "FAIL", "unknown": "??  "}


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_project_argument(p)
    p.add_argument("model", help="path to a .onnx file (external data next to it)")
    p.add_argument("--engines", default=None,
                   help="comma-separated: " + ", ".join(f"{r['name']} ({r['aliases'][0]})" if r["aliases"] else
                                                         r["name"] for r in api.engines()) +
                   ", or all (default: ort, openvino, tensorrt, and mnn and litert where installed)")
    p.add_argument("--ep", default="cpu", help="ONNX Runtime execution providers, comma-separated: cpu, cuda, tensorrt "
                   "(not-installed EPs are checked against shipped tables)")
    p.add_argument("--trt-version", default="10", choices=["10", "11"], help="TensorRT support table to use")
    p.add_argument("--no-run", action="store_true", help="create sessions but do not run the model once")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE",
                   help="value for a symbolic dim in the test run (INPUT[AXIS]=VALUE for an unnamed dim), and the "
                   "value fix-input-shapes sets")
    p.add_argument("--inputs", metavar="X.npz", help="real inputs for the test run (keys = input names; first "
                   "sample used) instead of seeded ones")
    p.add_argument("--fix", action="append", metavar="PASS",
                   help="apply this fix pass first (repeatable; verified against the original), then check the result")
    p.add_argument("--set", action="append", metavar="PASS.KEY=VALUE", dest="options",
                   help="with --fix: a fix pass option, e.g. convert-opset.target=13 (repeatable)")
    p.add_argument("--output", metavar="PATH", help="with --fix: where to save the fixed model (required)")
    task_args.add_arguments(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON (docs/findings.md)")
    remote_args.add_arguments(p, many=False)


def request_of(args: argparse.Namespace, dims: dict[str, int] | None = None,
               tasks: dict[str, str] | None = None) -> CheckRequest:
    """The one ``CheckRequest`` these flags ask for (``dims``: ``--dim`` merged with the project's;
    ``tasks``: ``--task`` with the project's choices)."""
    return CheckRequest(engines=api.check_engines(args.engines) if args.engines else None,
                        eps=[e.strip() for e in args.ep.split(",") if e.strip()], trt_version=args.trt_version,
                        run=not args.no_run, dims=parse_dims(args.dim) if dims is None else dims,
                        inputs=args.inputs, tasks=tasks or {})


def _run(args: argparse.Namespace) -> int:
    engines = api.check_engines(args.engines)
    handle = api.load(args.model)
    dims = model_dims(args)
    if args.fix:
        if not args.output:
            raise StudioError("--fix needs --output PATH for the fixed model (the original is never modified)")
        k = kept(args)
        # with --project the fixed model is kept first and -o written after: "same as vN" writes nothing
        with k.staged(args.output) if k is not None else nullcontext(Path(args.output)) as target:
            result = api.fix_to_file(handle.path, args.fix, target, options=parse_options(args.options),
                                     dims=dims, inputs=args.inputs)
            if k is not None:
                k.add_version(target, label=f"fix: {', '.join(args.fix)}", refuse_same=True,
                              provenance={"fix": list(args.fix), "pipeline": result.lineage()})
        if not args.json:
            print(f"fixed   {result.summary()}; saved {printable(str(args.output))} (verified: {result.reference})")
        handle = api.load(args.output)
    tasks = task_args.choices(args, handle, kept(args).project if kept(args) is not None else None)
    request = request_of(args, dims, tasks)
    targets = remote_args.targets_of(args)
    if len(targets) > 1:
        raise StudioError("check runs on one --target at a time", code=ErrorCode.BAD_OPTION)
    measured = None
    if targets:          # the same request, rebuilt and run on the target ('local': here, after the same trip)
        measured = batch_api.check_on(targets[0], handle, request, cluster=args.cluster,
                                      tls=remote_args.tls_of(args), pool_key="cli")
        report = measured.result
    else:
        report = api.check(handle, request)
    failed = report.has_errors_for(engines)
    keep_json(args, "check.json", report.to_dict(), "check")
    if args.json:
        print_json(measured.to_dict() if measured is not None else report.to_dict())
        return 1 if failed else 0
    if measured is not None:
        print(remote_args.measured_line(measured))
    print(f"model   {printable(report.model)}  sha256 {report.sha256[:16]}")
    for v in report.verdicts:
        print(f"{_MARK[v.verdict]}    {v.label:<42} {v.verdict:<19} [{v.decided_by}] {printable(v.summary, 160)}")
        if v.ran_on and v.ran_on.get("inputs"):
            shown = ", ".join(f"{k} {t}" for k, t in list(v.ran_on["inputs"].items())[:6])
            print(f"          ran on {printable(shown, 200)}")
            if v.ran_on.get("steps"):       # a KV-cache decoder: its prefill ran before this decode step
                print(f"          steps  {printable(' then '.join(v.ran_on['steps']), 200)}")
    if report.findings:
        print("findings")
    for f in report.findings:
        where = " ".join(x for x in (f.engine or "", f.target or "", f"node {printable(f.node, 60)}" if f.node else "") if x)
        print(f"  {f.severity:<7} {f.code:<22} {where}")
        print(f"          {printable(f.message, 300)}")
        if f.fix_pass or f.fix_hint:
            fix = f"onnx-studio fix: {f.fix_pass}  " if f.fix_pass else ""
            print(f"          -> {fix}{printable(f.fix_hint or '', 200)}")
    for note in report.notes:
        print(f"note    {printable(note, 300)}")
    fixes = report.fixes()
    if fixes:
        print("fixes   " + ", ".join(fixes))
    return 1 if failed else 0


run = with_project(NAME, _run)
