"""onnx-studio data add|list|show|rm|eval --project NAME ...: datasets in a project.

  data add SOURCE --project P [--name N] [--model M.onnx] [--preset yolo] [--kind image] [--split 0.5] [RECIPE]
  data list --project P
  data show NAME --project P [--model M.onnx] [RECIPE]  (with --model: the first samples as the model gets them)
  data recipe NAME --project P [--model M.onnx [--suggest]] [RECIPE]   (show, or change and save, the recipe)
  data eval NAME --project P --model REF.onnx [--candidate C.onnx] [--engine openvino] [--goal top1-agreement>=0.99]
  data rm NAME --project P --yes

RECIPE: --recipe FILE.json|PRESET and/or any field: --resize --image-size --scale --mean --std --color/--bgr
--layout --dtype --interpolation --pad-value --crop-ratio (on eval and show: for this run only).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from studio import api
from studio.cli import recipe_args, task_args
from studio.cli.common import print_json
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.fmt import printable
from studio.core.requests import DatasetAddRequest, DatasetEvalRequest

NAME = "data"
HELP = "datasets in a project: add (images, audio, text, tensors, loader scripts), list, show, evaluate, remove"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    add = sub.add_parser("add", help="import a folder, zip, .npz/.jsonl/.txt file or a load_data() script",
                         description="Import samples into a project. A data-loader script (--kind script) is "
                                     "Python code: it is EXECUTED AS YOU, with your rights (its reads are not "
                                     "fenced), so give --kind script only for a file you trust. --kind auto never "
                                     "runs anything: a .py file in a folder or zip is listed as ignored.")
    add.add_argument("source")
    add.add_argument("--name")
    add.add_argument("--kind", default="auto", choices=["auto", "image", "audio", "text", "tensor", "script"],
                     help="auto (default): images, audio, tensors or text, never a .py file; script: execute the "
                          "one .py file's load_data() as you (only for code you trust)")
    add.add_argument("--model", help="the model the data is for (suggests the preprocessing)")
    add.add_argument("--preset", help="preprocessing preset: imagenet, caffe, yolo, clip, text-strip, grayscale, raw")
    add.add_argument("--split", type=float, default=0.5, help="calibration fraction (default %(default)s)")
    add.add_argument("--seed", type=int, default=0)
    add.add_argument("--tokenizer", help="tokenizer.json for raw-text datasets")
    add.add_argument("--seq-len", type=int, help="text: token sequence length")
    add.add_argument("--length", type=int, help="audio: samples per clip (crop/pad)")
    recipe_args.add_recipe_arguments(add)
    sub.add_parser("list", help="the project's datasets")
    show = sub.add_parser("show", help="a dataset's samples, skipped files, recipe and split")
    show.add_argument("dataset")
    show.add_argument("--model", help="preview the first samples as this model gets them")
    recipe_args.add_recipe_arguments(show, title="preprocessing to preview (not saved)")
    rec = sub.add_parser("recipe", help="a dataset's preprocessing: show it, or change and save it")
    rec.add_argument("dataset")
    rec.add_argument("--model", help="show what this model suggests, and why")
    rec.add_argument("--suggest", action="store_true", help="with --model: save the model's suggestion")
    recipe_args.add_recipe_arguments(rec, title="fields to change (saved)")
    ev = sub.add_parser("eval", help="task metrics of a candidate against the reference's golden outputs")
    ev.add_argument("dataset")
    ev.add_argument("--model", required=True, help="the reference (original) model")
    ev.add_argument("--candidate", help="the version to judge (default: the reference on --engine)")
    ev.add_argument("--engine", default="onnxruntime")
    task_args.add_goal_argument(ev, help="the task-metric goal, e.g. top1-agreement>=0.99, map-drop<=0.01, "
                                         "cosine>=0.99")
    ev.add_argument("--part", default="evaluation", choices=["evaluation", "calibration", "all"])
    ev.add_argument("--limit", type=int)
    task_args.add_arguments(ev)
    recipe_args.add_recipe_arguments(ev, title="preprocessing for this evaluation (not saved)")
    rm = sub.add_parser("rm", help="delete a dataset and its golden outputs")
    rm.add_argument("dataset")
    rm.add_argument("--yes", action="store_true", help="required: confirms the deletion")
    for s in (add, sub.choices["list"], show, rec, ev, rm):
        s.add_argument("--project", required=True, help="project name or id")
        s.add_argument("--json", action="store_true")


def add_request_of(args: argparse.Namespace) -> DatasetAddRequest:
    """The one ``DatasetAddRequest`` ``data add``'s flags ask for (what the Data page's hint prints); the source,
    and the project are the call's."""
    return DatasetAddRequest(name=args.name, kind=args.kind, model=args.model, preset=args.preset, split=args.split,
                             seed=args.seed, tokenizer=args.tokenizer, seq_len=args.seq_len, length=args.length,
                             recipe_file=args.recipe, recipe=recipe_args.request_of(args))


def eval_request_of(args: argparse.Namespace) -> DatasetEvalRequest:
    """The one ``DatasetEvalRequest`` ``data eval``'s flags ask for (the Data page's hint): ``--task`` as given
    (a choice forgotten with ``OUTPUT=auto`` is not a task), the recipe flags for this run; the dataset and the
    project are the call's."""
    tasks = [r for r in getattr(args, "tasks", None) or () if r.rpartition("=")[2].strip().lower() != "auto"]
    return DatasetEvalRequest(model=args.model, engine=args.engine, goal=task_args.goal(args),
                              tasks=api.parse_task_options(tasks), candidate=args.candidate, part=args.part,
                              limit=args.limit, recipe_file=args.recipe, recipe=recipe_args.request_of(args))


