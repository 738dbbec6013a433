"""onnx-studio edit MODEL --script edits.json -o OUT [--check-only] [--no-verify] [--json] [--project NAME]"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from studio import api
from studio.cli.common import print_json
from studio.cli.project_args import add_project_argument, keep_json, kept, with_project
from studio.core.errors import StudioError
from studio.core.fmt import printable
from studio.core.requests import EditRequest

NAME = "edit"
HELP = "Edit the graph with a script (JSON/YAML): checked, verified against the original, then saved."


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_project_argument(p)
    p.add_argument("model", help="path to a .onnx file (external data next to it; only read)")
    p.add_argument("--script", required=True, help="the edit script: a JSON (or YAML) list of operations")
    p.add_argument("-o", "--output", help="where to write the edited model (.onnx; a split's second model goes to "
                   "OUT.part2.onnx)")
    p.add_argument("--check-only", action="store_true", help="apply in memory and check; write nothing")
    p.add_argument("--no-verify", action="store_true", help="skip the numeric verification (not recommended)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def request_of(args: argparse.Namespace, script=None) -> EditRequest:  # noqa: ANN001 - an EditScript
    """The one ``EditRequest`` these flags ask for (``script``: ``--script`` already read)."""
    script = script if script is not None else api.edit_script(args.script)
    return EditRequest(operations=script.to_list(), verify=not args.no_verify, check_only=args.check_only)


def _run(args: argparse.Namespace) -> int:
    script = api.edit_script(args.script)            # read once: its folder is where its relative files are
    request = request_of(args, script)
    handle = api.load(args.model)
    k = kept(args)
    version = None
    if args.check_only:
        result = api.validate_edit_script(handle, script)
    else:
        if not args.output:
            raise StudioError("edit needs -o OUT.onnx (or --check-only)")
        if Path(args.output).suffix != ".onnx":
            raise StudioError("-o must name a .onnx file")
        if k is None:
            result = api.edit(handle, request, args.output, base_dir=script.base_dir)
        else:
            result, version = _edit_kept(k, handle, script.base_dir, args, request)
    report = result.to_dict()
    if version is not None:
        report["version"] = {"id": version.id, "parent": k.version.id}
    keep_json(args, "edit.json", report, "edit")
    if args.json:
        print_json(report)
    else:
        _print(result, report)
    return 0


def _edit_kept(k, handle, base_dir: Path, args: argparse.Namespace, request: EditRequest):
    """With --project the edit is kept as a version before -o is written (``ProjectRun.staged``): an edit
    the project refuses (byte-identical to a version: "same as vN", R63) leaves nothing at -o."""
    out = Path(args.output)
    with k.staged(out) as staged:
        result = api.edit(handle, request, staged, base_dir=base_dir)
        version = api.add_edited_version(k.model, k.version.id, result, job_id=k.job.id, request=request)
    return replace(result, outputs=tuple(out.with_name(p.name) for p in result.outputs)), version


def _print(result, report: dict) -> None:
    for i, note in enumerate(result.notes, 1):
        print(f"edit #{i:<3} {printable(note, 160)}")
    for kind in ("inputs", "outputs"):
        a, b = result.before[kind], [x for part in result.after for x in part[kind]]
        if a != b:
            print(f"{kind:<9} {printable(', '.join(a), 200)}  ->  {printable(', '.join(b), 200)}")
    if result.nodes_renamed:
        print(f"renamed   {len(result.nodes_renamed)} nodes: {printable(', '.join(result.nodes_renamed[:10]), 240)}")
    if result.nodes_removed:
        print(f"removed   {len(result.nodes_removed)} nodes: {printable(', '.join(result.nodes_removed[:10]), 240)}")
    if result.nodes_added:
        print(f"added     {len(result.nodes_added)} nodes: {printable(', '.join(result.nodes_added[:10]), 240)}")
    if result.verification is not None:
        print(f"verified  {result.verification.verdict}: {printable(result.verification.message, 200)}")
    where = ", ".join(printable(str(p), 200) for p in result.outputs) or "nothing written (--check-only)"
    print(f"result    {printable(result.message, 200)}; {where}")
    if "version" in report:
        print(f"version   {report['version']['id']} (undo: select its parent {report['version']['parent']})")


run = with_project(NAME, _run)
