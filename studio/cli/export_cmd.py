"""onnx-studio export MODEL --target ort|openvino|tensorrt|triton|all -o DIR [--preset NAME]
[--precision fp32|fp16|int8] [--ov-precisions fp32,fp16] [--ort-custom-ops LIB] [--ov-extension LIB]
[--calibration DIR] [--calibration-method M] [--shapes NAME=MIN:OPT:MAX ...] [--json]"""

from __future__ import annotations

import argparse
import sys

from studio import api
from studio.cli import recipe_args, task_args
from studio.cli.project_args import add_project_argument, keep_json, kept, with_project
from studio.cli.common import parse_dims, print_json
from studio.core.fmt import human_bytes, printable, speedup_text
from studio.cli.dims_args import model_dims
from studio.core.requests import ExportRequest

NAME = "export"
HELP = ("Write deployment artifacts (ONNX Runtime, OpenVINO, TensorRT, Triton), each reloaded and verified, "
        "in one bundle with a manifest and a report.")

_ICON = {"passed": "ok", "failed": "FAILED", "error": "ERROR", "not verified": "not verified"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_project_argument(p)
    p.add_argument("model", help="path to a .onnx file (external data next to it)")
    p.add_argument("--target", action="append", metavar="TARGET",
                   help="ort, openvino, tensorrt, triton or all (repeatable or comma-separated; default all)")
    p.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="output folder: the bundle goes to DIR/<model>-<sha8>/ and DIR/<model>-<sha8>.zip")
    p.add_argument("--preset", help="optimization preset run first, with its pass options as optimize runs it (safe; ort for ONNX Runtime; openvino for OpenVINO IR; tensorrt)")
    p.add_argument("--precision", choices=("fp32", "fp16", "int8"), default="fp32",
                   help="fp16: OpenVINO FP16-compressed weights, TensorRT --fp16 (and FP16 ONNX when the "
                        "convert-fp16 pass exists); int8: the quantize-int8-static pass (QDQ)")
    p.add_argument("--ov-precisions", metavar="LIST",
                   help="OpenVINO IRs to write: fp32, fp16 (FP16-compressed weights) or fp32,fp16 for both, each "
                        "verified; the first is model.xml (default: fp16 with --precision fp16, else fp32)")
    p.add_argument("--calibration", metavar="DIR", help="calibration data for int8 (images or .npz)")
    p.add_argument("--dataset", metavar="NAME", help="a dataset of the --project: task metrics of every artifact "
                                                     "against the original's golden outputs (parity.json)")
    task_args.add_goal_argument(p, old="--task-target")
    task_args.add_arguments(p)
    recipe_args.add_recipe_arguments(p, title="preprocessing of the --dataset for this run (every recipe field)")
    p.add_argument("--calibration-method", choices=("minmax", "entropy", "percentile"), default="minmax",
                   help="int8 activation-range calibration (default minmax; entropy and percentile clip outliers)")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE",
                   help="value of a symbolic input dim (INPUT[AXIS]=VALUE for an unnamed one): the verification "
                        "inputs and the TensorRT profile's opt use it; with --project it is the model's dims setting "
                        "(repeatable)")
    p.add_argument("--shapes", action="append", metavar="NAME=MIN:OPT:MAX",
                   help="input shape range (TensorRT profile, OpenVINO bounds; verification uses OPT); "
                        "NAME=SHAPE for a static shape; repeatable")
    p.add_argument("--ort-level", choices=("basic", "extended", "all"), default="extended",
                   help="ONNX Runtime optimization level (basic/extended: portable; all: hardware-specific)")
    p.add_argument("--no-ort-format", action="store_true", help="do not write the .ort format")
    p.add_argument("--name", help="bundle and Triton model name (default: the model file name)")
    p.add_argument("--max-batch", type=int, default=8, help="Triton max_batch_size / TensorRT batch max (default 8)")
    p.add_argument("--plugin", action="append", default=[], metavar="LIB",
                   help="TensorRT plugin library to ship and load (repeatable)")
    p.add_argument("--ort-custom-ops", action="append", default=[], metavar="LIB",
                   help="ONNX Runtime custom-op library (register_custom_ops_library; e.g. from `onnx-studio plugin "
                        "--target ort-cpp --build`): used to optimize and verify, shipped in the bundle and the "
                        "Triton ORT model (repeatable)")
    p.add_argument("--ov-extension", action="append", default=[], metavar="LIB",
                   help="OpenVINO extension library (core.add_extension; e.g. from `onnx-studio plugin --target "
                        "openvino-cpp --build`): used to convert and verify, shipped in the bundle (repeatable)")
    p.add_argument("--no-zip", action="store_true", help="do not write the .zip next to the bundle folder")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def request_of(args: argparse.Namespace, tasks: dict | None = None, goal: str | None = None,
               dims: dict[str, int] | None = None) -> ExportRequest:
    """The one ``ExportRequest`` these flags ask for (``tasks``: ``--task`` with the project's choices;
    ``goal``: ``--goal``; ``dims``: ``--dim`` merged with the project's)."""
    return ExportRequest(targets=args.target or ["all"], preset=args.preset, precision=args.precision,
                         ov_precisions=args.ov_precisions, calibration=args.calibration,
                         calibration_method=args.calibration_method, shapes=args.shapes or (),
                         dims=parse_dims(args.dim) if dims is None else dims, ort_level=args.ort_level,
                         ort_format=not args.no_ort_format, name=args.name, max_batch=args.max_batch,
                         plugins=args.plugin, ort_custom_ops=args.ort_custom_ops, ov_extensions=args.ov_extension,
                         zip=not args.no_zip, goal=goal, dataset=args.dataset, tasks=tasks or {})


