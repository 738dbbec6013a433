"""onnx-studio precision MODEL [--variants auto|fp32,fp16,bf16-ov,int8,int8-mixed,...] [--calibration DIR|X.npz]
[--calibration-method minmax|entropy|percentile] [--out DIR]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from studio import api
from studio.batch import facade as batch_api
from studio.cli.project_args import add_project_argument, keep_json, kept, with_project
from studio.cli import recipe_args, remote_args, task_args
from studio.cli.common import parse_dims, print_json
from studio.cli.inputs_args import preprocess_from
from studio.core import outputs
from studio.core.errors import StudioError
from studio.core.fmt import printable
from studio.core.requests import PrecisionRequest

NAME = "precision"
HELP = ("Build fp16 / bf16 / INT8 variants, compare each with fp32 and time them side by side; recommend the "
        "fastest that meets the accuracy target (never one slower than fp32).")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_project_argument(p)
    p.add_argument("model", help="path to a .onnx file")
    p.add_argument("--variants", default="auto", metavar="LIST",
                   help=f"comma-separated, or 'auto' (default). Known: {', '.join(api.PRECISION_VARIANTS)}")
    p.add_argument("--calibration", metavar="DIR|X.npz", help="INT8 calibration data: an image folder or an .npz "
                                                              "(default: seeded random inputs)")
    p.add_argument("--calibration-method", choices=("minmax", "entropy", "percentile"), default="minmax",
                   help="INT8 activation-range calibration (default minmax; entropy and percentile clip outliers)")
    p.add_argument("--samples", type=int, default=8, metavar="N", help="calibration sets/images to use (default 8)")
    p.add_argument("--inputs", metavar="X.npz", help="inputs accuracy is judged on (default: samples of the "
                                                     "calibration data held out from calibration, else 4 random sets)")
    p.add_argument("--target-cosine", type=float, default=0.99, metavar="C",
                   help="accuracy target: worst-output cosine vs fp32 (default 0.99)")
    p.add_argument("--goal", metavar="METRIC>=X", help="with --dataset: the task-metric goal a variant must meet, "
                                                       "e.g. top1-agreement>=0.99, map-drop<=0.01")
    p.add_argument("--out", metavar="DIR", help="keep the variant models in DIR (default: not kept)")
    p.add_argument("--budget", type=float, default=60.0, metavar="S", help="seconds for latency measurement")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE", help="value of a symbolic input dim")
    p.add_argument("--image-size", metavar="HxW", help="resize calibration images to HxW")
    p.add_argument("--layout", choices=("auto", "NCHW", "NHWC"), default="auto")
    p.add_argument("--mean", metavar="R,G,B")
    p.add_argument("--std", metavar="R,G,B")
    p.add_argument("--bgr", action="store_true")
    p.add_argument("--dataset", metavar="NAME", help="a dataset of the --project: calibrate on its calibration part, "
                                                     "judge on its evaluation part by task metrics")
    recipe_args.add_recipe_arguments(p, basic=False, title="preprocessing of the --dataset for this run (with "
                                                           "--image-size --layout --mean --std --bgr above)")
    task_args.add_arguments(p)
    w = p.add_argument_group("weight-only variants (int4, int8-weights, int4-ov, int8-weights-ov) and decoders")
    w.add_argument("--block-size", default="auto", metavar="N|auto",
                   help="int4/int8 block (NNCF group) size: 16..256, auto = largest of 128..16 dividing every K")
    w.add_argument("--asymmetric", action="store_true", help="asymmetric blocks (a zero point each; NNCF INT4_ASYM)")
    w.add_argument("--accuracy-level", type=int, default=0, choices=(0, 1, 2, 3, 4),
                   help="MatMulNBits compute type: 0 unset, 1 fp32, 2 fp16, 3 bf16, 4 int8 activations")
    w.add_argument("--ratio", type=float, default=1.0, help="NNCF: share of layers in int4 (the rest int8)")
    w.add_argument("--steps", type=int, default=8, metavar="N",
                   help="decoders: greedy tokens generated per prompt to judge agreement and KL (default 8)")
    p.add_argument("--chart", metavar="FILE.html", help="write the accuracy-vs-latency chart")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    remote_args.add_arguments(p, many=False)


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _target(v) -> str:
    if v.meets_target:
        return "met"
    return "missed" if v.cosine is not None or v.task or v.status == "ok" else "-"


def _task_value(v) -> str:
    value = (v.task or {}).get("target_value")
    return ("n/a" if v.task else "-") if value is None else f"{value:.4g}"


def request_of(args: argparse.Namespace, dataset=None, tasks: dict | None = None,
               goal: str | None = None) -> PrecisionRequest:
    """The one ``PrecisionRequest`` these flags ask for, run here or on a ``--target`` alike."""
    if args.samples < 1 or args.samples > 1024:
        raise StudioError("--samples must be between 1 and 1024")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    return PrecisionRequest(variants=None if variants in ([], ["auto"]) else variants, calibration=args.calibration,
                            calibration_method=args.calibration_method, samples=args.samples, inputs=args.inputs,
                            target_cosine=args.target_cosine, goal=goal,
                            dataset=dataset.name if dataset is not None else None, tasks=tasks or {},
                            dims=parse_dims(args.dim), preprocess=preprocess_from(args).to_dict(),
                            latency_budget_s=args.budget, block_size=args.block_size,
                            symmetric=not args.asymmetric, accuracy_level=args.accuracy_level, ratio=args.ratio,
                            generation_steps=args.steps)


def _run(args: argparse.Namespace) -> int:
    handle = api.load(args.model)
    dataset = recipe_args.project_dataset(args)
    goal = remote_args.goal_of(args)
    if dataset is None and goal:
        raise StudioError("a task-metric --goal is judged on a dataset: add --project NAME --dataset NAME")
    if args.chart:
        outputs.register_input(*filter(None, [args.inputs, args.calibration]))
        outputs.check_destination(args.chart)           # before the run: not the input, no link/FIFO/folder

    def progress(i: int, n: int, label: str) -> None:
        if not args.json:
            print(f"[{i}/{n}] {label}", file=sys.stderr, flush=True)

    project = kept(args).project if kept(args) is not None else None
    tasks = task_args.choices(args, handle, project)
    request = request_of(args, dataset, tasks, goal)
    named = remote_args.targets_of(args)
    target = (named or [batch_api.LOCAL])[0]
    here = target == batch_api.LOCAL
    measured = batch_api.precision_on(target, handle, request, cluster=args.cluster, tls=remote_args.tls_of(args),
                                      dataset=dataset, on_progress=progress,
                                      out_dir=args.out or (kept(args).job.dir / "variants" if kept(args) and here
                                                           else None))
    report = measured.result
    measured = measured if named else None      # --target NAME (local too) prints who measured it
    keep_json(args, "precision.json", report.to_dict(), "precision")
    for v in report.variants if kept(args) is not None and here else ():
        if v.path is not None and not v.error and v.name != "fp32" and Path(v.path).is_file() \
                and Path(v.path).suffix == ".onnx":          # an OpenVINO IR (NNCF) is an artifact, not a version
            kept(args).add_version(v.path, label=f"precision: {v.name}",
                                   provenance=report.provenance(v.name, handle.sha256))
    if args.chart:
        outputs.write_html_figure(api.tradeoff_figure(report), args.chart)
    if args.json:
        print_json(measured.to_dict() if measured is not None else report.to_dict())
        return 0
    if measured is not None:
        print(remote_args.measured_line(measured))
    print(f"model        {printable(handle.name)} ({report.model_kind})")
    print(f"calibration  {printable(report.calibration)}")
    print(f"judged on    {printable(str(report.evaluation.get('source', '')))}; baseline "
          f"{report.evaluation.get('baseline', '')}")
    print(f"basis        {printable(report.basis, 300)}")
    if dataset is not None and dataset.recipe is not None:
        print(f"preprocess   {printable(dataset.recipe.describe(), 200)} ({printable(dataset.recipe_reason, 200)})")
    if dataset is not None or tasks:
        task_args.print_tasks(handle, tasks, project)
    task_head = (report.target or "").split(">")[0].split("<")[0]
    rows = [["variant", "engine", "ms (p10)", "median", "x fp32", "95% CI", "cosine", "top-1",
             *([task_head] if task_head else []), "target", "status"]]
    for v in report.variants:
        ci = f"{v.ratio_ci[0]:.2f}-{v.ratio_ci[1]:.2f}" if v.ratio_ci else "-"
        rows.append([v.name + (" *" if v.recommended else ""), v.engine, _fmt(v.latency_ms, ".2f"),
                     _fmt(v.median_ms, ".2f"),
                     _fmt(v.ratio, ".2f"), ci, "n/a" if v.cosine is None and v.status == "ok" else _fmt(v.cosine, ".5f"),
                     _fmt(v.top1, ".2f"),
                     *([_task_value(v)] if task_head else []), _target(v), v.status if not v.error else "failed"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    for v in report.variants:
        for note in (*v.notes, *([v.error] if v.error else [])):
            print(f"  {v.name}: {printable(note, 300)}")
    for v in report.variants:
        for e in v.matmul_errors[:5]:
            print(f"  {v.name}: MatMul {printable(e['node'], 80)}  relative L2 {e['rel_l2']:.3g}  "
                  f"(adds {e['added']:.3g})")
    for note in report.notes:
        print(f"note: {printable(note, 300)}")
    if report.out_dir:
        print(f"models in    {report.out_dir}")
    print(printable(report.summary(), 300))
    return 0


run = with_project(NAME, _run)