def run(args: argparse.Namespace) -> int:
    if not getattr(args, "action", None):
        raise StudioError("give an action: data add|list|show|recipe|eval|rm (see onnx-studio data --help)")
    if args.action == "add":
        request = add_request_of(args)
        model = api.load(request.model) if request.model else None
        if request.kind == "script":
            print(f"note: executing the data-loader script in {printable(Path(args.source).name, 120)} as you",
                  file=sys.stderr)
        with recipe_args.flags_named(request.recipe):
            ds = api.add_dataset(args.project, args.source, request, model=model, create=True, recipe_reason=(
                f"set on the command line: {request.recipe.given(request.recipe_file)}"
                if request.recipe.given(request.recipe_file) else None))      # refused: no project made
        if args.json:
            print_json(ds.to_dict())
        else:
            print(printable(ds.summary(), 300))
            if ds.recipe:
                _print_recipe(ds)
            _print_skipped(ds)
        return 0
    project = api.open_project(args.project)
    if args.action == "list":
        rows = [(d, api.dataset_damage(project, d)) for d in api.project_datasets(project)]
        if args.json:
            print_json([{"id": d.id, "name": d.name, "kind": d.kind, "damaged": why} for d, why in rows])
        for d, why in rows if not args.json else ():
            print(f"{d.id}  {d.kind:<7} {printable(d.name, 80)}" + (f"  DAMAGED: {printable(why, 160)}" if why else ""))
        return 0
    if args.action == "rm":
        if not args.yes:
            raise StudioError("data rm deletes the dataset and its golden outputs; add --yes to confirm")
        note = api.remove_dataset(project, args.dataset)
        print(f"removed dataset {printable(args.dataset, 80)}" + (f": {printable(note, 300)}" if note else ""))
        return 0
    ds = api.dataset(project, args.dataset)
    if args.action == "recipe":
        return _recipe(args, ds)
    if args.action == "show":
        ds = recipe_args.dataset_for_run(args, ds)
    if args.action == "show":
        data = ds.to_dict()
        preview = api.preview_dataset_samples(ds, api.load(args.model), count=4) if args.model else ()
        if args.model:
            data["preview"] = [p.to_dict() for p in preview]
        if args.json:
            print_json(data)
        else:
            print(printable(ds.summary(), 300))
            if ds.recipe:
                _print_recipe(ds)
            _print_skipped(ds)
            for p in preview:
                print(f"preview    {printable(p.file, 40)}: {printable(p.input, 40)} {p.dtype}{list(p.shape)} "
                      f"{p.layout} {printable(p.ranges_text(), 200)}")
        return 0
    request = eval_request_of(args)
    with recipe_args.flags_named(request.recipe):                 # a bad recipe field is one line before any work
        recipe_args.recipe_of(request.recipe_file, request.recipe, ds.recipe)
    reference = api.load(request.model)
    if request.candidate:
        api.load(request.candidate)                 # a candidate that is no model is one line before any work
    tasks = task_args.choices(args, reference, project)       # the request's, with the project's stored choices
    report = api.evaluate_on_dataset(ds, request, tasks=tasks)
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


def _print_skipped(ds) -> None:
    for name, why in ds.skipped[:20]:
        print(f"skipped    {printable(name, 80)}: {printable(why, 120)}")
    if len(ds.skipped) > 20:
        print(f"skipped    ... and {len(ds.skipped) - 20} more (see --json)")


def _print_recipe(ds) -> None:
    print(f"preprocessing: {printable(ds.recipe.describe(), 200)}")
    print(f"  why: {printable(ds.recipe_reason, 300)}")


def _recipe(args: argparse.Namespace, ds) -> int:
    """data recipe: show the dataset's recipe (and the model's suggestion), or change and save it."""
    suggestion = api.suggest_preprocessing(api.load(args.model)) if args.model else None
    if args.suggest and suggestion is None:
        raise StudioError("--suggest saves the model's suggestion: add --model M.onnx", code=ErrorCode.BAD_OPTION)
    changed = recipe_args.recipe_from_args(args, suggestion[0] if args.suggest else ds.recipe)
    if args.suggest or changed is not None:
        recipe = changed if changed is not None else suggestion[0]
        reason = (f"the model's suggestion ({suggestion[1]})" if args.suggest and changed is None else
                  f"set on the command line: {recipe_args.given(args)}" + (", on the model's suggestion"
                                                                         if args.suggest else ""))
        ds = api.set_dataset_recipe(ds, recipe, reason=reason)
    if args.json:
        print_json({"dataset": ds.name, "recipe": ds.recipe.to_dict() if ds.recipe else None,
                    "reason": ds.recipe_reason, "saved": args.suggest or changed is not None,
                    "suggestion": {"recipe": suggestion[0].to_dict(), "reason": suggestion[1]} if suggestion else None})
        return 0
    if ds.recipe is None:
        print(f"{printable(ds.name, 60)}: {ds.kind} samples have no preprocessing recipe")
    else:
        _print_recipe(ds)
    if suggestion is not None:
        print(f"suggested: {printable(suggestion[0].describe(), 200)}")
        print(f"  why: {printable(suggestion[1], 400)}")
    return 0