def _run(args: argparse.Namespace) -> int:
    handle = api.load(args.model)
    verbose = not args.json

    def progress(target: str, stage: str) -> None:
        if verbose:
            print(f"  {target:<12} {printable(stage, 120)}", file=sys.stderr, flush=True)

    dataset = recipe_args.project_dataset(args)
    tasks = task_args.choices(args, handle, kept(args).project if kept(args) is not None else None)

    result = api.export(handle, request_of(args, tasks, task_args.goal(args), model_dims(args)), args.output,
                        on_progress=progress, dataset=dataset)
    keep_json(args, "export.json", result.to_dict(), "export")
    if kept(args) is not None and result.zip_path is not None:
        kept(args).keep(result.zip_path, "export bundle")
    if args.json:
        print_json(result.to_dict())
    else:
        _print(result)
    for line in result.failures:
        print(f"error: {printable(line, 400)}", file=sys.stderr)
    return result.exit_code


def _print(result) -> None:
    for line in result.failures:
        print(f"FAILED   {printable(line, 300)}")
    for t in result.targets:
        print(f"{t.target:<12} {_ICON.get(t.status, t.status):<13} {printable(t.message, 200)}")
        for a in t.artifacts:
            v = a.verification
            verdict = f"{_ICON.get(v.status, v.status)}: {printable(v.message, 120)}" if v else ""
            print(f"  {a.path:<58} {human_bytes(a.bytes):>9}  {verdict}")
        for note in t.notes:
            print(f"  note: {printable(note, 400)}")
    for note in result.manifest.get("deploy", {}).get("notes", []):
        print(f"note: {printable(note, 200)}")
    speed = result.manifest.get("benchmarks", {}).get("onnxruntime", {}).get("session_speedup")
    if speed:
        print(f"ONNX Runtime session creation {speedup_text(speed)} the original with ORT defaults "
              "(fast-start profile, see onnxruntime/session_options.json)")
    parity = result.manifest.get("dataset_parity")
    if parity:
        verdict = "" if parity["all_met"] is None else (" all met" if parity["all_met"] else " MISSED")
        print(f"dataset {printable(parity['dataset'], 60)}: task metrics of every artifact on {parity['samples']} "
              f"sample(s) in parity.json{verdict}" + (f" ({parity['task_target']})" if parity["task_target"] else ""))
    print(f"bundle  {result.bundle}")
    if result.zip_path:
        print(f"zip     {result.zip_path}")
    print("report  " + str(result.bundle / "report.html"))


run = with_project(NAME, _run)
