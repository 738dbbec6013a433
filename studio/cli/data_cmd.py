"""onnx-studio data add|list|show|rm|eval --project NAME ...: datasets in a project.

  data add SOURCE --project P [--name N] [--model M.onnx] [--preset yolo] [--kind image] [--split 0.5]
  data list --project P
  data show NAME --project P [--model M.onnx]     (with --model: the first samples as the model gets them)
  data eval NAME --project P --model REF.onnx [--candidate C.onnx] [--engine openvino] [--target top1-agreement>=0.99]
  data rm NAME --project P --yes
"""

from __future__ import annotations

import argparse

import numpy as np

from studio import api
from studio.cli import task_args
from studio.cli.common import print_json
from studio.core.errors import StudioError
from studio.core.fmt import printable

NAME = "data"
HELP = "datasets in a project: add (images, audio, text, tensors, loader scripts), list, show, evaluate, remove"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    add = sub.add_parser("add", help="import a folder, zip, .npz/.jsonl/.txt file or a load_data() script")
    add.add_argument("source")
    add.add_argument("--name")
    add.add_argument("--kind", default="auto", choices=["auto", "image", "audio", "text", "tensor", "script"])
    add.add_argument("--model", help="the model the data is for (suggests the preprocessing)")
    add.add_argument("--preset", help="preprocessing preset: imagenet, yolo, clip, text-strip, grayscale, raw")
    add.add_argument("--split", type=float, default=0.5, help="calibration fraction (default %(default)s)")
    add.add_argument("--seed", type=int, default=0)
    add.add_argument("--tokenizer", help="tokenizer.json for raw-text datasets")
    add.add_argument("--seq-len", type=int, help="text: token sequence length")
    add.add_argument("--length", type=int, help="audio: samples per clip (crop/pad)")
    sub.add_parser("list", help="the project's datasets")
    show = sub.add_parser("show", help="a dataset's samples, skipped files, recipe and split")
    show.add_argument("dataset")
    show.add_argument("--model", help="preview the first samples as this model gets them")
    ev = sub.add_parser("eval", help="task metrics of a candidate against the reference's golden outputs")
    ev.add_argument("dataset")
    ev.add_argument("--model", required=True, help="the reference (original) model")
    ev.add_argument("--candidate", help="the version to judge (default: the reference on --engine)")
    ev.add_argument("--engine", default="onnxruntime")
    ev.add_argument("--target", help="e.g. top1-agreement>=0.99, map-drop<=0.01, cosine>=0.99")
    ev.add_argument("--part", default="evaluation", choices=["evaluation", "calibration", "all"])
    ev.add_argument("--limit", type=int)
    task_args.add_arguments(ev)
    rm = sub.add_parser("rm", help="delete a dataset and its golden outputs")
    rm.add_argument("dataset")
    rm.add_argument("--yes", action="store_true", help="required: confirms the deletion")
    for s in (add, sub.choices["list"], show, ev, rm):
        s.add_argument("--project", required=True, help="project name or id")
        s.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    if not getattr(args, "action", None):
        raise StudioError("give an action: data add|list|show|eval|rm (see onnx-studio data --help)")
    project = api.open_project(args.project, create=args.action == "add") if args.action == "add" \
        else api.open_project(args.project)
    if args.action == "add":
        options = {k: v for k, v in (("seq_len", args.seq_len), ("length", args.length)) if v}
        model = api.load(args.model) if args.model else None
        ds = api.add_dataset(project, args.source, name=args.name, kind=args.kind, model=model, preset=args.preset,
                             calibration_fraction=args.split, seed=args.seed, tokenizer=args.tokenizer,
                             options=options)
        if args.json:
            print_json(ds.to_dict())
        else:
            print(printable(ds.summary(), 300))
            if ds.recipe:
                print(f"preprocessing: {ds.recipe.preset} ({printable(ds.recipe_reason, 200)})")
            for name, why in ds.skipped[:20]:
                print(f"skipped    {printable(name, 80)}: {printable(why, 120)}")
            if len(ds.skipped) > 20:
                print(f"skipped    ... and {len(ds.skipped) - 20} more (see --json)")
        return 0
    if args.action == "list":
        rows = api.project_datasets(project)
        if args.json:
            print_json([{"id": d.id, "name": d.name, "kind": d.kind} for d in rows])
        for d in rows if not args.json else ():
            print(f"{d.id}  {d.kind:<7} {printable(d.name, 80)}")
        return 0
    ds = api.dataset(project, args.dataset)
    if args.action == "show":
        data = ds.to_dict()
        if args.model:
            feeds = api.preview_dataset(ds, api.load(args.model), count=4)
            data["preview"] = [{k: {"shape": list(v.shape), "dtype": str(v.dtype), "min": float(np.min(v)),
                                    "max": float(np.max(v))} for k, v in f.items()} for f in feeds]
        if args.json:
            print_json(data)
        else:
            print(printable(ds.summary(), 300))
            if ds.recipe:
                print(f"preprocessing: {ds.recipe.to_dict()}")
            for f in data.get("preview", []):
                print("preview    " + ", ".join(f"{printable(k, 40)} {v['dtype']}{v['shape']} "
                                               f"[{v['min']:.3g}, {v['max']:.3g}]" for k, v in f.items()))
        return 0
    if args.action == "rm":
        if not args.yes:
            raise StudioError("data rm deletes the dataset and its golden outputs; add --yes to confirm")
        api.remove_dataset(project, ds.id)
        print(f"removed dataset {printable(ds.name, 80)}")
        return 0
    reference = api.load(args.model)
    tasks = task_args.choices(args, reference, project)
    report = api.evaluate_on_dataset(ds, reference, api.load(args.candidate) if args.candidate else None,
                                     engine=args.engine, target=args.target, part=args.part, limit=args.limit,
                                     tasks=tasks)
    if args.json:
        print_json(report.to_dict())
    else:
        print(f"{printable(report.candidate, 60)} on {report.engine}, {report.samples} sample(s) of "
              f"{printable(report.dataset, 40)}/{report.part}")
        for o in report.outputs:
            cells = ", ".join(f"{r.metric} {'n/a' if r.value is None else f'{r.value:.4g}'}" for r in o.results)
            worst = next((r.worst[:3] for r in o.results if r.worst), ())
            print(f"  {printable(o.output, 40)} ({o.task}): {cells}" + (f"; worst samples {list(worst)}" if worst else ""))
            if o.task_reason:
                print(f"      task: {printable(o.task_reason, 200)}")
            for r in o.results:
                if r.value is None:
                    print(f"      {r.metric} n/a: {printable(r.detail or 'not computable', 200)}")
        for note in report.notes:
            print(f"  note: {printable(note, 200)}")
        if report.target:
            print(f"target {report.target}: {'met' if report.target_met else 'missed'}")
    return 0 if report.target_met in (None, True) else 1
