"""onnx-studio compare A B [--engine E] [--engine-b E] [--inputs X.npz] [--layerwise] [--json]"""

from __future__ import annotations

import argparse

from studio import api
from studio.cli import recipe_args, task_args
from studio.cli.common import parse_dims, print_json
from studio.cli.inputs_args import add_input_arguments, preprocess_from
from studio.core import outputs
from studio.core.errors import StudioError
from studio.core.fmt import printable
from studio.core.requests import CompareRequest
from studio.core.types import shape_text

NAME = "compare"
HELP = ("Compare two models (versions) or one model on two engines on the same inputs; exit 1 when outputs "
        "differ beyond tolerance.")
# every engine of the table, each with its aliases (api.engines(): studio/core/engines/table.py)
ENGINES = tuple(dict.fromkeys(n for row in api.engines() for n in (row["cli"], row["name"], *row["aliases"])))
PRECISIONS = ("f32", "bf16", "f16", "default")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", help="reference model (.onnx)")
    p.add_argument("b", help="candidate model (.onnx); the same file to compare two engines")
    p.add_argument("--engine", default="ort", choices=ENGINES, help="engine of A (default ort)")
    p.add_argument("--engine-b", choices=ENGINES, help="engine of B (default: the same as A)")
    p.add_argument("--ov-precision", default="f32", choices=PRECISIONS,
                   help="OpenVINO inference precision of A (default f32, pinned; 'default' = plugin's choice)")
    p.add_argument("--ov-precision-b", choices=PRECISIONS, help="OpenVINO inference precision of B")
    p.add_argument("--layerwise", action="store_true", help="find the first diverging layer (chunked, bounded memory)")
    p.add_argument("--layer-threshold", type=float, metavar="X",
                   help="relative L2 error above which a layer counts as diverged")
    p.add_argument("--chart", metavar="FILE.html", help="with --layerwise: write the per-layer error chart")
    p.add_argument("--project", metavar="NAME", help="the project holding --dataset")
    p.add_argument("--dataset", metavar="NAME", help="run on a dataset's evaluation samples and add task metrics "
                                                     "(B against A's golden outputs)")
    task_args.add_goal_argument(p)
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    task_args.add_arguments(p)
    add_input_arguments(p)
    recipe_args.add_recipe_arguments(p, basic=False, title="preprocessing of the --dataset for this run (with "
                                                           "--image-size --layout --mean --std --bgr above)")


