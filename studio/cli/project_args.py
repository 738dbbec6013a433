"""``--project NAME`` for the commands that produce results (inspect, check, optimize,
precision, profile, export): the input model lands in the project (once per content),
the run is a job row (written before, closed after) and its result is kept there:
a report as an artifact, a produced model as a new version of the input's model."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from studio import api
from studio.core import outputs
from studio.core.fmt import printable
from studio.core.paths import atomic_write_text, safe_name
from studio.core.errors import StudioError


def add_project_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--project", metavar="NAME",
                   help="also store the result (model version, report, job) in this project (its name or id; "
                        "created when there is none; see `onnx-studio projects`)")


class ProjectRun:
    """What one command run keeps in its project."""

    def __init__(self, project, model, version, job) -> None:
        self.project, self.model, self.version, self.job = project, model, version, job

    def save_json(self, name: str, obj: Any, kind: str = "report") -> Path:
        path = self.job.dir / safe_name(name, default="report.json")
        atomic_write_text(path, json.dumps(obj, indent=1, default=str, allow_nan=False))
        self.job.record_artifact(path, kind, model_id=self.model.id, version_id=self.version.id)
        return path

    def keep(self, source: str | Path, kind: str) -> Path | None:
        """Copy a produced file or folder into the job's artifacts (the user's copy stays)."""
        src = Path(source)
        if not src.exists():
            return None
        dst = self.job.dir / safe_name(src.name, default="artifact")
        if src.is_dir():
            shutil.copytree(src, dst, symlinks=True)  # scratch: into the project job's own artifact folder
        else:
            shutil.copyfile(src, dst)  # scratch: into the project job's own artifact folder
        self.job.record_artifact(dst, kind, model_id=self.model.id, version_id=self.version.id)
        return dst

    def add_version(self, path: str | Path, label: str, provenance: dict | None = None, *,
                    refuse_same: bool = False):
        return api.add_version(self.model, path, label=label, parent=self.version.id, provenance=provenance,
                               job_id=self.job.id, refuse_same=refuse_same)

    @contextmanager
    def staged(self, output: str | Path) -> Iterator[Path]:
        """Where a command writes a model it keeps as a version: the project's scratch, under -o's name.
        -o (and what was written beside it: a split's parts, external data) is written only when the block
        ends without an error, so a version the project refuses ("same as vN", R63) leaves nothing at -o,
        not even a new folder (the writer rule: nothing written on a refusal)."""
        out = Path(output)
        if out.parent.is_dir():             # a bad -o is said before any work
            outputs.check_destination(out)
        staging = self.project.scratch_dir("out")        # <project>/tmp/out-*, swept when the project opens
        try:
            yield staging / out.name
            for f in sorted(p for p in staging.iterdir() if p.is_file()):
                outputs.copy_file(f, out.with_name(f.name))
        finally:
            shutil.rmtree(staging, ignore_errors=True)  # scratch: the project's own staging folder made above


@contextmanager
def project_run(args: argparse.Namespace, kind: str, model: str | Path,
                job_args: dict | None = None) -> Iterator[ProjectRun | None]:
    """Yields None without ``--project``; else the run's ``ProjectRun`` inside its job."""
    name = getattr(args, "project", None)
    if not name:
        yield None
        return
    project = api.open_project(name, create=True)
    pm, version = api.model_for(project, model)
    with api.job(project, kind, job_args or {}, model_id=pm.id, version_id=version.id) as job:
        yield ProjectRun(project, pm, version, job)
    print(f"stored in project '{printable(project.name, 80)}' ({project.id}): model {pm.id} version {version.id}, "
          f"job {job.id}", file=sys.stderr)


def _job_args(args: argparse.Namespace) -> dict:
    out = {}
    for k, v in vars(args).items():
        if k.startswith("_") or k in ("project", "kept"):
            continue
        try:
            json.dumps(v)
        except (TypeError, ValueError):
            v = str(v)
        out[k] = v
    return out


def with_project(kind: str, run, model_of=lambda a: getattr(a, "model", None), request_of=None):
    """Wrap a command's ``run(args)``: inside a job of ``--project`` when given; the command
    keeps results with ``kept(args)``. ``request_of(args)``: the request the flags build (or None), stored
    in the job row under ``request`` as the pages store theirs; flags it refuses are said by the run, in its job."""
    def wrapped(args: argparse.Namespace) -> int:
        model = model_of(args) if getattr(args, "project", None) else None
        if model is None:
            args.kept = None
            return run(args)
        job_args = _job_args(args)
        try:
            request = request_of(args) if request_of is not None else None
        except StudioError:
            request = None
        if request is not None:
            job_args["request"] = request.to_dict()
        with project_run(args, kind, model, job_args) as kept:
            args.kept = kept
            code = run(args)
            if kept is not None and code:
                kept.job.message = f"exit code {code}"
            return code
    return wrapped


def kept(args: argparse.Namespace) -> ProjectRun | None:
    return getattr(args, "kept", None)


def keep_json(args: argparse.Namespace, name: str, obj: Any, kind: str = "report") -> None:
    k = kept(args)
    if k is not None:
        k.save_json(name, obj, kind)
