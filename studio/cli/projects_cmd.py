"""onnx-studio projects list|show|create|rename|export|import|rm  (--projects-root DIR or
$ONNX_STUDIO_PROJECTS_ROOT; default ~/.local/share/onnx-studio/projects)"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict

from studio import api
from studio.cli.common import print_json
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.fmt import human_bytes, printable

NAME = "projects"
HELP = "List, show, create, rename, export (zip), import and remove projects."


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.add_parser("list", help="every project: id, name, models, versions, jobs, size").add_argument(
        "--json", action="store_true")
    show = sub.add_parser("show", help="a project's models, versions, jobs and artifacts")
    show.add_argument("project", help="name or id")
    show.add_argument("--json", action="store_true")
    create = sub.add_parser("create", help="a new empty project")
    create.add_argument("name")
    create.add_argument("--json", action="store_true")
    ren = sub.add_parser("rename", help="give a project a new name")
    ren.add_argument("project")
    ren.add_argument("name")
    exp = sub.add_parser("export", help="write the project as one zip")
    exp.add_argument("project")
    exp.add_argument("-o", "--output", required=True, help="the .zip to write")
    imp = sub.add_parser("import", help="a new project from an exported zip")
    imp.add_argument("archive")
    imp.add_argument("--name", help="name of the imported project (default: the one in the archive)")
    rm = sub.add_parser("rm", help="delete a project and all its files")
    rm.add_argument("project")
    rm.add_argument("--yes", action="store_true", help="required: confirms the deletion")
    for action in (sub.choices.values()):
        action.add_argument("--projects-root", dest="projects_root_here", metavar="DIR", default=argparse.SUPPRESS,
                            help="where projects live (as the global --projects-root)")


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "-"


def _show(project, as_json: bool) -> None:
    models = [{"id": m.id, "name": m.name, "versions": [asdict(v) for v in api.project_model(project, m.id).versions],
               "settings": api.get_settings(project, m.id)} for m in api.project_models(project)]
    data = {"id": project.id, "name": project.name, "settings": api.get_settings(project), "models": models,
            "jobs": [asdict(j) for j in api.project_jobs(project)],
            "artifacts": [asdict(a) for a in api.project_artifacts(project)]}
    if as_json:
        print_json(data)
        return
    print(f"project  {printable(project.name, 120)}  id {project.id}")
    for m in models:
        print(f"model    {m['id']}  {printable(m['name'], 80)}")
        for v in m["versions"]:
            parent = f" <- {v['parent']}" if v["parent"] else ""
            print(f"  {v['id']:<5} {printable(v['label'], 50):<50} {v['sha256'][:12]}{parent}")
    for j in data["jobs"]:
        msg = f"  {printable(j['message'], 100)}" if j["message"] else ""
        print(f"job      {j['id']:<24} {j['kind']:<10} {j['state']:<12} {_when(j['started'])}{msg}")
    for a in data["artifacts"]:
        print(f"artifact {a['kind']:<14} {printable(a['path'], 120)}")


def run(args: argparse.Namespace) -> int:
    action = getattr(args, "action", None)
    if action in (None, "list"):
        infos = api.list_projects()
        if getattr(args, "json", False):
            print_json([asdict(i) for i in infos])
            return 0
        if not infos:
            print(f"no projects under {printable(str(api.projects_root()), 200)}")
        for i in infos:
            if i.damaged:                 # SQLite calls the catalog corrupt (or it has no schema, or is gone)
                print(f"{i.id}  DAMAGED: {printable(i.damaged, 160)} (remove it with `onnx-studio projects rm "
                      f"{i.id} --yes`, or restore its folder from a backup)")
                continue
            if i.unreadable:              # permissions, a failing disk, a busy lock: nothing to delete for
                print(f"{i.id}  CANNOT BE READ HERE: {printable(i.unreadable, 200)}")
                continue
            print(f"{i.id}  {printable(i.name, 50):<50} {i.models} models, {i.versions} versions, {i.jobs} jobs, "
                  f"{human_bytes(i.size_bytes)}, changed {_when(i.updated)}" + ("  (read-only)" if i.read_only else ""))
        return 0
    if action == "show":
        _show(api.open_project(args.project), args.json)
    elif action == "create":
        p = api.create_project(args.name)
        print_json({"id": p.id, "name": p.name}) if args.json else print(f"created {p.id}  {printable(p.name, 120)}")
    elif action == "rename":
        p = api.rename_project(api.open_project(args.project, unique=True), args.name)
        print(f"renamed {p.id} to {printable(p.name, 120)}")
    elif action == "export":
        if not args.output.lower().endswith(".zip"):
            raise StudioError("-o must name a .zip file")
        out = api.export_project(api.open_project(args.project), args.output)
        print(f"exported to {printable(str(out), 200)}")
    elif action == "import":
        p = api.import_project(args.archive, name=args.name)
        print(f"imported as {p.id}  {printable(p.name, 120)}")
    elif action == "rm":
        try:
            p = api.open_project(args.project, unique=True)      # never the wrong one of two of a name
        except StudioError as exc:
            if exc.code != ErrorCode.BAD_CATALOG:
                raise
            if not args.yes:                      # a damaged project: removed by its id
                raise StudioError(f"project {args.project} is damaged ({exc}); add --yes to delete it and all "
                                  "its files") from None
            api.delete_project(args.project)
            print(f"deleted {args.project}")
            return 0
        if not args.yes:
            raise StudioError(f"this deletes project '{p.name[:60]}' and all its files; add --yes to confirm")
        api.delete_project(p)
        print(f"deleted {p.id}")
    return 0