def _fmt(x: float | None, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def request_of(args: argparse.Namespace, tasks: dict[str, str] | None = None,
               goal: str | None = None) -> CompareRequest:
    """The one ``CompareRequest`` these flags ask for (``tasks``: ``--task`` with the project's choices;
    ``goal``: ``--goal`` or its old spelling). The preprocessing and recipe flags shape the call's inputs."""
    return CompareRequest(engine=args.engine, engine_b=args.engine_b, ov_precision=args.ov_precision,
                          ov_precision_b=args.ov_precision_b, dims=parse_dims(args.dim), count=args.count,
                          inputs=args.inputs, images=args.images, dataset=args.dataset, layerwise=args.layerwise,
                          layer_threshold=args.layer_threshold, tasks=tasks or {}, goal=goal)


def run(args: argparse.Namespace) -> int:
    if args.chart and not args.layerwise:
        raise StudioError("--chart draws the layer-wise errors; add --layerwise")
    if args.count < 1 or args.count > 256:
        raise StudioError("--count must be between 1 and 256")
    dims = parse_dims(args.dim)
    goal = task_args.goal(args)
    a, b = api.load(args.a), api.load(args.b)
    if args.chart:
        outputs.register_input(*filter(None, [args.inputs]))
        outputs.check_destination(args.chart)           # before the run: not an input, no link/FIFO/folder
    feeds = None
    if args.inputs or args.images:
        feeds = api.make_inputs(a, inputs=args.inputs, images=args.images, count=args.count, dims=dims,
                                preprocess=preprocess_from(args))
    dataset = project = None
    if args.dataset:
        if not args.project:
            raise StudioError("--dataset names a dataset of a project: add --project NAME")
        project = api.open_project(args.project)
        dataset = api.dataset(project, args.dataset)
    elif goal:
        raise StudioError("--goal is judged on a dataset: add --project NAME --dataset NAME")
    elif args.project:
        project = api.open_project(args.project)
    dataset = recipe_args.dataset_for_run(args, dataset)
    tasks = task_args.choices(args, a, project)
    result = api.compare(a, b, request_of(args, tasks, goal), feeds=feeds, dataset=dataset)
    task = result.extra.get("task")
    if args.chart:
        outputs.write_html_figure(api.layer_error_figure(result.layerwise), args.chart)
    if args.json:
        print_json(result.to_dict())
        return 0 if result.ok else 1
    print(f"reference  {printable(result.reference.describe())}")
    print(f"candidate  {printable(result.candidate.describe())}")
    print(f"inputs     {printable(result.feeds.get('source', ''))}")
    print(f"tolerance  {result.tolerance_note}")
    for t in result.tasks:
        print(f"task       {printable(t.text(), 300)}")
    rows = [["output", "shape", "max abs", "max rel", "rel L2", "cosine", "top-1", "top-5", "verdict", "compared as"]]
    for d in result.comparison.outputs.values():
        shape = shape_text(d.ref_shape) if d.ref_shape == d.got_shape else \
            f"{shape_text(d.ref_shape)} vs {shape_text(d.got_shape)}"
        rows.append([printable(d.name, 48), shape, _fmt(d.max_abs), _fmt(d.max_rel), _fmt(d.rel_l2),
                     _fmt(d.cosine, ".6f"), _fmt(d.top1_agreement, ".2f"), _fmt(d.top5_overlap, ".2f"),
                     "ok" if d.match else "DIFFERS", _mode(d)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    for name in result.comparison.missing:
        print(f"missing    output '{printable(name, 80)}' is not produced by the candidate")
    for note in result.notes_beside_summary():
        print(f"note       {printable(note, 300)}")
    if result.layerwise is not None:
        lw = result.layerwise
        print(f"layerwise  {printable(lw.summary(), 300)}")
        print(f"           {lw.compared} tensors compared in {lw.chunks} chunk(s), {lw.unmatched} without a "
              f"counterpart (fused away or renamed), {lw.skipped} skipped; {lw.tolerance}")
        for note in lw.notes:
            print(f"           note: {printable(note, 200)}")
        worst = sorted((x for x in lw.layers if x.rel_l2 is not None), key=lambda x: -x.error)[:5]
        for x in worst:
            print(f"           {printable(x.node, 60)} ({x.op_type})  rel L2 {x.error:.3g}")
    if task:
        for o in task["outputs"]:
            cells = ", ".join(f"{m['metric']} {'n/a' if m['value'] is None else format(m['value'], '.4g')}"
                              for m in o["metrics"])
            print(f"task       {printable(o['output'], 40)} ({o['task']}): {cells}")
        if task["target"]:
            print(f"target     {task['target']}: {'met' if task['target_met'] else 'missed'}")
    print(("PASS: " if result.ok else "FAIL: ") + printable(result.summary(), 400))
    if task and task["target"]:
        return 0 if task["target_met"] else 1        # the task target decides, not element-wise tolerances
    return 0 if result.ok else 1


def _mode(d) -> str:
    """How an output was judged: exact integers (with the mismatch count when they differ),
    rows in any order (TopK/NMS), or values within tolerance."""
    mode = printable(d.mode.split(";")[0].split(" (")[0], 40)
    if d.mode == "exact" and d.mismatches:
        return f"exact, {d.mismatches} differ"
    if getattr(d, "noise_floor", False):
        return f"{mode} (reference at noise level)"     # its cosine is rounding noise, not a verdict
    return mode
