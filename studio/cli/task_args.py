"""``--task OUTPUT=KIND`` (repeatable) shared by ``data eval``, ``precision``, ``compare``, ``export`` and
``check``: the task an output is judged by when the studio's inference (``studio.data.tasks``) is
wrong. With ``--project`` the choice is stored for the model and reused by later runs."""

from __future__ import annotations

import argparse
import sys

from studio import api
from studio.core.error_codes import ErrorCode
from studio.core.fmt import printable
from studio.core.errors import StudioError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", action="append", dest="tasks", metavar="OUTPUT=KIND",
                   help=f"the task of an output when the inferred one is wrong ({', '.join(api.OUTPUT_TASKS)}); repeatable; "
                        "kept in the --project for the next runs (KIND 'auto' forgets it)")


def add_goal_argument(p: argparse.ArgumentParser, *, old: str = "--target",
                      help: str = "with --dataset: the task-metric goal, e.g. top1-agreement>=0.99") -> None:
    """``--goal METRIC>=X``, the task-metric goal, named alike on every command (``--target`` names a machine
    where a command has one). ``old``: the command's former spelling, still read (hidden), with a note."""
    p.add_argument("--goal", metavar="METRIC>=X", help=help)
    p.add_argument(old, dest="old_goal", metavar="METRIC>=X", help=argparse.SUPPRESS)
    p.set_defaults(old_goal_flag=old)


def goal(args: argparse.Namespace) -> str | None:
    """The goal ``--goal`` (or its old spelling, with a one-line deprecation note on stderr) gives."""
    old = getattr(args, "old_goal", None)
    if old:
        flag = getattr(args, "old_goal_flag", "--target")
        print(f"note: '{flag} METRIC>=X' is deprecated: write --goal METRIC>=X", file=sys.stderr)
        if getattr(args, "goal", None):
            raise StudioError(f"give one task-metric goal: --goal, not both --goal and {flag}",
                              code=ErrorCode.BAD_OPTION)
    return getattr(args, "goal", None) or old or None


def choices(args: argparse.Namespace, handle, project=None) -> dict[str, str]:
    """The {output: kind} this run uses: the project's stored choices, then ``--task`` (stored)."""
    raw = list(getattr(args, "tasks", None) or ())
    forget = [r.rpartition("=")[0].strip() for r in raw if r.rpartition("=")[2].strip().lower() == "auto"]
    given = api.parse_task_options([r for r in raw if r.rpartition("=")[2].strip().lower() != "auto"])
    if forget and project is not None:
        api.set_output_tasks(project, handle, {k: None for k in forget})
    elif forget:
        raise StudioError(f"--task OUTPUT=auto forgets a choice stored in a project: add --project "
                          f"(or give one of {', '.join(api.OUTPUT_TASKS)})", code=ErrorCode.BAD_OPTION)
    return api.task_choices(handle, given, project=project)


def print_tasks(handle, tasks: dict[str, str], project=None, *, stream=None) -> None:
    """One line per output: its task and why (``task  prob: classification ([N, 2] softmax ...)``)."""
    out = stream or sys.stdout
    stored = api.stored_output_tasks(project, handle) if project is not None else {}
    given = {k: v for k, v in tasks.items() if stored.get(k) != v}
    for t in api.output_tasks(handle, given, project=project):
        print(f"task       {printable(t.text(), 300)}", file=out)
